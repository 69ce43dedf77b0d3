"""Typed PRNG keys and JAX's other extended or narrow dtypes through the stable `filter_jit`.

Every modern training loop passes `jax.random.key(...)` into its step; tangents of integer inputs
are `float0`; mixed precision uses `bfloat16`, the float8 types and `int4`. Each must work as under
`equinox.filter_jit`: called directly, inside `jax.jit`, `jax.vmap` and `jax.lax.scan`, and a miss
must be explained in JAX's own terms (`key<fry>[]`, `float0[3]`).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import dtypes

import eqxstable as es

from .helpers import compile_log


IMPLS = ["threefry2x32", "rbg", "unsafe_rbg"]
NARROW = [
    jnp.bfloat16,
    jnp.float8_e4m3fn,
    jnp.float8_e5m2,
    jnp.float8_e4m3fnuz,
    jnp.float8_e5m2fnuz,
    jnp.float8_e4m3b11fnuz,
    jnp.int4,
    jnp.uint4,
]


def _noisy(key, x):
    return x + jax.random.normal(key, x.shape)


def _in(context, f, key, x):
    """`f(key, x)` called directly or inside a JAX transformation, as a user would."""
    if context == "direct":
        return f(key, x)
    if context == "jit":
        return jax.jit(lambda k, y: f(k, y))(key, x)
    keys = jax.random.split(key, 2)
    if context == "vmap":
        return jax.vmap(lambda k: f(k, x))(keys)
    _, out = jax.lax.scan(lambda c, k: (c, f(k, x)), 0, keys)
    return out


@pytest.mark.parametrize("context", ["direct", "jit", "vmap", "scan"])
@pytest.mark.parametrize("impl", IMPLS)
def test_typed_keys_match_equinox(impl, context):
    key = jax.random.key(0, impl=impl)
    x = jnp.ones(3)
    expected = _in(context, eqx.filter_jit(_noisy), key, x)
    got = _in(context, es.filter_jit(_noisy), key, x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_new_key_each_step_is_a_hit(impl):
    traces = 0

    def step(key, x):
        nonlocal traces
        traces += 1
        return _noisy(key, x)

    jitted = es.filter_jit(step)
    key = jax.random.key(0, impl=impl)
    with compile_log() as log:
        outs = [jitted(k, jnp.zeros(2)) for k in jax.random.split(key, 4)]
    assert traces == 1 == log.count("step")
    assert jitted.cache_info()[:2] == (3, 1)
    assert len({tuple(np.asarray(o).tolist()) for o in outs}) == 4  # Each key is used.


def test_another_key_impl_is_a_dtype_miss_named_in_jax_terms():
    jitted = es.filter_jit(jax.random.key_data)
    jitted(jax.random.key(0))
    jitted(jax.random.key(0, impl="rbg"))
    jitted(jax.random.PRNGKey(0))
    first, impl, raw = jitted.misses
    assert (impl.kind, impl.path) == ("dtype", "args[0]")
    assert "key<fry>[] -> key<rbg>[]" in impl.reason and "impl=" in impl.reason
    assert raw.kind == "shape" and "key<rbg>[] -> uint32[2]" in raw.reason


@pytest.mark.parametrize("context", ["direct", "jit", "vmap", "scan"])
@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: jnp.dtype(d).name)
def test_narrow_dtypes_match_equinox(dtype, context):
    x = jnp.arange(6).reshape(2, 3).astype(dtype)

    def widen(_, y):
        return y.astype(jnp.float32) * 2

    key = jax.random.key(0)
    expected = _in(context, eqx.filter_jit(widen), key, x)
    got = _in(context, es.filter_jit(widen), key, x)
    assert got.dtype == expected.dtype == jnp.float32
    np.testing.assert_array_equal(got, expected)


def test_narrow_dtype_changes_are_explained():
    jitted = es.filter_jit(lambda y: y.astype(jnp.float32))
    for dtype in NARROW:
        jitted(jnp.ones(3, dtype))
    reasons = [m.reason for m in jitted.misses[1:]]
    assert all(m.kind == "dtype" for m in jitted.misses[1:])
    for old, new, reason in zip(NARROW, NARROW[1:], reasons):
        assert f"{jnp.dtype(old).name}[3] -> {jnp.dtype(new).name}[3]" in reason


def _float0_tangent(n):
    # The gradient with respect to an integer input, as `allow_int=True` gives it.
    return jax.grad(lambda x, i: jnp.sum(x), argnums=1, allow_int=True)(jnp.ones(2), jnp.arange(n))


@pytest.mark.parametrize("context", ["direct", "jit"])
def test_float0_tangents(context):
    def scale(t, x):
        return x * 2 + t.shape[0]

    tangent = _float0_tangent(3)
    assert tangent.dtype == dtypes.float0
    got = _in(context, es.filter_jit(scale), tangent, jnp.ones(2))
    expected = _in(context, eqx.filter_jit(scale), tangent, jnp.ones(2))
    np.testing.assert_array_equal(got, expected)


def test_float0_shape_change_is_a_miss():
    traces = 0

    def count(t):
        nonlocal traces
        traces += 1
        return jnp.zeros(t.shape)

    jitted = es.filter_jit(count)
    shapes = [jitted(_float0_tangent(n)).shape for n in (3, 3, 4)]
    assert shapes == [(3,), (3,), (4,)]
    assert traces == 2 and jitted.cache_info()[:2] == (1, 2)
    assert "float0[3] -> float0[4]" in jitted.misses[1].reason


def test_keys_in_a_training_loop_with_dropout():
    # The everyday shape: a model with dropout, a fresh key per step, typed keys throughout.
    model = eqx.nn.Sequential([eqx.nn.Linear(4, 4, key=jax.random.key(1)), eqx.nn.Dropout(0.5)])
    traces = 0

    def loss(model, x, key):
        nonlocal traces
        traces += 1
        return jnp.sum(model(x, key=key) ** 2)

    keys = jax.random.split(jax.random.key(0), 3)
    plain = eqx.filter_jit(eqx.filter_value_and_grad(loss))
    expected = [plain(model, jnp.ones(4), key) for key in keys]
    traces = 0
    stable = es.filter_jit(eqx.filter_value_and_grad(loss))
    got = [stable(model, jnp.ones(4), key) for key in keys]
    assert traces == 1
    for (a, ga), (b, gb) in zip(got, expected):
        assert a == b
        assert all(map(np.array_equal, jax.tree.leaves(ga), jax.tree.leaves(gb)))
    assert len({float(a) for a, _ in got}) == 3  # Each step drops other units.
