"""`K-impure-library`: a library callable is taken as constant *code*, but only the ones on the
allowlist (`_pure.pure_library`) are known to compute from their arguments alone. A user's
function that calls any other (`os.getenv`, `np.get_printoptions()`, a logger's level,
`sys.getrecursionlimit()`, the global random state, `open`) reads library data no key sees, so
it is identity-keyed: a rebuilt one traces again, as under `equinox.filter_jit`, and sees the
data as it is now. Rebuilt functions calling `jnp.sin`, `jax.nn.relu`, `optax`, `math` still
share one key."""

import functools as ft
import logging
import math
import os
import random
import sys
from collections.abc import Callable, Iterator
from datetime import datetime as _DateTime
from time import time as _time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es

from .helpers import count_traces


_ENV = "EQXSTABLE_TEST_KEYS6_SCALE"


def _cases() -> Iterator[tuple[str, Callable, Callable, Callable]]:
    """(name, make a new reader, set the data to a value, restore it)."""
    yield (
        "os.getenv",
        lambda: lambda x: x * float(os.getenv(_ENV, "1")),
        lambda v: os.environ.__setitem__(_ENV, str(v)),
        lambda: os.environ.pop(_ENV, None),
    )
    precision = np.get_printoptions()["precision"]
    yield (
        "np.get_printoptions",
        lambda: lambda x: x * np.get_printoptions()["precision"],
        lambda v: np.set_printoptions(precision=v),
        lambda: np.set_printoptions(precision=precision),
    )
    logger = logging.getLogger("eqxstable.test.keys6")
    yield (
        "logging level",
        lambda: lambda x: x * logging.getLogger("eqxstable.test.keys6").getEffectiveLevel(),
        logger.setLevel,
        lambda: logger.setLevel(logging.NOTSET),
    )
    limit = sys.getrecursionlimit()
    yield (
        "sys.getrecursionlimit",
        lambda: lambda x: x * sys.getrecursionlimit(),
        lambda v: sys.setrecursionlimit(limit + v),
        lambda: sys.setrecursionlimit(limit),
    )
    yield (
        "random.random",
        lambda: lambda x: x * random.random(),
        random.seed,
        lambda: None,
    )
    yield (
        "np.random.rand",
        lambda: lambda x: x * np.random.rand(),
        np.random.seed,
        lambda: None,
    )
    yield (
        "partial(os.getenv)",
        lambda: ft.partial(lambda get, x: x * float(get()), ft.partial(os.getenv, _ENV, "1")),
        lambda v: os.environ.__setitem__(_ENV, str(v)),
        lambda: os.environ.pop(_ENV, None),
    )


_NAMES = [name for name, *_ in _cases()]


def _case(name: str) -> tuple[Callable, Callable, Callable]:
    return next(c[1:] for c in _cases() if c[0] == name)


def _run(jit: Callable, name: str, values: list[int]) -> list[float]:
    make, set_, restore = _case(name)
    try:
        out = []
        for v in values:
            set_(v)
            out.append(float(jit(make())(jnp.float32(1.0))))
        return out
    finally:
        restore()


@pytest.mark.parametrize("name", _NAMES)
def test_a_rebuilt_reader_sees_the_library_data_as_it_is_now(name):
    values = [20, 30, 40]
    expected = _run(eqx.filter_jit, name, values)
    assert len(set(expected)) == 3
    assert _run(es.filter_jit, name, values) == expected


@pytest.mark.parametrize("name", _NAMES)
def test_readers_are_never_one_key_and_never_substituted(name):
    make, *_ = _case(name)
    a, b = make(), make()
    assert es.stable_key(a) != es.stable_key(b)
    assert es.intern(a) is a and es.intern(b) is b


def test_a_library_function_keyed_on_its_own_first_is_still_caught_when_reached():
    # Keyed on its own, a library function's key is memoised as a value key.
    es.stable_key(os.getenv)
    assert es.stable_key(ft.partial(os.getenv, _ENV)) != es.stable_key(ft.partial(os.getenv, _ENV))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=2, max_size=4))
def test_getenv_property(values):
    assert _run(es.filter_jit, "os.getenv", values) == [float(v) for v in values]


@pytest.mark.counts_traces
def test_the_same_reader_hits():
    f = count_traces(lambda x: x * float(os.getenv(_ENV, "1")))
    jitted = es.filter_jit(f)
    assert es.stable_key(f) == es.stable_key(f)
    jitted(jnp.float32(1.0))
    jitted(jnp.float32(1.0))
    assert f.count == 1


def test_the_miss_names_the_library_callable():
    jitted = es.filter_jit(lambda f, x: f(x))
    for _ in range(2):
        jitted(lambda x: x * float(os.getenv(_ENV, "1")), jnp.float32(1.0))
    assert "os.getenv" in jitted.misses[-1].reason


def _local_getenv():
    def f(x):
        from os import getenv

        return x * float(getenv(_ENV, "1"))

    return f


def _local_import_os():
    def f(x):
        import os

        return x * float(os.getenv(_ENV, "1"))

    return f


def _local_environ():
    def f(x):
        from os import environ

        return x * float(environ.get(_ENV, "1"))

    return f


def _local_math():
    def f(x):
        import math

        from jax import numpy

        return numpy.sin(x) * math.pi

    return f


@pytest.mark.parametrize("make", [_local_getenv, _local_import_os])
def test_a_local_import_of_a_library_not_on_the_list_is_identity(make):
    assert es.stable_key(make()) != es.stable_key(make())
    try:
        os.environ[_ENV] = "2"
        first = float(es.filter_jit(make())(jnp.float32(1.0)))
        os.environ[_ENV] = "5"
        assert (first, float(es.filter_jit(make())(jnp.float32(1.0)))) == (2.0, 5.0)
    finally:
        os.environ.pop(_ENV, None)


def test_library_data_imported_locally_is_keyed_by_value():
    make = _local_environ
    try:
        os.environ[_ENV] = "2"
        assert es.stable_key(make()) == es.stable_key(make())
        first = float(es.filter_jit(make())(jnp.float32(1.0)))
        os.environ[_ENV] = "5"
        assert (first, float(es.filter_jit(make())(jnp.float32(1.0)))) == (2.0, 5.0)
    finally:
        os.environ.pop(_ENV, None)
    assert es.stable_key(_local_math()) == es.stable_key(_local_math())


def test_a_library_class_or_builtin_imported_by_name_is_checked_too():
    # `from datetime import datetime`, `from time import time`: globals, not module attributes.
    def make_now():
        return lambda x: x * _DateTime.now().microsecond

    def make_time():
        return lambda x: x * _time()

    assert es.stable_key(make_now()) != es.stable_key(make_now())
    assert es.stable_key(make_time()) != es.stable_key(make_time())


def test_builtins_reading_the_outside_world_are_not_on_the_list():
    def make():
        return lambda path: open(path).read()

    assert es.stable_key(make()) != es.stable_key(make())

    def make_len():
        return lambda x: len(x) + float(sum(range(3)))

    assert es.stable_key(make_len()) == es.stable_key(make_len())


# Readers of library callables on the list: rebuilt, they are still one key.
_PURE: dict[str, Callable[[], object]] = {
    "jnp.sin": lambda: lambda x: jnp.sin(x) + jnp.tanh(x),
    "jax.nn.relu": lambda: lambda x: jax.nn.relu(x) + jax.nn.gelu(x),
    "jax.lax.scan": lambda: lambda x: jax.lax.scan(lambda c, y: (c + y, y), x, x),
    "jax.random": lambda: lambda k: jax.random.normal(k, (2,)),
    "numpy math": lambda: lambda x: np.sum(np.sin(x)) + np.concatenate([x, x]).mean(),
    "math": lambda: lambda x: x * math.sqrt(2.0),
    "optax.adam": lambda: optax.adam(1e-3),
    "optax.chain": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)),
    "partial(jnp.where)": lambda: ft.partial(jnp.where, True),
    "eqx.nn.MLP": lambda: eqx.partition(
        eqx.nn.MLP(2, 2, 4, 1, activation=lambda v: jnp.tanh(v), key=jax.random.key(0)),
        eqx.is_array,
    )[1],
    "functools.reduce": lambda: lambda xs: ft.reduce(lambda a, b: a + b, xs),
}


@pytest.mark.parametrize("name", list(_PURE))
def test_readers_of_the_allowlist_still_share_one_key(name):
    make = _PURE[name]
    assert es.stable_key(make()) == es.stable_key(make())


@pytest.mark.parametrize(
    "name",
    ["os.getenv", "np.get_printoptions", "np.random.rand", "np.load", "np.save", "jnp.load"],
)
def test_the_allowlist_leaves_out_library_data_readers(name):
    from eqxstable._keys._pure import pure_library

    module, attr = name.rsplit(".", 1)
    obj = getattr({"os": os, "np": np, "jnp": jnp, "np.random": np.random}[module], attr)
    assert not pure_library(obj)
