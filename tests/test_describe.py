"""A miss names the innermost value that differs, in the user's terms.

Two keys are walked in parallel to the first differing leaf: the variable a function captures,
the global it reads, a field, an item. Never an internal key's repr, and never two sides cut to
the same text.
"""

import dataclasses
import functools as ft
import sys
from typing import NamedTuple

import jax.numpy as jnp
import pytest
from hypothesis import given, strategies as st

import eqxstable as es
from eqxstable._jit._describe import describe_change, render_pair


optax = pytest.importorskip("optax")


@es.filter_jit
def _step(params, state, optim):
    updates, state = optim.update(params, state, params)
    return optax.apply_updates(params, updates), state


@pytest.mark.counts_traces
def test_rebuilt_adam_names_the_learning_rate_that_changed():
    params = jnp.ones(3)
    for lr in (0.001, 0.003):
        optim = optax.adam(lr)
        _step(params, optim.init(params), optim)
    miss = _step.misses[-1]
    assert (miss.kind, miss.path) == ("static", "args[2].update")
    # optax's `scale_by_learning_rate(lr)` is `scale(-lr)`: its `step_size` is what differs.
    assert "the `step_size` captured by `scale.<locals>.update_fn`" in miss.reason
    assert "-0.001 -> -0.003" in miss.reason
    assert "FunctionKey" not in miss.reason and "code=<" not in miss.reason
    assert "FunctionKey" not in _step.explain()


class _Config(NamedTuple):
    width: int
    rates: tuple


@dataclasses.dataclass(frozen=True)
class _Frozen:
    config: _Config
    scale: float


def _closure(frozen):
    def inner(x):
        return x * frozen.scale

    def outer(x):
        return inner(x) + 1

    return outer


_LEAVES = st.one_of(st.integers(-5, 5), st.floats(-2, 2, allow_nan=False), st.text(max_size=3))


@given(
    st.lists(_LEAVES, min_size=1, max_size=4),
    st.integers(0, 3),
    _LEAVES,
    st.sampled_from(["rates", "scale", "width"]),
)
def test_the_innermost_differing_leaf_is_named(rates, index, replacement, where):
    index %= len(rates)
    before = _Frozen(_Config(1, tuple(rates)), 0.5)
    if where == "rates":
        changed = list(rates)
        changed[index] = replacement
        after = dataclasses.replace(before, config=_Config(1, tuple(changed)))
        expected = f"`frozen.config.rates[{index}]`"
    elif where == "scale":
        after = dataclasses.replace(before, scale=replacement)
        expected = "`frozen.scale`"
    else:
        after = dataclasses.replace(before, config=_Config(replacement, tuple(rates)))
        expected = "`frozen.config.width`"
    old, new = es.stable_key(_closure(before)), es.stable_key(_closure(after))
    if old == new:
        return
    text = describe_change(old, new, rebuilt=True)
    # `outer` captures `inner`, which captures `frozen`. Python 3.10's code objects have no
    # qualified name: the function is then named by its own name.
    inner = "_closure.<locals>.inner" if sys.version_info >= (3, 11) else "inner"
    assert f"{expected} in the `frozen` captured by `{inner}`" in text, text
    assert "(reached through `inner`)" in text
    assert "FunctionKey" not in text
    shown = text.rsplit("changed: ", 1)[1]
    left, right = shown.split(" -> ")
    assert left != right


def _with_default(value):
    def scaled(x, factor=value, *, shift=0.0):
        return x * factor + shift

    return scaled


_RATE = 0.1


def _reads_rate(x):
    return x * _RATE


def test_defaults_globals_and_partials_are_named():
    a, b = _with_default(2.0), _with_default(3.0)
    text = describe_change(es.stable_key(a), es.stable_key(b), rebuilt=True)
    assert text == "its default argument `factor` changed: 2.0 -> 3.0"
    a = ft.partial(_with_default(2.0), shift=1.0)
    b = ft.partial(_with_default(2.0), shift=3.0)
    text = describe_change(es.stable_key(a), es.stable_key(b))
    assert text == "`keywords['shift']` changed: 1.0 -> 3.0"
    global _RATE
    old = es.stable_key(_reads_rate)
    _RATE = 0.2
    try:
        text = describe_change(old, es.stable_key(_reads_rate))
    finally:
        _RATE = 0.1
    assert text == "the global `_RATE` it reads was rebound: 0.1 -> 0.2"


_TEXT = st.text(alphabet="ab xyz(')", max_size=80)


@given(_TEXT, st.text(alphabet="ab xyz(')", min_size=1, max_size=5), _TEXT)
def test_two_different_values_never_show_the_same_text(prefix, middle, suffix):
    a = prefix + middle + suffix
    b = prefix + middle[::-1] + "!" + suffix
    left, right = render_pair(es.stable_key(a), es.stable_key(b)).split(" -> ", 1)
    assert left != right
