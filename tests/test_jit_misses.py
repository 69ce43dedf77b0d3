"""Accounting and explanations of the stable `filter_jit`: `cache_info()` agrees with a trace
counter and JAX's compile log, and every miss kind is produced and named with its path."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._jit import diff, signature

from .helpers import compile_log, count_traces


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


def _add(x, y):
    return jnp.asarray(x) + jnp.asarray(y)


class _Config:
    """A plain class: compared by identity."""

    def __init__(self, scale):
        self.scale = scale


class _Net(eqx.Module):
    weight: Any
    activation: Callable
    n: Any = eqx.field(static=True, default=1)


def _apply(net, x):
    return net.activation(net.weight * x) * net.n


def _make_activation():
    captured = [2.0]  # a fresh list each time: the lambda can only be keyed by identity
    return lambda v: v * captured[0]


# Each case: (calls, the expected kind and path of the last miss).
_CASES: dict[str, tuple[list[tuple[tuple, dict]], str, str]] = {
    "static": ([((jnp.ones(3), 1), {}), ((jnp.ones(3), 2), {})], "static", "args[1]"),
    "static-type": ([((jnp.ones(3), 1), {}), ((jnp.ones(3), 1.0), {})], "static", "args[1]"),
    "shape": ([((jnp.ones(3), 1), {}), ((jnp.ones(4), 1), {})], "shape", "args[0]"),
    "dtype": (
        [((jnp.ones(3), 1), {}), ((jnp.ones(3, jnp.int32), 1), {})],
        "dtype",
        "args[0]",
    ),
    "weak_type": (
        [((jnp.ones(()), 1), {}), ((jnp.asarray(1.0), 1), {})],
        "weak_type",
        "args[0]",
    ),
    "python-scalar-vs-array": (
        [((jnp.ones(()), 1.0), {}), ((jnp.ones(()), jnp.ones(())), {})],
        "weak_type",
        "args[1]",
    ),
    "kwargs-shape": (
        [((), {"x": jnp.ones(3), "y": 1}), ((), {"x": jnp.ones(5), "y": 1})],
        "shape",
        "kwargs['x']",
    ),
    "structure": (
        [(((jnp.ones(3), jnp.ones(3)), 1), {}), (([jnp.ones(3), jnp.ones(3)], 1), {})],
        "structure",
        "args[0]",
    ),
    "identity": (
        [((jnp.ones(3), _Config(2.0)), {}), ((jnp.ones(3), _Config(2.0)), {})],
        "identity",
        "args[1]",
    ),
}


def _target(*args, **kwargs):
    if args and isinstance(args[-1], _Config):
        return args[0] * args[-1].scale
    if args and isinstance(args[0], (tuple, list)):
        return args[0][0] + args[0][1] * args[1]
    if kwargs:
        return _add(kwargs["x"], kwargs["y"])
    return _add(*args)


@pytest.mark.parametrize("case", list(_CASES))
def test_miss_kind_and_path(case):
    calls, kind, path = _CASES[case]
    counter = count_traces(_target)
    jitted = es.filter_jit(counter)
    with compile_log() as log:
        for args, kwargs in calls:
            jitted(*args, **kwargs)
    misses = jitted.misses
    assert [m.kind for m in misses] == ["first", kind]
    assert misses[-1].path == path
    assert f"`{path}`" in misses[-1].reason
    info = jitted.cache_info()
    assert counter.count == len(misses) == info.misses == info.traces
    # A miss whose trace produced a program already compiled (`1` and `1.0` added to a float32
    # array trace to the same jaxpr) runs it: the compile log agrees with `compiles`.
    assert log.count("_target") == info.compiles == sum(m.compiled for m in misses)


def test_identity_kind_names_the_module_field_and_the_fix():
    jitted = es.filter_jit(_apply)
    jitted(_Net(jnp.ones(3), _make_activation()), jnp.ones(3))
    jitted(_Net(jnp.ones(3), _make_activation()), jnp.ones(3))
    (miss,) = jitted.misses[1:]
    assert (miss.kind, miss.path) == ("identity", "args[0].activation")
    assert "compared by identity" in miss.reason and "es.intern" in miss.reason


def test_nested_static_field_change_is_static_kind():
    jitted = es.filter_jit(_apply)
    jitted(_Net(jnp.ones(3), jnp.tanh, 1), jnp.ones(3))
    jitted(_Net(jnp.ones(3), jnp.tanh, 2), jnp.ones(3))
    miss = jitted.misses[-1]
    assert (miss.kind, miss.path) == ("static", "args[0].n")
    assert "int 1 -> int 2" in miss.reason


def test_closest_entry_is_the_one_with_fewest_differences():
    jitted = es.filter_jit(_add)
    jitted(jnp.ones(3), 1)
    jitted(jnp.ones((2, 2)), 5)
    # Differs from the first call in one leaf (the static), from the second in two.
    jitted(jnp.ones(3), 2)
    miss = jitted.misses[-1]
    assert (miss.kind, miss.path) == ("static", "args[1]")
    assert "more difference" not in miss.reason


def test_structure_names_the_new_node():
    jitted = es.filter_jit(lambda d: d["a"] * 2)
    jitted({"a": jnp.ones(2)})
    jitted({"a": jnp.ones(2), "b": jnp.ones(2)})
    miss = jitted.misses[-1]
    assert miss.kind == "structure"
    assert miss.path in ("args[0]", "args[0]['b']")


def test_explain_lists_every_miss():
    jitted = es.filter_jit(_add)
    jitted(jnp.ones(3), 1)
    jitted(jnp.ones(3), 1)
    jitted(jnp.ones(4), 1)
    text = jitted.explain()
    assert text.startswith("`_add`: 3 calls, 1 hit, 2 misses.")
    assert "1. first" in text and "2. shape at `args[0]`" in text
    assert "float32[3] -> float32[4]" in text


def test_compile_and_trace_seconds_come_from_jax_monitoring():
    jitted = es.filter_jit(_add)
    jitted(jnp.ones(3), 1)
    info = jitted.cache_info()
    assert info.compile_seconds > 0 and info.trace_seconds > 0
    jitted(jnp.ones(3), 1)
    assert jitted.cache_info().compile_seconds == info.compile_seconds


def test_cache_clear_and_clear_caches():
    counter = count_traces(_add)
    jitted = es.filter_jit(counter)
    jitted(jnp.ones(3), 1)
    jitted.cache_clear()
    assert jitted.cache_info()[:4] == (0, 0, 4096, 0)
    jitted(jnp.ones(3), 1)
    es.clear_caches()
    jitted(jnp.ones(3), 1)
    assert counter.count == 3
    assert jitted.cache_info()[:2] == (0, 1)


def test_report_lists_live_wrappers():
    def reported_function(x, n):
        return x * n

    jitted = es.filter_jit(reported_function)
    for n in (1, 2, 2, 3):
        jitted(jnp.ones(2), n)
    table = es.report()
    (row,) = [line for line in table.splitlines() if "reported_function" in line]
    cells = row.split()
    assert cells[0].endswith("reported_function")
    assert cells[1:4] == ["4", "1", "3"]
    assert "static at `args[1]` (x2)" in row
    del jitted, row
    assert "reported_function" not in es.report()


def test_signature_and_diff_are_usable_alone():
    old = signature((jnp.ones(3), 1), {})
    new = signature((jnp.ones(3), 2), {})
    assert diff([], new).kind == "first"
    miss = diff([old], new, name="f")
    assert (miss.kind, miss.path) == ("static", "args[1]")
    assert [path for path, _ in new.leaves] == ["args[0]", "args[1]"]


def _scaled_by(c):
    return lambda x: x * c


class _Opaque:
    def __rmul__(self, x):
        return x


def _apply_fn(x, fn):
    return fn(x)


def test_changed_function_reasons_name_definition_and_variable():
    jitted = es.filter_jit(_apply_fn)
    x = jnp.ones(2)
    jitted(x, _scaled_by(1.0))
    jitted(x, _scaled_by(2.0))
    jitted(x, _scaled_by(_Opaque()))
    jitted(x, _scaled_by(_Opaque()))
    jitted(x, lambda x: x)
    first, captured, _, identity, other = jitted.misses
    assert first.kind == "first"
    assert captured.kind == "static" and captured.path == "args[1]"
    assert "`_scaled_by.<locals>.<lambda>` defined at" in captured.reason
    assert "the `c` it captures changed: 1.0 -> 2.0" in captured.reason
    assert identity.kind == "identity"
    assert "the `c` it captures is a new object (a _Opaque at" in identity.reason
    assert other.kind == "static" and "is another function" in other.reason


def test_closest_entry_counts_every_changed_attribute():
    # float32[4] differs from int32[3] in shape and dtype, float32[3] in dtype only.
    jitted = es.filter_jit(lambda x: x)
    jitted(jnp.ones(3))
    jitted(jnp.ones(4))
    jitted(jnp.ones(3, jnp.int32))
    assert jitted.misses[-1].kind == "dtype"
    assert "float32[3] -> int32[3]" in jitted.misses[-1].reason


class _Options:
    """Pytree node data made afresh by each flatten: hashable, equal by value, holding a dict
    (which `stable_key` alone names by identity)."""

    def __init__(self, options: dict):
        self.options = options

    def __eq__(self, other):
        return type(other) is _Options and other.options == self.options

    def __hash__(self):
        return hash(tuple(sorted(self.options.items())))


@jtu.register_pytree_node_class
class _Box:
    def __init__(self, x, options: dict):
        self.x = x
        self.options = options

    def tree_flatten(self):
        return (self.x,), _Options(dict(self.options))

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], aux.options)


def _scaled(box):
    return box.x * len(box.options)


@pytest.mark.counts_traces
def test_a_miss_names_node_data_only_where_the_cache_saw_it_change():
    # The signature keys node data by the cache's own rule (contents, with the dicts that each
    # flatten makes afresh): equal options are no difference, so the miss is the dtype's.
    traces = 0

    def f(box):
        nonlocal traces
        traces += 1
        return _scaled(box)

    jitted = es.filter_jit(f)
    jitted(_Box(jnp.ones(3), {"scale": 2.0}))
    jitted(_Box(jnp.ones(3), {"scale": 2.0}))
    assert traces == 1
    out = jitted(_Box(jnp.ones(3, jnp.int32), {"scale": 2.0}))
    assert traces == 2 and out.dtype == jnp.int32
    miss = jitted.misses[-1]
    assert (miss.kind, miss.path) == ("dtype", "args[0][<flat index 0>]")
    assert "more difference" not in miss.reason


_OPTION_VALUES = st.one_of(
    st.integers(-2, 2), st.booleans(), st.sampled_from([0.0, 1.0, -0.0]), st.just("a")
)
_OPTIONS = st.dictionaries(st.sampled_from("xy"), _OPTION_VALUES, max_size=2)


@pytest.mark.counts_traces
@settings(max_examples=15, deadline=None)
@given(a=_OPTIONS, b=_OPTIONS)
def test_node_data_in_a_miss_agrees_with_the_cache(a, b):
    # Two calls whose only difference is the node data hit exactly when the cache keys them
    # alike; a call that changes a dtype as well is then explained by the dtype alone, else by
    # the node data.
    for other in (b, dict(a), {**a, "x": 1.0}):
        es.clear_caches()
        jitted = es.filter_jit(_scaled)
        jitted(_Box(jnp.ones(3), a))
        jitted(_Box(jnp.ones(3), other))
        same = jitted.cache_info().misses == 1
        es.clear_caches()
        jitted = es.filter_jit(_scaled)
        jitted(_Box(jnp.ones(3), a))
        jitted(_Box(jnp.ones(3, jnp.int32), other))
        assert jitted.misses[-1].kind == ("dtype" if same else "structure")


def _scale(x, s):
    if s > 1:
        raise ValueError("s must be at most 1")
    return x * s


def test_cache_info_counts_only_what_xla_compiled(compiles):
    wrapper = es.filter_jit(_scale)
    x = jnp.ones(2)
    # Traced inside another trace, which compiles nothing: no compile of its own.
    for s in (0.25, 0.5):
        out = jax.eval_shape(lambda x, s=s: wrapper(x, s), x)
        assert out.shape == (2,)
    # A trace that raised compiled nothing either.
    with pytest.raises(ValueError, match="at most 1"):
        wrapper(x, 2.0)
    assert float(wrapper(x, 0.75)[0]) == 0.75
    info = wrapper.cache_info()
    assert (info.misses, info.traces) == (4, 4)
    assert info.compiles == compiles.count("_scale") == 1
    assert [m.compiled for m in wrapper.misses] == [False, False, False, True]
    assert "inside another trace" in wrapper.misses[0].reason


@pytest.mark.counts_traces
def test_arguments_that_do_not_fit_raise_the_functions_type_error():
    wrapper = es.filter_jit(lambda x, y: x + y, on_recompile="raise")
    x = jnp.ones(2)
    wrapper(x, x)
    # As calling the function would, and `equinox.filter_jit` does: not a refused recompile.
    with pytest.raises(TypeError):
        wrapper(x)  # pyright: ignore[reportCallIssue]
    with pytest.raises(TypeError):
        wrapper(x, x, x)  # pyright: ignore[reportCallIssue]
    assert wrapper.cache_info()[:2] == (0, 1)


def test_a_configuration_change_is_named():
    square = es.filter_jit(lambda x: x @ x)
    x = jnp.ones((2, 2))
    square(x)
    with jax.default_matmul_precision("highest"):
        assert float(square(x)[0, 0]) == 2.0
    (_, miss) = square.misses
    assert miss.kind == "first" and "under this JAX configuration" in miss.reason
    assert "seen before" not in miss.reason
    from jax._src import config as jax_config

    if hasattr(jax_config, "trace_context_names"):  # Named on JAX 0.6 and later.
        assert "`jax_default_matmul_precision` None -> 'highest'" in miss.reason
