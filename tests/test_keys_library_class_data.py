"""A library class's code is constant, but its plain class attributes are data a program may
rebind (attack 12a, finding 01): `json.JSONEncoder.item_separator`, read through a user's
subclass, an instance of the library class, or a module chain (`eqx.nn.Linear.SCALE`). A rebuilt
function reading one must trace again after the rebinding, as `equinox.filter_jit` (which traces
every new function) does; and with nothing rebound it still hits (`K-library-code`)."""

import json

import equinox as eqx
import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es

from .helpers import count_traces


class Enc(json.JSONEncoder):  # A user's subclass: the attribute lives on the library base.
    pass


ENCODER = json.JSONEncoder()


def _reader(where):
    if where == "user subclass":
        return lambda x: x * len(Enc.item_separator)
    if where == "library instance":
        return lambda x: x * len(ENCODER.item_separator)
    if where == "library class":
        return lambda x: x * len(json.JSONEncoder.item_separator)
    if where == "module chain":
        return lambda x: x * len(eqx.nn.Linear.SEPARATOR)  # pyright: ignore[reportAttributeAccessIssue]
    raise AssertionError(where)


@pytest.fixture(autouse=True)
def _restore():
    saved = json.JSONEncoder.item_separator
    eqx.nn.Linear.SEPARATOR = ", "  # pyright: ignore[reportAttributeAccessIssue]
    yield
    json.JSONEncoder.item_separator = saved
    del eqx.nn.Linear.SEPARATOR  # pyright: ignore[reportAttributeAccessIssue]


def _rebind(where, value):
    if where == "module chain":
        eqx.nn.Linear.SEPARATOR = value  # pyright: ignore[reportAttributeAccessIssue]
    else:
        json.JSONEncoder.item_separator = value


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["user subclass", "library instance", "library class", "module chain"]),
    st.lists(st.sampled_from([", ", ",", ",   ", ";  "]), min_size=1, max_size=4),
)
def test_a_rebuilt_reader_follows_a_rebound_class_attribute(where, values):
    run = es.filter_jit(lambda f, x: f(x))
    x = jnp.float32(1.0)
    for value in values:
        _rebind(where, value)
        eager = float(_reader(where)(x))
        assert eager == len(value)
        assert float(run(_reader(where), x)) == eager


@pytest.mark.counts_traces
@pytest.mark.parametrize("where", ["user subclass", "library instance", "module chain"])
def test_with_nothing_rebound_a_rebuilt_reader_still_hits(where):
    counter = count_traces(lambda f, x: f(x))
    run = es.filter_jit(counter)
    for _ in range(3):
        assert float(run(_reader(where), jnp.float32(1.0))) == 2.0
    assert counter.count == 1
