"""What a miss says when its cause is not a difference between two signatures: a call passing
objects equivalent to those of a program that calls Python while it runs (pinned, `_pinned.py`),
and a wrapper called inside its own trace (a recursion unrolled at trace time), whose outer miss
is not yet in the history when the inner ones are explained (attack 9b-01, 9b-09)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


def _make():
    return lambda a: np.asarray(a) * 2


_PINNED = (
    "but the program compiled for that one calls Python while it runs (a host callback: "
    "`jax.pure_callback`, `io_callback`, `jax.debug.callback`), so it serves only the very "
    "objects that traced it and this call was traced on its own; pass the same object every "
    "call (build it once and reuse it)."
)


@pytest.mark.counts_traces
def test_an_equivalent_callback_names_the_argument_not_jaxs_cache():
    traces = 0

    @es.filter_jit
    def step(scale, cb, x):
        nonlocal traces
        traces += 1
        return jax.pure_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + scale

    x = jnp.ones(3)
    cb1, cb2 = _make(), _make()
    np.testing.assert_array_equal(step(1.0, cb1, x), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(step(1.0, cb2, x), [3.0, 3.0, 3.0])
    assert traces == 2
    first, second = step.misses
    assert (first.kind, first.path) == ("first", "")
    assert (second.kind, second.path) == ("identity", "args[1]")
    assert second.reason == (
        f"`args[1]` is a new object equivalent to the one an earlier call passed ({cb1!r} -> "
        f"{cb2!r}), " + _PINNED
    )
    # The same object again is a hit, and explaining found nothing left over for later misses.
    step(1.0, cb2, x)
    assert traces == 2
    step(2.0, cb2, x)
    assert (step.misses[-1].kind, step.misses[-1].path) == ("static", "args[0]")


class _Holder(eqx.Module):
    cb: object = eqx.field(static=True)


@pytest.mark.counts_traces
def test_an_equivalent_callback_in_a_static_field_names_the_field():
    traces = 0

    @es.filter_jit
    def step(holders, x):
        nonlocal traces
        traces += 1
        cb = holders["h"].cb
        return jax.pure_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    x = jnp.ones(2)
    cb1, cb2 = _make(), _make()
    step({"h": _Holder(cb1)}, x)
    np.testing.assert_array_equal(step({"h": _Holder(cb2)}, x), [2.0, 2.0])
    assert traces == 2
    miss = step.misses[-1]
    assert (miss.kind, miss.path) == ("identity", "args[0]['h'].cb")
    assert miss.reason == (
        f"`args[0]['h'].cb` is a new object equivalent to the one an earlier call passed "
        f"({cb1!r} -> {cb2!r}), " + _PINNED
    )


def _stepper():
    cb = _make()

    def step(x):
        return jax.pure_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    return step


@pytest.mark.counts_traces
def test_an_equivalent_function_holding_a_callback_names_the_function():
    x = jnp.ones(2)
    first, second = es.filter_jit(_stepper()), es.filter_jit(_stepper())
    first(x)
    np.testing.assert_array_equal(second(x), [2.0, 2.0])
    assert first.cache_info().traces == second.cache_info().traces == 1
    (miss,) = second.misses
    assert (miss.kind, miss.path) == ("identity", "step")
    assert miss.reason == (
        "`step` is a new function object equivalent to the one an earlier call jitted (or holds "
        "new equivalent static parts), " + _PINNED
    )


@pytest.mark.counts_traces
def test_a_recursive_wrapper_names_the_static_depth_once_first():
    traces = 0

    @es.filter_jit
    def f(x, n):
        nonlocal traces
        traces += 1
        if n == 0:
            return x + 1
        return f(x, n - 1) * 2

    out = f(jnp.ones(2), 3)
    np.testing.assert_array_equal(out, [16.0, 16.0])
    assert traces == 4
    # The inner calls miss (and are recorded) before the outer one, each against the call
    # around it, the latest of the equally close ones.
    assert [(m.kind, m.path) for m in f.misses] == [
        ("static", "args[1]"),
        ("static", "args[1]"),
        ("static", "args[1]"),
        ("first", ""),
    ]
    assert [m.reason for m in f.misses[:3]] == [
        f"static value `args[1]` changed: int {n + 1} -> int {n}; every distinct value compiles "
        "a new program; to trace it instead, pass `jnp.asarray(value)` or store it with "
        "`es.field(dynamic=True)`."
        for n in range(3)
    ]
    # The pending signatures are gone after the trace: a new depth is explained against the
    # history of committed misses.
    f(jnp.ones(2), 4)
    assert traces == 5
    assert f.misses[-1].reason.startswith("static value `args[1]` changed: int 3 -> int 4;")


@pytest.mark.counts_traces
def test_a_recursion_that_raises_leaves_nothing_pending():
    @es.filter_jit
    def f(x, n):
        if n == 0:
            if x.ndim:
                raise ValueError("bottom")
            return x
        return f(x, n - 1)

    with pytest.raises(ValueError, match="bottom"):
        f(jnp.ones(2), 2)
    assert [(m.kind, m.path) for m in f.misses] == [
        ("static", "args[1]"),
        ("static", "args[1]"),
        ("first", ""),
    ]
    # The raised traces made no program: the next call is compared with nothing, and nothing
    # of the raised recursion is still pending.
    assert float(f(jnp.ones(()), 0)) == 1.0
    assert (f.misses[-1].kind, f.misses[-1].path) == ("first", "")
