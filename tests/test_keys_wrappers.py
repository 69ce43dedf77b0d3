"""C callables that wrap the user's functions, the builtins that read any global however they are
reached, and JAX's key-path entries: each keyed so that what the wrapped or named objects compute
with is part of the key (`K-library-object`, `K-function`, `K-key-path` in
`eqxstable/_keys/README.md`); mocks, which make what they are asked for, are never walked
(`K-opaque`)."""

import builtins
import contextlib
import functools as ft
import operator

import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest
from hypothesis import given, strategies as st

import eqxstable as es

from .helpers import started_walks


DESCENDING = False
SCALE = 1.0


@contextlib.contextmanager
def _scale(value):
    # Rebinds the global that the wrapped functions read, and puts it back for the next test.
    global SCALE
    SCALE = value
    try:
        yield
    finally:
        SCALE = 1.0


def _cmp(a, b):
    s = (a > b) - (a < b)
    return -s if DESCENDING else s


def _scaled(a):
    return a * SCALE


CMP_KEY = ft.cmp_to_key(_cmp)
CALLER = operator.methodcaller("__call__", _scaled)
UFUNC = np.frompyfunc(_scaled, 1, 1)


def _sorts():
    return lambda x: x * sorted([1.0, 2.0], key=CMP_KEY)[0]


def test_cmp_to_key_is_keyed_by_the_function_it_wraps():
    global DESCENDING
    a, b = es.stable_key(_sorts()), es.stable_key(_sorts())
    assert a == b  # rebuilt readers of the same wrapper still share
    try:
        DESCENDING = True
        assert es.stable_key(_sorts()) != a
    finally:
        DESCENDING = False
    assert es.stable_key(_sorts()) == a


@pytest.mark.counts_traces
def test_cmp_to_key_reader_retraces_when_the_wrapped_function_would_differ():
    global DESCENDING
    x = jnp.ones(())
    try:
        assert float(es.filter_jit(_sorts())(x)) == 1.0
        DESCENDING = True
        assert float(es.filter_jit(_sorts())(x)) == 2.0
    finally:
        DESCENDING = False


def test_methodcaller_holding_a_user_function_is_keyed_by_it():
    f = lambda x: CALLER(lambda g: g(x))  # noqa: E731
    k = es.stable_key(f)
    with _scale(3.0):
        assert es.stable_key(f) != k


@pytest.mark.counts_traces
def test_frompyfunc_reader_sees_the_wrapped_functions_globals():
    def f(x):
        return x * float(UFUNC(2.0))

    j = es.filter_jit(f)
    x = jnp.ones(())
    assert float(j(x)) == 2.0
    with _scale(3.0):
        assert float(j(x)) == 6.0


def _eval_through_module(x):
    return x * builtins.eval("SCALE")


def _eval_in_default(x, ev=eval):
    return x * ev("SCALE")


@pytest.mark.parametrize("f", [_eval_through_module, _eval_in_default])
def test_dynamic_builtins_key_every_global_however_reached(f):
    k = es.stable_key(f)
    with _scale(3.0):
        assert es.stable_key(f) != k


@pytest.mark.counts_traces
def test_eval_through_module_under_jit_sees_the_new_global():
    j = es.filter_jit(_eval_through_module)
    x = jnp.ones(())
    assert float(j(x)) == 1.0
    with _scale(3.0):
        assert float(j(x)) == 3.0


_ENTRIES = [jtu.DictKey, jtu.SequenceKey, jtu.FlattenedIndexKey]
_FIELDS = st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from([0.0, -0.0, 1.0, 2.0]))


@given(st.sampled_from(_ENTRIES), _FIELDS, st.sampled_from(_ENTRIES), _FIELDS)
def test_key_path_entries_type_exactly(ta, a, tb, b):
    if ta is not jtu.DictKey and type(a) is not int:
        a = int(a)
    if tb is not jtu.DictKey and type(b) is not int:
        b = int(b)
    x, y = ta(a), tb(b)
    same = ta is tb and es.stable_key(a) == es.stable_key(b)
    assert (es.stable_key(x) == es.stable_key(y)) == same


def test_get_attr_key_by_name():
    assert es.stable_key(jtu.GetAttrKey("a")) == es.stable_key(jtu.GetAttrKey("a"))
    assert es.stable_key(jtu.GetAttrKey("a")) != es.stable_key(jtu.GetAttrKey("b"))
    assert es.stable_key(jtu.GetAttrKey("a")) != es.stable_key(jtu.DictKey("a"))


@pytest.mark.counts_traces
def test_dict_key_static_argument_type_exact_under_jit():
    @es.filter_jit
    def f(k, x):
        return x + jnp.asarray(k.key)

    x = jnp.zeros((), jnp.int32)
    assert f(jtu.DictKey(1), x).dtype == jnp.int32
    assert f(jtu.DictKey(1.0), x).dtype == (x + jnp.asarray(1.0)).dtype


def test_mocks_are_never_walked(monkeypatch):
    # A mock makes a child per attribute asked for and a class per instance: walking it asks
    # more (40 s and more per `MagicMock`). It is itself, and its reader is never shared.
    from unittest import mock

    for make in (mock.MagicMock, mock.Mock):
        m = make()
        walks = started_walks(monkeypatch)
        k = es.stable_key(m)
        # Nothing of it walked (walked, it is one object per attribute asked, past the budget).
        assert sum(w.walked for w in walks) == 0
        assert k == es.stable_key(m) and k != es.stable_key(make())
        assert es.intern(m) is m
        assert es.stable_key(lambda: m()) != es.stable_key(lambda: m())


_CFG_DIR = __import__("tempfile").mkdtemp()
CFG = __import__("pathlib").Path(_CFG_DIR) / "scale.txt"


def _reads_file():
    return lambda x: x * float(CFG.read_text())


def _reads_name():
    return lambda x: (x, CFG.name)


def _closes_over(p):
    return lambda x: x * float(p.read_text())


def test_a_path_read_through_its_methods_is_never_shared():
    CFG.write_text("1.0")
    assert es.stable_key(_reads_file()) != es.stable_key(_reads_file())
    assert es.stable_key(_closes_over(CFG)) != es.stable_key(_closes_over(CFG))
    # Read for its text alone, it is keyed by its text (`K-path`), and rebuilt readers share.
    assert es.stable_key(_reads_name()) == es.stable_key(_reads_name())


@pytest.mark.counts_traces
def test_a_rebuilt_reader_sees_the_file_as_it_is_now():
    x = jnp.ones(())
    CFG.write_text("1.0")
    assert float(es.filter_jit(_reads_file())(x)) == 1.0
    CFG.write_text("3.0")
    assert float(es.filter_jit(_reads_file())(x)) == 3.0
    assert float(es.filter_jit(_closes_over(CFG))(x)) == 3.0
