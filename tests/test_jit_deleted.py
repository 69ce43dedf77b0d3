"""A call given an array that an earlier call donated (its buffer deleted) raises an error that
names the jitted function, the leaf's path and the fix, instead of XLA's "Invalid buffer passed
to Execute()", on the hit path and on a first call alike."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import pytest

import eqxstable as es


def add(x, d):
    return x + d["w"]


def test_donated_argument_is_named_on_a_hit():
    jitted = es.filter_jit(add, donate="all")
    x = jnp.ones(2)
    assert jnp.array_equal(jitted(x, {"w": jnp.ones(2)}), 2 * jnp.ones(2))
    assert x.is_deleted()
    with pytest.raises(ValueError) as info:
        jitted(x, {"w": jnp.ones(2)})
    text = str(info.value)
    assert "`add` was called with an array whose buffer was deleted: `args[0]`." in text
    assert "donate='none'" in text and "x.copy()" in text
    assert "Invalid buffer" not in text
    # The wrapper still works with live arrays.
    assert jnp.array_equal(jitted(jnp.ones(2), {"w": jnp.ones(2)}), 2 * jnp.ones(2))


def test_donated_leaves_are_named_on_a_first_call():
    # One donated input is deleted: the one whose buffer the output took.
    x = jnp.ones(2)
    es.filter_jit(lambda x: x + 1, donate="all")(x)
    d = {"w": x}
    other = es.filter_jit(lambda x, d: x * d["w"])
    with pytest.raises(
        ValueError, match=r"\.<lambda>` was called with an array .*: `args\[1\]\['w'\]`"
    ):
        other(jnp.ones(2), d)


def test_keyword_only_argument_is_named():
    def f(*, x):
        return x + 1

    jitted = es.filter_jit(f, donate="all")
    x = jnp.ones(2)
    jitted(x=x)
    with pytest.raises(ValueError, match=r"\.f` was called with an array .*: `kwargs\['x'\]`"):
        jitted(x=x)


def test_module_weight_is_named():
    mlp = eqx.nn.MLP(2, 2, 4, 2, key=jr.key(0))

    def apply(model, x):
        return model(x)

    def doubled(model):
        return jtu.tree_map(lambda a: a * 2, eqx.filter(model, eqx.is_array))

    # Every buffer of the model is donated to an output of its shape: all are deleted.
    es.filter_jit(doubled, donate="all")(mlp)
    with pytest.raises(ValueError) as info:
        es.filter_jit(apply)(mlp, jnp.ones(2))
    text = str(info.value)
    assert "`args[0].layers[0].weight`" in text and "`args[0].layers[1].bias`" in text


def test_function_array_is_named():
    mlp = eqx.nn.MLP(2, 2, 4, 1, key=jr.key(0))
    jitted = es.filter_jit(mlp)
    x = jnp.ones(2)
    jitted(x)
    es.filter_jit(lambda m: m.layers[0].weight + 1, donate="all")(mlp)
    with pytest.raises(
        ValueError, match=r"an array whose buffer was deleted: `fun\.layers\[0\]\.weight`"
    ):
        jitted(x)


def test_own_error_is_kept():
    def f(x):
        raise ValueError("my own error about a deleted record")

    with pytest.raises(ValueError, match="^my own error about a deleted record") as info:
        es.filter_jit(f)(jnp.ones(2))
    assert "eqxstable" not in str(info.value)
