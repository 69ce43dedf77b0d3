"""Arithmetic on a `Decimal` reads the thread's decimal context: its settings are part of the
key of a `Decimal`, and watched."""

import decimal
from decimal import Decimal

import jax.numpy as jnp
import pytest

import eqxstable as es


def third(a, b, x):
    return x * float(a / b)


@pytest.mark.counts_traces
def test_precision_changed_between_calls():
    traces = 0

    def f(a, b, x):
        nonlocal traces
        traces += 1
        return third(a, b, x)

    w = es.filter_jit(f)
    one = jnp.float32(1.0)
    with decimal.localcontext() as c:
        wide = float(w(Decimal(1), Decimal(3), one))
        c.prec = 2
        narrow = float(w(Decimal(1), Decimal(3), one))
        assert narrow == float(third(Decimal(1), Decimal(3), one)) == pytest.approx(0.33)
        assert float(w(Decimal(1), Decimal(3), one)) == narrow
    assert wide == pytest.approx(1 / 3)
    assert traces == 2


def test_key_follows_the_context():
    d = Decimal("1.5")
    before = es.stable_key(d)
    assert es.stable_key(Decimal("1.5")) == before
    with decimal.localcontext() as c:
        c.rounding = decimal.ROUND_DOWN
        assert es.stable_key(d) != before
        c.traps[decimal.Inexact] = True
        down = es.stable_key(d)
        assert down != before
    assert es.stable_key(d) == before
