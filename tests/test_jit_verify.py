"""Verify mode (`_jit/_verify.py`) compares what a program's executable depends on, no less and
no more: a NaN in a jaxpr equals itself, so a program with a NaN literal verifies clean on every
hit (a NaN compared by `==` raised `es.StaleProgramError` on diffrax's
`DenseInterpolation.evaluate`, where nothing had changed); a literal whose bits changed where its
printed form did not is still caught. Under `jax.disable_jit()` nothing is compiled, so verify
mode does nothing and the outputs are the eager ones (it traced again there and failed with a
`TypeError` on a non-array output)."""

import struct

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jax import lax

import eqxstable as es

from .helpers import enable_x64


def _where_nan(x):
    return jnp.where(x > 0, x, jnp.nan)


def _full_nan(x):
    return x + jnp.full(x.shape, jnp.nan)


def _scan_nan(x):
    def step(carry, y):
        return carry + jnp.where(y > 0, y, jnp.nan), y

    return lax.scan(step, 0.0, x)[0]


def _pad_nan(x):
    return lax.pad(x, jnp.nan, [(1, 1, 0)])


def _nested_jit_nan(x):
    return jax.jit(_where_nan)(x)


NAN_PROGRAMS = [_where_nan, _full_nan, _scan_nan, _pad_nan, _nested_jit_nan]


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("fn", NAN_PROGRAMS, ids=lambda f: f.__name__)
def test_a_nan_literal_verifies_clean_on_every_hit(fn):
    x = jnp.asarray([-1.0, 0.5, 2.0])
    xs = jnp.stack([x, -x])
    run = es.filter_jit(fn, verify=True)
    # Top level, under `vmap` and inside an outer `jit` (diffrax calls its interpolation inside
    # its own solve, batched): each a miss, then hits that verify mode traces again.
    for _ in range(3):
        _same_bits(run(x), fn(x))
        _same_bits(jax.vmap(run)(xs), jax.vmap(fn)(xs))
        _same_bits(jax.jit(run)(x), jax.jit(fn)(x))


def _float_from_bits(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


# Any float that float32 holds (NumPy warns on a larger one), NaNs with any payload and both
# zeros included.
_floats = st.one_of(
    st.floats(width=32, allow_nan=True, allow_infinity=True),
    st.integers(0, 2**52 - 1).map(lambda m: _float_from_bits(0x7FF0000000000000 | m | 1)),
    st.integers(0, 2**52 - 1).map(lambda m: _float_from_bits(0xFFF0000000000000 | m | 1)),
)


@settings(max_examples=25, deadline=None)
@given(fill=_floats)
def test_any_float_literal_verifies_clean(fill):
    def fn(x):
        return jnp.where(x > 0, x, fill) * 1.5

    x = jnp.asarray([-1.0, 2.0])
    run = es.filter_jit(fn, verify=True)
    # The program `jax.jit` compiles, bit for bit (eager differs on subnormals, which XLA's
    # fused program keeps).
    expected = jax.jit(fn)(x)
    for _ in range(3):
        _same_bits(run(x), expected)


# Two NaNs that differ in their high payload bits, which float32 keeps.
_NAN_A = _float_from_bits(0x7FF8000020000000)
_NAN_B = _float_from_bits(0x7FF8000040000000)


def forward(x):
    return jax.nn.silu(x) * 2.0


def test_verify_still_catches_a_changed_literal_that_prints_the_same(monkeypatch):
    # Library code is taken as constant by the key (what the program reads of `jax.nn` is keyed,
    # not what `jax.nn.silu` reads inside JAX), so a function monkeypatched inside a library is
    # served the old program: verify mode's job is to say so, also where only a NaN's payload
    # changed.
    from jax._src.nn import functions

    monkeypatch.setattr(functions, "sigmoid", lambda x: x + _NAN_A)
    x = jnp.asarray([1.0])
    run = es.filter_jit(forward, verify=True)
    first = np.asarray(run(x))
    _same_bits(run(x), first)
    monkeypatch.setattr(functions, "sigmoid", lambda x: x + _NAN_B)
    jax.nn.silu.clear_cache()  # pyright: ignore  # JAX's own cache of the jitted `silu` held the old trace.
    # The executable depends on the payload: the eager outputs differ bit for bit.
    assert np.asarray(forward(x)).tobytes() != first.tobytes()
    with pytest.raises(es.StaleProgramError, match="prints the same, but a value"):
        run(x)


def _halve_and_sin(x):
    return x / 2, jnp.sin, {"calls": 1}


@pytest.mark.parametrize("flag", [True, False])
def test_verify_does_nothing_under_disable_jit(flag):
    inner = es.filter_jit(_halve_and_sin, verify=flag)

    def use(x):
        y, f, extra = inner(x)
        return f(y) + extra["calls"]

    x = jnp.arange(3.0)
    expected = jnp.sin(x / 2) + 1
    with jax.disable_jit():
        for _ in range(3):
            # Top level: the function's own outputs, non-array leaves as they are.
            y, f, extra = inner(x)
            _same_bits(y, x / 2)
            assert f is jnp.sin and extra == {"calls": 1}
            _same_bits(use(x), expected)
            # Inside a trace that `disable_jit` leaves on (diffrax's `filter_eval_shape`): the
            # call runs inline; verify mode traced it again as a program and failed on `jnp.sin`.
            out = jax.eval_shape(use, x)
            assert (out.shape, out.dtype) == (expected.shape, expected.dtype)
            _same_bits(jax.vmap(use)(x[:, None]), expected[:, None])
    # And jitted afterwards, each call verified as usual.
    for _ in range(2):
        _same_bits(inner(x)[0], x / 2)
        np.testing.assert_allclose(use(x), expected, rtol=1e-6)


def _counting():
    runs = 0

    def fn(x):
        nonlocal runs
        runs += 1
        return x + runs

    return fn


def test_an_eager_call_leaves_verify_mode_computing_what_normal_mode_does():
    # A function that changes itself when it runs: under `disable_jit` it runs without a trace,
    # which leaves the entry's program stale in normal mode (the next call retraces, a `mutated`
    # miss). Verify mode must not file the eager run as if it had been a trace of the program.
    x = jnp.zeros(())
    outs = {}
    for flag in (False, True):
        run = es.filter_jit(_counting(), verify=flag)
        seen = [float(run(x))]
        with jax.disable_jit():
            seen.append(float(run(x)))
        seen.append(float(run(x)))
        outs[flag] = seen
    assert outs[False] == outs[True] == [1.0, 2.0, 3.0]


def test_a_program_per_configuration_is_verified_against_its_own_trace():
    # One entry, a program for each configuration: a hit under the default configuration after
    # a call under x64 is compared with the default trace, not the x64 one.
    wrapper = es.filter_jit(lambda x: x + jnp.arange(3).sum(), verify=True)
    x = jnp.ones(3, jnp.float32)
    assert wrapper(x).tolist() == [4.0] * 3
    with enable_x64():
        assert wrapper(x).tolist() == [4.0] * 3
    for _ in range(2):
        assert wrapper(x).tolist() == [4.0] * 3
