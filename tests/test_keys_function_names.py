"""A function's names, docstring and annotations are state its code can read (a dispatcher keyed
by `__name__`, `inspect.signature`): two functions that differ only there are never one key,
`intern` never swaps one for the other, and assigning one after a trace is seen (`K-function`)."""

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import pytest
from hypothesis import given, strategies as st

import eqxstable as es


def _make(attr: str, value: Any) -> Callable:
    def act(x):
        return x * 2

    setattr(act, attr, value)
    return act


# Names from a list: `st.characters(categories=...)` is newer than the declared hypothesis floor.
_NAMES = st.sampled_from(["relu", "gelu", "act", "Act", "ä", "swish"])
_VALUES = {
    "__name__": _NAMES,
    "__qualname__": _NAMES,
    "__module__": _NAMES,
    "__doc__": st.one_of(st.none(), st.text(max_size=8)),
    "__annotations__": st.dictionaries(
        st.sampled_from(["x", "return"]), st.sampled_from([int, float, str, "jax.Array"])
    ),
}


@pytest.fixture(autouse=True)
def _fresh_caches():
    es.clear_caches()


@pytest.mark.parametrize("attr", list(_VALUES))
@given(data=st.data())
def test_functions_differing_only_there_are_never_one_key(attr, data):
    first = data.draw(_VALUES[attr])
    second = data.draw(_VALUES[attr])
    a, b = _make(attr, first), _make(attr, second)
    same = (
        list(first.items()) == list(second.items())
        if attr == "__annotations__"
        else (type(first) is type(second) and first == second)
    )
    assert (es.stable_key(a) == es.stable_key(b)) == same
    # Whatever `intern` returns reads back what each holds (in the same order).
    for f, value in ((a, first), (b, second)):
        got = getattr(es.intern(f), attr)
        assert got == value and (attr != "__annotations__" or list(got) == list(value))


@pytest.mark.parametrize("attr", ["__name__", "__qualname__", "__module__", "__doc__"])
def test_a_jitted_reader_of_a_name_gets_its_own(attr):
    wrapper = es.filter_jit(lambda x, f: {getattr(f, attr): f(x)})
    x = jnp.ones(2)
    for name in ("relu", "gelu", "relu"):
        assert list(wrapper(x, _make(attr, name))) == [name]


@pytest.mark.counts_traces
def test_a_name_assigned_after_the_trace_is_seen():
    traces = 0

    def act(x):
        return x * 2

    def apply(x):
        nonlocal traces
        traces += 1
        return {act.__name__: act(x)}

    wrapper = es.filter_jit(apply)
    x = jnp.ones(2)
    assert list(wrapper(x)) == ["act"]
    assert list(wrapper(x)) == ["act"]
    act.__name__ = "relu"
    assert list(wrapper(x)) == ["relu"]
    act.__annotations__["x"] = float
    assert list(wrapper(x)) == ["relu"]
    assert traces == 3


def test_annotations_changed_in_place_are_seen():
    def make():
        def act(x: int):
            return x

        return act

    a, b = make(), make()
    assert es.stable_key(a) == es.stable_key(b)
    assert es.intern(a) is a and es.intern(b) is a
    b.__annotations__["x"] = float
    assert es.stable_key(a) != es.stable_key(b)
    assert es.intern(b).__annotations__ == {"x": float}


def test_rebuilt_functions_with_equal_annotations_still_share():
    # The same typing objects (`int | None` made once) and the same classes: one key, and
    # `intern` substitutes, as for a rebuilt function without annotations.
    hint = int | None

    def make():
        def act(x: hint, y: jnp.ndarray) -> float:  # pyright: ignore[reportInvalidTypeForm]
            return x

        return act

    a, b = make(), make()
    assert es.stable_key(a) == es.stable_key(b)
    assert es.intern(a) is a and es.intern(b) is a
