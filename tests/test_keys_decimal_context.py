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


def _context_checks(watch) -> int:
    from eqxstable._keys._library import decimal_context
    from eqxstable._keys._watch import _unbatched

    return sum(1 for s in _unbatched(watch.states) if s[1] is decimal_context)


PRICES = tuple(Decimal(i) / 100 for i in range(5_000))


def priced(x):
    return x * float(PRICES[3] + PRICES[-1])


@pytest.mark.counts_traces
def test_many_decimals_watch_the_context_once():
    # One check of the thread's context per key, however many `Decimal`s it covers (attack
    # 13a-03: one per `Decimal`, 40,000 checks on every hit of a function reading a table).
    from eqxstable._keys import compute

    _, watch = compute(PRICES)
    assert _context_checks(watch) == 1
    _, watch = compute(priced)
    assert _context_checks(watch) == 1
    _, watch = compute((Decimal("1.5"), [Decimal("2.5"), {"k": Decimal("3.5")}]))
    assert _context_checks(watch) == 1

    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return priced(x)

    w = es.filter_jit(f)
    one = jnp.float32(1.0)
    calls = 0
    real = decimal.getcontext

    def counting():
        nonlocal calls
        calls += 1
        return real()

    first = float(w(one))
    decimal.getcontext = counting
    try:
        for _ in range(3):
            assert float(w(one)) == first
    finally:
        decimal.getcontext = real
    # A hit reads the context once (the watch's one state), not once per `Decimal`.
    assert calls == 3
    assert traces == 1
    # Still watched: a change of the context is a new key and a new trace.
    with decimal.localcontext() as c:
        c.prec = 2
        assert float(w(one)) == pytest.approx(float(priced(one)))
    assert traces == 2
