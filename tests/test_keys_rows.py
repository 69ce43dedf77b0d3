"""The index of the row tests: one test per row of the keys table (`eqxstable/_keys/README.md`),
each checking the property its row promises on equal but distinct objects, so that it fails when
the row's handler is removed or weakened (checked by hand for every row; see tests/README.md).
`ROW_TESTS` names each row's test; `test_row_ids_agree` checks that the README, the script that
breaks each row (`scripts/check_key_rows.py`) and `ROW_TESTS` name the same rows.

The row tests themselves are by kind: values by value (`test_keys_value_rows.py`), objects by
identity or as constants (`test_keys_object_rows.py`), callables (`test_keys_function_rows.py`),
closure cells (`test_keys_cell_rows.py`), and the allowlisted library values and what the
allowlist leaves out (`test_keys_allowlisted_values.py` and its neighbours)."""

import importlib.util
import pathlib
import re


_VALUES = "tests/test_keys_value_rows.py::"
_OBJECTS = "tests/test_keys_object_rows.py::"
_FUNCTIONS = "tests/test_keys_function_rows.py::"
_CELLS = "tests/test_keys_cell_rows.py::"
_EQUALITY = "tests/test_keys_equality.py::"
_IDENTITY = "tests/test_keys_identity_objects.py::"
_LIBRARY = "tests/test_keys_library_reads.py::"
_ALLOWED = "tests/test_keys_allowlisted_values.py::"
# Row id (`eqxstable/_keys/README.md`) -> the test that defends it.
ROW_TESTS = {
    "K-value": _VALUES + "test_plain_values_by_exact_type_and_value",
    "K-float": _VALUES + "test_floats_and_complexes_by_bits",
    "K-numpy-scalar": _VALUES + "test_numpy_scalars_by_type_dtype_and_bytes",
    "K-builtin-subclass": _VALUES + "test_builtin_subclasses_by_value_and_attributes",
    "K-range": _VALUES + "test_ranges_and_slices_by_start_stop_step",
    "K-enum": _VALUES + "test_enum_members_by_class_and_value",
    "K-tuple": _VALUES + "test_tuples_by_exact_type_and_items",
    "K-frozen-dataclass": _VALUES + "test_frozen_dataclasses_and_modules_by_class_and_fields",
    "K-decimal": _VALUES + "test_decimals_by_sign_digits_and_exponent",
    "K-fraction": _ALLOWED + "test_allowlisted_library_values",
    "K-datetime": _ALLOWED + "test_allowlisted_library_values",
    "K-path": (
        "tests/test_keys_paths.py::"
        "test_paths_by_type_and_text_and_a_concrete_one_reached_is_never_shared"
    ),
    "K-pattern": _ALLOWED + "test_allowlisted_library_values",
    "K-uuid": _ALLOWED + "test_allowlisted_library_values",
    "K-signature": _ALLOWED + "test_allowlisted_library_values",
    "K-dtype": _ALLOWED + "test_structured_dtypes_watched_never_substituted",
    "K-jax-value": _ALLOWED + "test_jax_values_by_their_own_eq_within_the_type_and_substituted",
    "K-key-path": "tests/test_keys_wrappers.py::test_key_path_entries_type_exactly",
    "K-own-eq": _EQUALITY + "test_own_eq_is_its_own_eq_type_exactly_never_substituted",
    "K-hash-without-eq": _VALUES + "test_hash_without_eq_is_identity_with_a_warning",
    "K-mutable": _OBJECTS + "test_mutables_by_identity_and_contents",
    "K-array-top": _OBJECTS + "test_top_level_arrays_by_contents",
    "K-array-reached": _OBJECTS + "test_captured_arrays_by_identity_and_bytes",
    "K-jax-array": _OBJECTS + "test_jax_arrays_by_identity",
    "K-function": _FUNCTIONS + "test_functions_by_code_cells_defaults_attributes_and_globals",
    "K-module-attrs": _LIBRARY + "test_library_data_read_by_a_function_is_keyed",
    "K-impure-library": (
        "tests/test_keys_library_calls.py::test_readers_are_never_one_key_and_never_substituted"
    ),
    "K-cell": _CELLS + "test_closure_cells",
    "K-counter-cell": _CELLS + "test_counter_cells_by_identity_alone",
    "K-trace-log": ("tests/test_keys_trace_log.py::test_a_function_reading_the_log_sees_it_change"),
    "K-const-subscript": "tests/test_keys_const_subscript.py::test_only_the_items_read_are_keyed",
    "K-partial": _FUNCTIONS + "test_partials",
    "K-method": _FUNCTIONS + "test_bound_methods",
    "K-jit": _FUNCTIONS + "test_jax_jit_functions",
    "K-jaxpr": "tests/test_key_jaxpr.py::test_the_same_computation_converted_twice_has_one_key",
    "K-user-class": _OBJECTS + "test_user_classes_watched",
    "K-jaxtyping-array": (
        "tests/test_keys_jaxtyping_classes.py::test_rebuilt_annotations_share_and_differing_ones_do_not"
    ),
    "K-treedef": _ALLOWED + "test_treedefs_by_node_data_type_exactly",
    "K-user-module": _OBJECTS + "test_user_modules_read_whole",
    "K-library-code": _OBJECTS + "test_library_objects_are_constants",
    "K-library-object": _OBJECTS + "test_library_objects_holding_user_functions",
    "K-dispatch": "tests/test_keys_library_registries.py::test_singledispatch_register_is_seen",
    "K-primitive": "tests/test_keys_primitives.py::test_a_primitive_s_rules_are_in_its_key",
    "K-closure-function": (
        "tests/test_keys_closure_to_pytree.py::test_closures_that_compute_differently_never_share"
    ),
    "K-library-container": _IDENTITY + "test_weak_containers_identity_and_items_watched",
    "K-opaque": _IDENTITY + "test_c_objects_with_hidden_state_are_identity",
    "K-buffer": _IDENTITY + "test_buffers_identity_and_bytes_watched",
    "K-weakref": _IDENTITY + "test_weak_references_are_identity_never_substituted",
    "K-descriptor": _ALLOWED + "test_descriptors_by_the_functions_they_run",
    "K-mapping-proxy": "tests/test_keys_edges.py::test_what_a_container_holds_is_watched",
    "K-too-deep": _OBJECTS + "test_too_deep_and_unreadable",
    "K-node-data": (
        "tests/test_jit_cache.py::test_node_data_made_afresh_by_each_flatten_is_keyed_by_contents"
    ),
    "K-canonical-form": (
        "tests/test_stabilize_c_writes.py::"
        "test_stable_jit_retraces_the_module_whose_program_it_holds"
    ),
}


def test_row_ids_agree():
    """The README's table, `scripts/check_key_rows.py` and `ROW_TESTS` name the same rows, and
    each row's test exists."""
    root = pathlib.Path(__file__).parent.parent
    readme = (root / "eqxstable" / "_keys" / "README.md").read_text()
    in_readme = re.findall(r"^\| `(K-[a-z-]+)` \|", readme, flags=re.MULTILINE)
    assert len(in_readme) == len(set(in_readme))
    spec = importlib.util.spec_from_file_location(
        "check_key_rows", root / "scripts" / "check_key_rows.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert set(in_readme) == set(script.BREAKS) == set(ROW_TESTS)
    for where in ROW_TESTS.values():
        path, name = where.split("::")
        assert f"def {name}(" in (root / path).read_text(), where
