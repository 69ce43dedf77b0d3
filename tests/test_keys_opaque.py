"""`K-opaque`: what Python can neither read nor watch (state held in C: a `ContextVar`, a
`random.Random`, a NumPy `Generator` or `RandomState`, an `itertools.count`, a generator) makes
its reader identity-keyed. A rebuilt function reading it traces again, as under
`equinox.filter_jit`, and sees the state as it is now; the same object keyed on its own is
itself."""

import contextvars
import itertools
import random
from collections.abc import Callable, Iterator

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


def _cases() -> Iterator[tuple[str, Callable, Callable]]:
    """(name, make a new reader over one shared object, change that object's hidden state)."""
    cv = contextvars.ContextVar("scale", default=2.0)
    yield "ContextVar", lambda: lambda x: x * cv.get(), lambda: cv.set(cv.get() + 1)
    r = random.Random(0)
    yield "random.Random", lambda: lambda x: x * r.random(), lambda: None
    g = np.random.default_rng(0)
    yield "Generator", lambda: lambda x: x * g.random(), lambda: None
    rs = np.random.RandomState(0)
    yield "RandomState", lambda: lambda x: x * rs.rand(), lambda: None
    c = itertools.count(1)
    yield "itertools.count", lambda: lambda x: x * next(c), lambda: None
    gen = iter(range(1, 10))
    yield "iterator", lambda: lambda x: x * next(gen), lambda: None
    squares = (i * i for i in range(1, 10))
    yield "generator", lambda: lambda x: x * next(squares), lambda: None


_NAMES = [name for name, *_ in _cases()]


def _run(jit: Callable, case: str) -> list[float]:
    _, make, change = next(c for c in _cases() if c[0] == case)
    outs = []
    for _ in range(3):
        outs.append(float(jit(make())(jnp.float32(1.0))))
        change()
    return outs


@pytest.mark.parametrize("case", _NAMES)
def test_a_rebuilt_reader_sees_the_state_as_it_is_now(case):
    expected = _run(eqx.filter_jit, case)
    assert len(set(expected)) == 3
    assert _run(es.filter_jit, case) == expected


@pytest.mark.parametrize("case", _NAMES)
def test_readers_are_never_one_key_and_never_substituted(case):
    _, make, _ = next(c for c in _cases() if c[0] == case)
    a, b = make(), make()
    assert es.stable_key(a) != es.stable_key(b)
    assert es.intern(a) is a and es.intern(b) is b


def test_the_object_itself_is_itself():
    counter, other = itertools.count(), itertools.count()
    rng = random.Random(0)
    assert es.stable_key(counter) == es.stable_key(counter) != es.stable_key(other)
    assert es.stable_key(rng) == es.stable_key(rng) != es.stable_key(random.Random(0))
