"""Literals in the fingerprint: a Python scalar in a jaxpr (JAX >= 0.8 makes it a `TypedFloat`,
`TypedInt` or `TypedComplex`, whose `==` is the builtin's: `TypedFloat(-0.0) == TypedFloat(0.0)`) is
keyed by its exact type, its bits and its dtype (`_keys/_jaxpr_values.scalar_key`), so that a
function computing `1 / -0.0` never runs the program compiled for `1 / 0.0`, and a NaN with another
payload is another program. Every output is compared, bit for bit, with a fresh `jax.jit`."""

import math
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st
from jax.extend.core import Literal

import eqxstable as es
from eqxstable._jit._fingerprint import AVAILABLE, param_key
from eqxstable._keys._jaxpr import jaxpr_key


def _nan(payload: int) -> float:
    # A quiet NaN with the given payload bits (JAX keeps them through a float32 product).
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload << 29))[0]


_floats = st.sampled_from([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, _nan(0), _nan(1), _nan(5)])
_scalars = st.one_of(
    _floats,
    st.booleans(),
    st.sampled_from([0, 1, -1, 2]),
    st.builds(complex, _floats, _floats),
    # Strongly typed: another program for a weakly typed `x`.
    _floats.map(np.float32),
)


def _scale(c):
    # A rebuilt closure: another key at the keys level, so each wrapper traces and the reuse
    # level decides by the jaxpr whether it runs a program compiled before. JAX (0.10) puts `c`
    # in `x * c` as a 0-d array literal and in `jnp.full` as a `TypedFloat` (or int, complex).
    def f(x):
        y = x * c
        return y, 1 / y, 1 / jnp.full(x.shape, c)

    return f


def _bits(out) -> list:
    return [(str(a.dtype), a.shape, np.asarray(a).tobytes()) for a in out]


def _literals(jaxpr) -> list:
    return [
        (type(a.val), np.asarray(a.val).tobytes(), str(a.aval))
        for eqn in jaxpr.jaxpr.eqns
        for a in eqn.invars
        if isinstance(a, Literal)
    ]


@settings(max_examples=60, deadline=None)
@given(_scalars, _scalars)
@example(-0.0, 0.0)
@example(complex(-1, -0.0), complex(-1, 0.0))
@example(_nan(1), _nan(5))
def test_jaxpr_keys_of_literals_are_exact(a, b):
    # Both key functions: the fingerprint's (which keys JAX's own hashable objects by JAX's `==`)
    # and `stable_key`'s. Equal keys only for literals of the same type, bits and abstract value;
    # the same computation traced twice has one key.
    x = jnp.ones(2)
    ja, ja2, jb = (jax.make_jaxpr(_scale(c))(x) for c in (a, a, b))
    for key_of in (param_key, es.stable_key):
        ka, kb = jaxpr_key(ja, key_of), jaxpr_key(jb, key_of)
        assert ka is not None and ka == jaxpr_key(ja2, key_of)
        if ka == kb:
            assert _literals(ja) == _literals(jb)


@pytest.mark.skipif(not AVAILABLE, reason="no reuse by fingerprint on this JAX")
@settings(max_examples=25, deadline=None)
@given(_scalars, _scalars, st.sampled_from([jnp.float32, jnp.int32, jnp.bfloat16]))
@example(-0.0, 0.0, jnp.float32)
@example(-0.0, 0.0, jnp.int32)
@example(complex(-1, -0.0), complex(-1, 0.0), jnp.int32)
@example(_nan(1), _nan(5), jnp.float32)
def test_a_reused_program_computes_what_a_fresh_jit_does(a, b, dtype):
    x = jnp.ones(2, dtype)
    first, second = _scale(a), _scale(b)
    es.filter_jit(first)(x)
    got = es.filter_jit(second)(x)
    assert _bits(got) == _bits(jax.jit(second)(x))


@pytest.mark.skipif(not AVAILABLE, reason="no reuse by fingerprint on this JAX")
@pytest.mark.counts_traces
def test_signed_zero_literals_compile_apart_and_equal_ones_share(compiles):
    traces = 0

    def make(c):
        def f(x):
            nonlocal traces
            traces += 1
            return 1 / jnp.full(x.shape, c)

        return f

    def make_again(c):
        # The same computation in other code: another key, the same jaxpr as `make(c)`'s.
        def g(x):
            nonlocal traces
            traces += 1
            return 1 / jnp.full(x.shape, c)

        return g

    wrappers = [es.filter_jit(m(c)) for m, c in ((make, -0.0), (make_again, 0.0), (make, 0.0))]
    outs = [np.asarray(w(jnp.ones(2))) for w in wrappers]
    assert traces == 3
    assert outs[0].tolist() == [-math.inf] * 2
    assert outs[1].tolist() == outs[2].tolist() == [math.inf] * 2
    # The third traced the second's jaxpr (the same `+0.0`) and runs its program.
    assert [w.cache_info().compiles for w in wrappers] == [1, 1, 0]
