"""A user's `abc` class keeps its virtual subclasses in C state (`_abc_impl`): they are in its
key (attack round 8a, finding 05), so a rebuilt function testing `isinstance(1.5, Kind)` gets
another key after `Kind.register(float)` (or a subclass's `register`), and `es.filter_jit`
traces it again, as `equinox.filter_jit` does."""

import abc

import jax.numpy as jnp
import pytest

import eqxstable as es


def _classes():
    class Kind(abc.ABC):
        pass

    class Sub(Kind):
        pass

    return Kind, Sub


def _tests(kind):
    return lambda x: x * (2.0 if isinstance(1.5, kind) else 1.0)


@pytest.mark.parametrize("where", ["class", "subclass"])
def test_register_changes_the_key_of_a_reader(where):
    kind, sub = _classes()
    x = jnp.float32(1.0)
    before = es.stable_key(_tests(kind))
    assert es.stable_key(_tests(kind)) == before  # Rebuilt: still shared.
    assert float(es.filter_jit(_tests(kind))(x)) == float(_tests(kind)(x)) == 1.0
    (kind if where == "class" else sub).register(float)
    assert es.stable_key(_tests(kind)) != before
    assert es.stable_key(kind) != es.stable_key(_classes()[0])
    assert float(es.filter_jit(_tests(kind))(x)) == float(_tests(kind)(x)) == 2.0
    assert es.intern(_tests(kind)) is es.intern(_tests(kind))


@pytest.mark.counts_traces
def test_an_unrelated_register_keeps_the_program():
    kind, _ = _classes()
    other, _ = _classes()
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * (2.0 if isinstance(1.5, kind) else 1.0)

        return f

    x = jnp.float32(1.0)
    g = es.filter_jit(make())
    assert float(g(x)) == 1.0
    other.register(int)  # Moves `abc`'s token: the key is computed again, and is the same.
    assert float(g(x)) == 1.0
    assert traces == 1
