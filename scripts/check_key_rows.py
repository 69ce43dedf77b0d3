"""Breaks each row of the keys table (`eqxstable/_keys/README.md`) in turn and checks that the
tests notice: for every row, a weakened handler is patched in, the row tests run, and at least
one must fail. Not part of CI (a minute); run by hand after changing the table:

    python scripts/check_key_rows.py [ROW-ID ...]

Prints one line per row (only the rows named, if any) and exits non-zero if a broken row went
unnoticed.
"""

import subprocess
import sys
import textwrap


TESTS = [
    "tests/test_keys_rows.py",
    "tests/test_keys_value_rows.py",
    "tests/test_keys_object_rows.py",
    "tests/test_keys_function_rows.py",
    "tests/test_keys_cell_rows.py",
    "tests/test_keys_edges.py",
    "tests/test_keys_equality.py",
    "tests/test_keys_identity_objects.py",
    "tests/test_keys_library_reads.py",
    "tests/test_keys_allowlisted_values.py",
    "tests/test_keys_zoo_reproductions.py",
    "tests/test_key_jaxpr.py",
    "tests/test_jit_cache.py",
    "tests/test_keys_library_calls.py",
    "tests/test_keys_wrappers.py",
    "tests/test_keys_paths.py",
    "tests/test_keys_closure_to_pytree.py",
    "tests/test_keys_library_registries.py",
    "tests/test_keys_primitives.py",
    "tests/test_keys_trace_log.py",
    "tests/test_keys_const_subscript.py",
    "tests/test_keys_jaxtyping_classes.py",
    "tests/test_stabilize_c_writes.py",
]

# Row id (the table in `eqxstable/_keys/README.md`) -> Python run before the tests (in a
# plugin), which weakens that row's handler.
BREAKS = {
    "K-value": "r._EXACT[int] = r._EXACT[bool] = lambda o, c, k: ('v', o)",
    "K-float": "r._EXACT[float] = lambda o, c, k: (float, o)",
    "K-numpy-scalar": (
        "r.v.numpy_scalar.__code__ = (lambda o, c, k: (type(o), o.tobytes())).__code__"
    ),
    "K-builtin-subclass": "r.v.builtin_subclass = r.v.value",
    "K-range": "r._EXACT[range] = lambda o, c, k: (range, o.start, o.stop)",
    "K-enum": "r.v.enum_ = lambda o, c, k: ('enum', c_key(o._value_, c, False))",
    "K-tuple": "r.v.tuple_subclass = r.v.tuple_",
    "K-frozen-dataclass": "r.v._owns_dicts = lambda t: False",
    "K-decimal": "r._EXACT[decimal.Decimal] = lambda o, c, k: ('d', float(o))",
    "K-fraction": "r._EXACT[fractions.Fraction] = lambda o, c, k: ('f', o.numerator)",
    "K-datetime": "r._EXACT[datetime.datetime] = lambda o, c, k: ('t', o.year, o.hour)",
    # A concrete path reached by a reader keyed by its text, as on its own (the file system
    # unseen: a rebuilt reader served the old file's trace).
    "K-path": "r.lib.path.__code__ = (lambda o, c, k: (type(o), str(o))).__code__",
    "K-pattern": "r._EXACT[re.Pattern] = lambda o, c, k: ('re', o.pattern)",
    "K-uuid": "r._EXACT[uuid.UUID] = lambda o, c, k: ('u', o.int % 2)",
    "K-signature": "r._EXACT[inspect.Parameter] = lambda o, c, k: ('p', o.name)",
    "K-dtype": "r.lib.dtype_ = lambda o, c, k: ('dtype', o.str)",
    "K-jax-value": "r.lib.jax_value = r.cl.own_eq",
    "K-key-path": "r.lib.key_path_entry = r.cl.own_eq",
    "K-own-eq": "r.cl.own_eq = lambda o, c, k: Equal(o, hash(o))",
    "K-hash-without-eq": "r.hash_without_eq = r.cl.own_eq",
    "K-mutable": "r.mut.list_state = lambda o: ()",
    "K-array-top": "f = r.arr.ndarray; r._EXACT[np.ndarray] = lambda o, c, k: f(o, c, False)",
    "K-array-reached": ("f = r.arr.ndarray; r._EXACT[np.ndarray] = lambda o, c, k: f(o, c, True)"),
    "K-jax-array": "r.v.jax_array = lambda o, c, k: ('array',)",
    "K-function": "r.fn.extra_attrs = lambda o, c, skip=(): ()",
    "K-module-attrs": "g.library_code_object = lambda v: True",
    "K-impure-library": (
        "r.c.pure_library = r.fn.pure_library = g.pure_library = r.mod.pure_library = "
        "lambda o: True"
    ),
    "K-cell": "r.fn.sealed_cells = lambda f, lib: (True,) * len(f.__closure__)",
    "K-counter-cell": "r.fn.counter_cells = lambda f, lib: (True,) * len(f.__closure__)",
    # Every global taken for a log: a function reading the list's contents would hit stale.
    "K-trace-log": "r.fn.appended_only = lambda code: frozenset(code.co_names)",
    # Every global or cell tuple taken as read only at `[0]`: a function iterating it would hit
    # stale.
    "K-const-subscript": (
        "import eqxstable._keys._code as code_\n"
        "code_.subscripts = lambda c, names: {n: (0,) for n in names}\n"
        "r.fn.cell_subscripts = lambda code: {n: (0,) for n in code.co_freevars}"
    ),
    "K-partial": "r.c.partial = lambda o, c, k: (type(o), c_key(o.func, c, False))",
    "K-method": "r._EXACT[types.MethodType] = lambda o, c, k: c_key(o.__func__, c, False)",
    "K-jit": "r._EXACT[r.c.PjitFunction] = lambda o, c, k: c_key(o._fun, c, False)",
    "K-jaxpr": "r._EXACT[r.JAXPR] = r._EXACT[r.CLOSED_JAXPR] = lambda o, c, k: ctx.identity(o, c)",
    "K-user-class": "r.cl.user_class = r.v.constant",
    # The dims alone: `Int[Array, "a b"]` and `Float[Array, "a b"]` one key.
    "K-jaxtyping-array": "r.jt.annotation_class = lambda o, c, k: ('jt', o.dim_str)",
    "K-treedef": "r._EXACT[jax.tree_util.PyTreeDef] = lambda o, c, k: ('treedef', o.num_leaves)",
    "K-user-module": "r.mod.user_module = r.v.constant",
    "K-library-code": "r.library_class = lambda t: False",
    "K-library-object": "r.c.library_object = r.v.constant",
    "K-dispatch": "r.fn.singledispatch = lambda o, c, k: r.v.constant(o, c, k)",
    "K-primitive": "r.prim.with_rules = lambda h: h",
    "K-closure-function": "r.clo.closure_function = lambda o, c, k: ('fwe', o.fn.__code__)",
    "K-library-container": "r.c.container = lambda o, c, k: r.v.constant(o, c, k)",
    "K-opaque": "r.c.opaque = r.v.constant",
    "K-buffer": "r._EXACT[memoryview] = r._EXACT[array.array] = r.v.constant",
    "K-weakref": "r.lmut.weak_ref = r.cl.own_eq",
    # (In `_EXACT` itself: the table holds the handler functions, so rebinding `r.cl.descriptor`
    # would change nothing.)
    "K-descriptor": (
        "r._EXACT[property] = r._EXACT[classmethod] = r._EXACT[staticmethod] = r.v.constant"
    ),
    "K-mapping-proxy": "r._EXACT[types.MappingProxyType] = r.v.constant",
    "K-too-deep": "ctx.cut = lambda o, c, k, s: ('cut',)",
    "K-node-data": "keys_init.Ctx = lambda by_value=False: ctx.Ctx(False)",
    # By its class alone, unwatched: a form changed in place keeps its key (a stale program).
    "K-canonical-form": (
        "from eqxstable._keys._types import Identity\n"
        "r.canonical_form = lambda o, c, k: ('canonical-form', Identity(o._token))"
    ),
}

PRELUDE = """
import array
import datetime
import decimal
import fractions
import inspect
import pathlib
import re
import types
import uuid
import jax
import numpy as np
import eqxstable
from eqxstable import _keys as keys_init
from eqxstable._keys import _context as ctx, _globals as g, _rules as r
from eqxstable._keys._types import Equal
c_key = ctx.key
"""


def run(row: str, patch: str) -> bool:
    """Whether some test fails with `patch` applied."""
    plugin = textwrap.dedent(PRELUDE) + patch + "\n"
    code = (
        "import sys, types, pytest\n"
        "mod = types.ModuleType('break_row')\n"
        f"exec(compile({plugin!r}, 'break_row', 'exec'), mod.__dict__)\n"
        "args = ['-q', '-x', '-p', 'no:benchmark', '-p', 'no:jaxtyping']\n"
        # eqxstable (and equinox's jaxtyping plugin) are imported before pytest starts.
        "args += ['-W', 'ignore::pytest.PytestAssertRewriteWarning']\n"
        "sys.exit(pytest.main([*args, *sys.argv[1:]]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, *TESTS], capture_output=True, text=True)
    if result.returncode not in (0, 1):
        raise SystemExit(
            f"`scripts/check_key_rows.py`: row {row!r}: pytest failed to run:\n"
            + result.stdout[-3000:]
            + result.stderr[-3000:]
        )
    return result.returncode == 1


def main() -> None:
    only = sys.argv[1:]
    if run("none", "pass"):
        raise SystemExit("`scripts/check_key_rows.py`: the tests fail unpatched; fix them first.")
    missed = []
    for row, patch in BREAKS.items():
        if only and row not in only:
            continue
        noticed = run(row, patch)
        print(f"{'noticed' if noticed else 'NOT NOTICED'}: {row}")
        if not noticed:
            missed.append(row)
    if missed:
        raise SystemExit(f"{len(missed)} broken rows went unnoticed: {missed}")


if __name__ == "__main__":
    main()
