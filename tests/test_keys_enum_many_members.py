"""A large enum read for one member (attack 12a-05): every member's attributes are still watched
(a write to any is seen), but as one state read in C (`_classes._members_state`, `_FLAT`), not a
Python call per member on every hit; the class's namespace likewise scanned in C."""

import enum
from typing import Any

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import compute
from eqxstable._keys._classes import _FLAT, _members_state, _members_valid

from .helpers import python_calls


Tok: Any = enum.IntEnum("Tok", [f"T{i}" for i in range(3_000)])


@pytest.mark.counts_traces
def test_a_hit_reading_one_member_is_not_a_call_per_member():
    f = es.filter_jit(lambda x: x * int(Tok.T5))
    x = jnp.ones(2)
    f(x)
    assert python_calls(lambda: f(x)) < 200
    assert f.cache_info().hits == 1
    assert _members_state(Tok)[0] is _FLAT


def _planets(n: int) -> Any:
    class Planet(enum.Enum):
        def __init__(self, mass, radius):
            self.mass = mass
            self.radius = radius

    return Planet("Planet", {f"P{i}": (float(i), float(i % 5)) for i in range(n)})


_CHANGES = ["none", "same", "equal float", "negative zero", "int", "new attr", "del attr", "value"]


@pytest.mark.counts_traces
@settings(max_examples=20, deadline=None)
@given(change=st.sampled_from(_CHANGES), where=st.integers(0, 599), read=st.integers(0, 599))
def test_a_write_to_any_member_is_seen_and_matches_eager(change, where, read):
    Planet = _planets(600)
    traces = 0

    def body(x):
        m = Planet[f"P{read}"]
        return x * m.mass + m.radius + len(vars(m)) + sum(p.radius for p in list(Planet)[:3])

    @es.filter_jit
    def f(x):
        nonlocal traces
        traces += 1
        return body(x)

    x = jnp.ones(2)
    f(x)
    m = Planet[f"P{where}"]
    if change == "same":
        m.mass = m.mass
    elif change == "equal float":
        m.mass = float(str(m.mass))
    elif change == "negative zero":
        m.radius = -0.0 if str(m.radius) == "0.0" else 0.0
    elif change == "int":
        m.mass = int(m.mass)
    elif change == "new attr":
        m.extra = 1
    elif change == "del attr":
        del m.radius
        m.radius = 7.0
    elif change == "value":
        m._value_ = (9.0, 9.0)
    eager = body(x)
    out = f(x)
    assert jnp.array_equal(out, eager) and out.dtype == eager.dtype
    if change in ("none", "same"):
        assert traces == 1


def test_the_flat_check_is_the_member_by_member_check():
    Planet = _planets(300)
    state = _members_state(Planet)
    assert _members_valid(Planet, state)
    Planet.P7.mass = 7.5
    assert not _members_valid(Planet, state)
    state = _members_state(Planet)
    # An attribute deleted (and below, set again: another object in the state).
    del Planet.P3.radius
    assert not _members_valid(Planet, state)
    key, watch = compute(lambda: Planet.P3.mass)
    assert watch.valid()
    Planet.P3.radius = 1.0
    assert not watch.valid()


@settings(max_examples=60, deadline=None)
@given(
    changes=st.lists(
        st.tuples(
            st.sampled_from(["set", "same", "add", "delete", "value"]),
            st.integers(0, 29),
            st.sampled_from([0, 1, 1.0, True, -0.0, 0.0, "1", None]),
        ),
        max_size=3,
    )
)
def test_the_flat_check_in_place_is_the_state_compared(changes):
    # `_members_valid` (the hit path) answers exactly what comparing `_members_state` by `is` does.
    Planet = _planets(30)
    state = _members_state(Planet)
    for change, where, value in changes:
        m = Planet[f"P{where}"]
        if change == "set":
            m.mass = value
        elif change == "same":
            m.mass = m.mass
        elif change == "add":
            m.extra = value
        elif change == "delete" and "radius" in vars(m):
            del m.radius
        elif change == "value":
            m._value_ = value
    now = _members_state(Planet)
    same = len(now) == len(state) and all(map(lambda a, b: a is b, now, state))
    assert _members_valid(Planet, state) == same
