"""The code a dataclass field runs when an instance is made (a `default_factory`, an Equinox
`converter`) is part of its class's key: the globals it reads are followed."""

import dataclasses

import equinox as eqx
import jax.numpy as jnp
import pytest

import eqxstable as es


G = 2.0
K = 2.0


@dataclasses.dataclass
class WithFactory:
    x: float = dataclasses.field(default_factory=lambda: G)


class WithConverter(eqx.Module):
    x: float = eqx.field(converter=lambda v: v * K)


def made_in_trace(v):
    return v * WithFactory().x * WithConverter(1.0).x


@pytest.mark.counts_traces
@pytest.mark.parametrize("name", ["G", "K"])
def test_rebinding_what_a_field_reads(name):
    traces = 0

    def f(v):
        nonlocal traces
        traces += 1
        return made_in_trace(v)

    w = es.filter_jit(f)
    one = jnp.float32(1.0)
    try:
        assert float(w(one)) == 4.0
        globals()[name] = 3.0
        assert float(w(one)) == float(made_in_trace(one)) == 6.0
        assert traces == 2
    finally:
        globals()[name] = 2.0


def test_rebuilt_modules_still_share():
    assert es.stable_key(WithConverter(1.0)) == es.stable_key(WithConverter(1.0))
    assert es.intern(WithConverter(1.0)) is es.intern(WithConverter(1.0))
