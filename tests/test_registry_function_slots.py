"""A function's own slots (`__code__`, `__defaults__`, `__kwdefaults__`, `__dict__`) are part of
its program (CONTRACT section 1, zoo finding 13).

Functions stay substitutable: two functions built by the same factory are equivalent, and
`intern` returns the first for the second, so that rebuilt closures share a program under plain
Equinox. Rebinding a slot *after* interning is a program change that `intern` does not follow
(as Equinox's own cache of a static function does not follow it either): what `intern` returned
keeps the slots it had. The registry, though, never hands out a canonical function whose slots
were rebound since it became canonical: it is retired, and the next equivalent function
interned becomes canonical instead.
"""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import pytest

import eqxstable as es

from .helpers import counting_filter_jit


def make(scale: float) -> Any:
    # No keyword-only defaults: a function owning a `__kwdefaults__` dict is never substituted
    # (`test_registry_owned_dicts.py`), and these tests are about one that is.
    def f(x, scale=scale, shift=0.0):
        return x * scale + shift

    return f


def _other_code(x, scale=1.0, shift=0.0):
    return x * scale * 10.0 + shift


# How a slot is rebound, and what `f(1.0)` then gives. Each rebinds to a value of another key,
# except the `equal` ones, which rebind to new objects with equal values.
REBINDS = {
    "__defaults__": (lambda f: setattr(f, "__defaults__", (2.0, 0.0)), 2.0),
    # `f` has no keyword-only parameter, so its new keyword defaults change its key, not its value.
    "__kwdefaults__": (lambda f: setattr(f, "__kwdefaults__", {"shift": 5.0}), 1.0),
    "__code__": (lambda f: setattr(f, "__code__", _other_code.__code__), 10.0),
    "__dict__": (lambda f: setattr(f, "__dict__", {"note": 1}), 1.0),
    "__defaults__ equal": (lambda f: setattr(f, "__defaults__", (float("1.0"), 0.0)), 1.0),
    "__kwdefaults__ equal": (lambda f: setattr(f, "__kwdefaults__", {"shift": 0.0}), 1.0),
    "__dict__ equal": (lambda f: setattr(f, "__dict__", {}), 1.0),
}


def test_intern_substitutes_a_rebuilt_function():
    first, second = make(1.0), make(1.0)
    assert es.intern(first) is first
    assert es.intern(second) is first


def test_rebinding_a_slot_after_interning_is_not_followed():
    # The documented assumption: `intern(second)` returned `first`, which keeps its own default
    # when `second`'s is rebound afterwards.
    first, second = make(1.0), make(1.0)
    es.intern(first)
    rep = es.intern(second)
    assert rep is first
    second.__defaults__ = (2.0, 0.0)
    assert rep(1.0) == 1.0 and second(1.0) == 2.0
    # Interned again, `second` is what it computes now: not substituted by `first`.
    assert es.intern(second) is second
    assert es.intern(make(1.0)) is first


@pytest.mark.parametrize("slot", list(REBINDS))
def test_a_canonical_function_whose_slot_was_rebound_is_retired(slot):
    rebind, value = REBINDS[slot]
    first = make(1.0)
    assert es.intern(first) is first
    rebind(first)
    assert first(1.0) == value
    fresh = make(1.0)
    got = es.intern(fresh)
    assert got is fresh and got(1.0) == 1.0
    assert es.intern(make(1.0)) is fresh  # The fresh one is canonical now.


class Box(es.StableModule):
    fn: Any = eqx.field(static=True)


@pytest.mark.counts_traces
@pytest.mark.parametrize("slot", list(REBINDS))
def test_a_module_over_a_fresh_function_never_gets_a_rebound_canonical(slot):
    rebind, _ = REBINDS[slot]
    run, traces = counting_filter_jit(lambda box, x: box.fn(x))

    x = jnp.ones(2)
    first = Box(make(3.0))
    assert float(run(first, x)[0]) == 3.0
    assert float(run(Box(make(3.0)), x)[0]) == 3.0 and traces() == 1  # Shared, as intended.
    rebind(first.fn)  # The canonical function changes under the first module.
    fresh = Box(make(3.0))
    assert fresh.fn is not first.fn
    assert fresh.fn(1.0) == 3.0
    assert float(run(fresh, x)[0]) == 3.0
    assert traces() == 2
