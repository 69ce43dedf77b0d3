"""Library data read by a user's function (`eqxstable/_keys/README.md`, `K-module-attrs`):
`os.environ`, `sys.argv`, a library module's dicts and config objects are keyed where a function
reads them; library code stays a constant; a module's PEP 562 `__getattr__` makes its reader
unkeyable."""

import importlib
import logging
import os
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqxstable as es
from eqxstable._keys import compute

from .keys_support import key


def reads_environ(x):
    return x * float(os.environ["EQXS_TEST_SCALE"])


def reads_argv(x):
    return x * len(sys.argv)


@pytest.mark.counts_traces
def test_library_data_read_by_a_function_is_keyed(monkeypatch):
    monkeypatch.setenv("EQXS_TEST_SCALE", "2.0")
    results = []
    for scale in ("2.0", "3.0"):
        os.environ["EQXS_TEST_SCALE"] = scale
        fn = types.FunctionType(reads_environ.__code__, globals())  # rebuilt per setting
        results.append(float(es.filter_jit(fn)(jnp.float32(1))))
    assert results == [2.0, 3.0]
    same = es.filter_jit(reads_environ)
    os.environ["EQXS_TEST_SCALE"] = "4.0"
    assert float(same(jnp.float32(1))) == 4.0
    os.environ["EQXS_TEST_SCALE"] = "5.0"
    assert float(same(jnp.float32(1))) == 5.0
    before = key(reads_argv)
    monkeypatch.setattr(sys, "argv", [*sys.argv, "extra"])
    assert key(reads_argv) != before


def test_library_constants_stay_constants():
    def uses_code(x):
        return jnp.sin(x) + jax.nn.relu(x) + np.pi

    k = key(uses_code)
    assert not k.identity
    twin = types.FunctionType(uses_code.__code__, globals())
    twin.__qualname__ = uses_code.__qualname__  # Python 3.10 takes it from `co_name`.
    assert key(twin) == k
    assert key(os.environ).identity and es.intern(os.environ) is os.environ
    assert key(sys.argv).identity
    # Optax transforms, `jax.jit` wrappers and partials rebuilt are still one.
    assert es.intern(optax.adam(1e-3)) is es.intern(optax.adam(1e-3))
    assert key(optax.adam(1e-3)) != key(optax.adam(1e-4))
    g = lambda x: x  # noqa: E731
    assert es.intern(jax.jit(g)) is es.intern(jax.jit(g))


def test_module_getattr_makes_its_reader_unkeyable(tmp_path, monkeypatch):
    (tmp_path / "lazy_cfg_eqxs.py").write_text(
        "def __getattr__(name):\n"
        "    if name == 'LR':\n"
        "        return 0.1\n"
        "    raise AttributeError(name)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = importlib.import_module("lazy_cfg_eqxs")
    try:
        f = eval("lambda x: x * cfg.LR", {"cfg": cfg})
        assert key(f) != key(f)
        assert float(es.filter_jit(f)(jnp.float32(1))) == pytest.approx(0.1)
    finally:
        sys.modules.pop("lazy_cfg_eqxs", None)


def reads_library_dict(x):
    return x * len(logging._levelToName)


def reads_jax_config(x):
    return x * (2 if jax.config.jax_enable_x64 else 1)  # pyright: ignore[reportAttributeAccessIssue]


def test_library_module_data_dicts_and_config_objects(monkeypatch):
    before = key(reads_library_dict)
    assert key(reads_library_dict) == before
    monkeypatch.setitem(logging._levelToName, 99, "NINETY-NINE")
    assert key(reads_library_dict) != before
    # A config object: itself and its attributes one level deep, watched; never walked whole.
    k = key(reads_jax_config)
    assert key(reads_jax_config) == k
    _, watch = compute(reads_jax_config)
    assert watch.valid() and len(watch) < 20
