"""A module a function imports in its own body is read as surely as one it loads as a global:
`def loss(x): import config; return x * config.LR` is keyed by `config.LR` (attack 6, finding
04), as is `config.__dict__["LR"]`; a library imported in a rebuilt lambda still shares; what
cannot be followed (a module not imported yet, a replaced `__import__`) is identity-keyed."""

# The modules imported in the functions' bodies are written by the fixture, and given new values
# by assignment: pyright can see neither.
# pyright: reportMissingImports=false, reportAttributeAccessIssue=false

import builtins
import importlib
import os
import struct
import sys
import types

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import eqxstable as es
from eqxstable._keys._imports import imports


_CFG = "eqxs_imp_cfg"
_PKG = "eqxs_imp_pkg"
_cfg: types.ModuleType  # Set by the fixture: a user module read as a global.
# Normal float32 values: XLA on CPU flushes subnormal products to zero, NumPy does not.
_lrs = st.lists(
    st.floats(-4, 4, allow_nan=False, allow_subnormal=False, width=32), min_size=1, max_size=3
)


@pytest.fixture(scope="module", autouse=True)
def modules(tmp_path_factory):
    global _cfg
    d = tmp_path_factory.mktemp("imports")
    (d / f"{_CFG}.py").write_text("LR = 1.0\n")
    (d / _PKG).mkdir()
    (d / _PKG / "__init__.py").write_text("")
    (d / _PKG / "cfg.py").write_text("LR = 1.0\n")
    (d / _PKG / "model.py").write_text(
        "def make(count):\n"
        "    def loss(x):\n"
        "        count()\n"
        "        from . import cfg\n"
        "        return x * cfg.LR\n"
        "    return loss\n"
    )
    sys.path.insert(0, str(d))
    _cfg = importlib.import_module(_CFG)
    importlib.import_module(f"{_PKG}.cfg")
    importlib.import_module(f"{_PKG}.model")
    yield
    sys.path.remove(str(d))
    for name in [n for n in sys.modules if n.startswith((_CFG, _PKG))]:
        del sys.modules[name]


def _set_lr(value: float) -> None:
    sys.modules[_CFG].LR = value
    sys.modules[f"{_PKG}.cfg"].LR = value


def _makers(count):
    """Rebuilt functions that read `LR` of a user module, each in another way."""

    def plain():
        def loss(x):
            count()
            import eqxs_imp_cfg

            return x * eqxs_imp_cfg.LR

        return loss

    def from_import():
        def loss(x):
            count()
            from eqxs_imp_cfg import LR

            return x * LR

        return loss

    def dotted_as():
        def loss(x):
            count()
            import eqxs_imp_pkg.cfg as c

            return x * c.LR

        return loss

    def dotted():
        def loss(x):
            count()
            import eqxs_imp_pkg.cfg

            return x * eqxs_imp_pkg.cfg.LR

        return loss

    def in_a_cell():
        def loss(x):
            count()
            import eqxs_imp_cfg

            return (lambda: x * eqxs_imp_cfg.LR)()

        return loss

    def module_dict():
        def loss(x):
            count()
            return x * _cfg.__dict__["LR"]

        return loss

    def relative():
        return sys.modules[f"{_PKG}.model"].make(count)

    return [plain, from_import, dotted_as, dotted, in_a_cell, module_dict, relative]


def _bits(lr: float) -> bytes:
    return struct.pack("<d", lr)


def _check(lrs: list[float]) -> None:
    # The counter lives here, not in the test: Hypothesis wraps the test, and the enclosing code of
    # a closure over the test's own variable is not found there (so it is not a counter).
    traces = 0

    def count():
        nonlocal traces
        traces += 1

    x = jnp.arange(3.0)
    for make in _makers(count):
        start = traces
        for lr in lrs:
            _set_lr(lr)
            # Rebuilt twice: the second shares the first's program while `LR` is unchanged.
            for _ in range(2):
                out = es.filter_jit(make())(x)
                np.testing.assert_allclose(out, np.arange(3.0, dtype=np.float32) * np.float32(lr))
        # At most one trace per change of `LR` (by its bits: `0.0` and `-0.0` are two keys),
        # never one per rebuilt function.
        changes = sum(_bits(a) != _bits(b) for a, b in zip(lrs, lrs[1:]))
        assert 1 <= traces - start <= 1 + changes, make.__name__


@pytest.mark.counts_traces
@settings(max_examples=5, deadline=None)
@given(_lrs)
@example([0.0, -0.0])
def test_a_module_read_in_the_body_is_keyed_by_what_it_reads(lrs):
    _check(lrs)


def _key(f):
    return es.stable_key(f)


def test_what_a_body_import_binds_is_read_from_the_bytecode():
    def f(x):
        import eqxs_imp_pkg.cfg as c
        from eqxs_imp_cfg import LR

        return x * c.LR * LR

    found = {(b.name, b.chain): b.attrs for b in imports(f.__code__) or ()}
    assert found == {(f"{_PKG}.cfg", ("cfg",)): ("LR",), (_CFG, ("LR",)): None}


@pytest.mark.counts_traces
def test_a_library_imported_in_a_rebuilt_lambda_shares_its_program():
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            import jax.numpy as jnp
            from jax import numpy as jnp2

            return jnp.sin(x) + jnp2.cos(x)

        return f

    assert len({_key(make()) for _ in range(3)}) == 1
    x = jnp.linspace(0.0, 1.0, 4)
    for _ in range(3):
        np.testing.assert_allclose(es.filter_jit(make())(x), np.sin(x) + np.cos(x), rtol=1e-6)
    assert traces == 1


@pytest.mark.counts_traces
def test_library_data_read_through_a_body_import_is_keyed(monkeypatch):
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            import os

            return x * float(os.environ["EQXS_IMP_SCALE"])

        return f

    outs = []
    for scale in ("2", "2", "3"):
        monkeypatch.setenv("EQXS_IMP_SCALE", scale)
        outs.append(float(es.filter_jit(make())(jnp.float32(1.5))))
    assert outs == [3.0, 3.0, 4.5]
    assert traces == 2
    assert os.environ["EQXS_IMP_SCALE"] == "3"


def test_a_module_replaced_in_sys_modules_is_a_new_key(monkeypatch):
    def make():
        def f(x):
            import eqxs_imp_cfg

            return x * eqxs_imp_cfg.LR

        return f

    _set_lr(1.0)
    before = _key(make())
    assert _key(make()) == before
    other = types.ModuleType(_CFG)
    other.LR = 1.0
    monkeypatch.setitem(sys.modules, _CFG, other)
    assert _key(make()) != before
    assert float(es.filter_jit(make())(jnp.float32(2.0))) == 2.0


def test_what_cannot_be_followed_is_identity_keyed(monkeypatch):
    def not_imported_yet():
        def f(x):
            import eqxs_imp_not_yet  # noqa: F401  # The module does not exist: never called.

            return x

        return f

    a, b = _key(not_imported_yet()), _key(not_imported_yet())
    assert a.identity and a != b

    def make():
        def f(x):
            import eqxs_imp_cfg

            return x * eqxs_imp_cfg.LR

        return f

    assert not _key(make()).identity
    original = builtins.__import__
    # An import hook in the function's builtins may return anything for the module's name.
    monkeypatch.setattr(builtins, "__import__", lambda *a, **k: original(*a, **k))
    a, b = _key(make()), _key(make())
    assert a.identity and a != b


@pytest.mark.counts_traces
def test_a_miss_names_the_module_attribute_a_body_import_read():
    def make():
        def loss(x):
            from eqxs_imp_cfg import LR

            return x * LR

        return loss

    step = es.filter_jit(lambda f, x: f(x))
    outs = []
    for lr in (1.0, 1.0, 2.5):
        _set_lr(lr)
        outs.append(float(step(make(), jnp.float32(2.0))))
    assert outs == [2.0, 2.0, 5.0]
    assert len(step.misses) == 2
    reason = step.misses[-1].reason
    assert f"{_CFG}.LR" in reason and "1.0 -> 2.5" in reason, reason
