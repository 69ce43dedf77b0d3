"""What an enum's members hold is in the key of a function that reads them (`K-enum`,
`K-user-class`): a member's mutable value changed in place (`SMALL = {"scale": 1.0}`) and an
attribute its `__init__` set (the Python docs' `Planet`, `self.mass`) reassigned later are seen,
by a rebuilt function and on the hit path; plain enums (an `int` or `str` value) still share."""

import enum
import struct

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


class Preset(enum.Enum):
    SMALL = {"scale": 1.0}
    LARGE = {"scale": 10.0}


class Planet(enum.Enum):
    EARTH = (1.0, 2.0)
    MARS = (0.5, 1.0)

    def __init__(self, mass, radius):
        self.mass = mass
        self.radius = radius


class Color(enum.Enum):
    RED = 1
    GREEN = "green"


@pytest.mark.counts_traces
def test_a_member_value_changed_in_place_is_seen():
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * Preset.SMALL.value["scale"]

        return f

    x = jnp.ones(2)
    try:
        assert es.filter_jit(make())(x).tolist() == [1.0, 1.0]
        assert es.filter_jit(make())(x).tolist() == [1.0, 1.0]
        assert traces == 1
        Preset.SMALL.value["scale"] = 2.0
        assert es.filter_jit(make())(x).tolist() == [2.0, 2.0]
        assert traces == 2
    finally:
        Preset.SMALL.value["scale"] = 1.0


@pytest.mark.counts_traces
def test_a_member_attribute_reassigned_is_seen_on_the_hit_path():
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * Planet.EARTH.mass

        return f

    x = jnp.ones(2)
    f = es.filter_jit(make())
    try:
        assert f(x).tolist() == [1.0, 1.0]
        assert f(x).tolist() == [1.0, 1.0]
        assert traces == 1
        Planet.EARTH.mass = 3.0
        assert f(x).tolist() == [3.0, 3.0]
        assert es.filter_jit(make())(x).tolist() == [3.0, 3.0]
        assert traces == 2
    finally:
        Planet.EARTH.mass = 1.0


@pytest.mark.counts_traces
def test_a_member_passed_as_a_static_argument_keys_its_value():
    traces = 0

    @es.filter_jit
    def f(preset, x):
        nonlocal traces
        traces += 1
        return x * preset.value["scale"]

    try:
        assert f(Preset.LARGE, jnp.ones(())).tolist() == 10.0
        Preset.LARGE.value["scale"] = 4.0
        assert f(Preset.LARGE, jnp.ones(())).tolist() == 4.0
        assert traces == 2
    finally:
        Preset.LARGE.value["scale"] = 10.0


@pytest.mark.counts_traces
def test_plain_enum_members_still_share():
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * (Color.RED.value + len(Color.GREEN.value))

        return f

    assert es.stable_key(make()) == es.stable_key(make())
    for _ in range(3):
        assert es.filter_jit(make())(jnp.ones(())).tolist() == 6.0
    assert traces == 1
    assert es.intern(make()) is es.intern(make())


_MASSES = st.sampled_from([-0.0, 0.0, 0.5, 1.0, 3.25])


@pytest.mark.counts_traces
@settings(max_examples=15, deadline=None)
@given(st.lists(_MASSES, min_size=1, max_size=4))
def test_a_rebuilt_reader_computes_what_the_members_hold_now(masses):
    # Traces counted by each wrapper (`cache_info().traces`): a `nonlocal` counter in a closure
    # made under hypothesis is keyed by identity and contents there, so it would never share.
    def make():
        return lambda x: 1 / (x * Planet.MARS.mass)

    es.clear_caches()  # An earlier example's programs would serve this one's values.
    x = jnp.ones(())
    traces = 0
    try:
        for mass in masses:
            Planet.MARS.mass = mass
            f = es.filter_jit(make())
            got = f(x)
            traces += f.cache_info().traces
            assert got.tobytes() == (1 / (x * mass)).tobytes()
    finally:
        Planet.MARS.mass = 0.5
    # One trace per value by its bits (`0.0` and `-0.0` differ); a value met again hits.
    assert traces == len({struct.pack("<d", m) for m in masses})
