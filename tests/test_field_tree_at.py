"""`eqx.tree_at` and `eqx.nn.inference_mode` on a dynamic field (`es.field(dynamic=True)`).

`tree_at` names what it replaces by the object its `where` returns, which must be a node of the
tree; a dynamic field reads back as a number computed from its stored words, so `where` is
given the stored node instead (and only `where`: a `replace_fn` reads numbers). An
`inference` flag stored dynamically then switches as a plain bool does (finding attack5b-07).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqxstable as es


def _dropout(base: type, field) -> type:
    class Drop(base):
        p: float = 0.5
        inference: bool = field

        def __call__(self, x, key):
            keep = jax.random.bernoulli(key, 1 - self.p, x.shape)
            return jnp.where(self.inference, x, jnp.where(keep, x / (1 - self.p), 0.0))

    return Drop


class Dynamic(es.StableModule):
    rate: float = es.field(dynamic=True, default=0.5)
    inference: bool = es.field(dynamic=True, default=False)


class Net(es.StableModule):
    first: Dynamic
    second: Dynamic
    inference: bool = es.field(dynamic=True, default=False)


@pytest.mark.parametrize("base", [eqx.Module, es.StableModule])
def test_inference_mode_switches_a_dynamic_flag_as_a_plain_bool(base):
    plain = _dropout(eqx.Module, eqx.field(default=False))()
    dynamic = _dropout(base, es.field(dynamic=True, default=False))()
    run = eqx.filter_jit(lambda m, x: m(x, jax.random.key(0)))
    x = jnp.arange(1.0, 9.0)
    for value in (True, False):
        expected = run(eqx.nn.inference_mode(plain, value), x)
        got = run(eqx.nn.inference_mode(dynamic, value), x)
        assert jnp.array_equal(got, expected)
        assert eqx.nn.inference_mode(dynamic, value).inference is value
    assert jnp.array_equal(run(eqx.nn.inference_mode(dynamic), x), x)
    assert not jnp.array_equal(run(dynamic, x), x)  # Training mode drops some.


def test_inference_mode_reaches_nested_flags_and_leaves_other_fields():
    net = Net(Dynamic(), Dynamic(0.2))
    evaluating = eqx.nn.inference_mode(net)
    assert evaluating.inference is True
    assert evaluating.first.inference is True and evaluating.second.inference is True
    assert (evaluating.first.rate, evaluating.second.rate) == (0.5, 0.2)
    training = eqx.nn.inference_mode(evaluating, False)
    assert (training.inference, training.first.inference, training.second.inference) == (
        False,
        False,
        False,
    )
    assert net.first.inference is False  # The original is unchanged.


def test_tree_at_replaces_a_dynamic_field_and_replace_fn_reads_numbers():
    net = Net(Dynamic(), Dynamic(0.2))
    assert eqx.tree_at(lambda n: n.second.rate, net, 0.3).second.rate == 0.3
    # A `replace_fn` given a module reads its dynamic fields as numbers, as ever.
    doubled = eqx.tree_at(lambda n: n.second, net, replace_fn=lambda d: Dynamic(d.rate * 2))
    assert doubled.second.rate == 0.4 and type(doubled.second.rate) is float


def test_inference_mode_inside_a_trace():
    @eqx.filter_jit
    def evaluate(net, x):
        net = eqx.nn.inference_mode(net)
        return jnp.where(net.first.inference, x * net.second.rate, x)

    assert float(evaluate(Net(Dynamic(), Dynamic(0.25)), jnp.array(2.0))) == 0.5
