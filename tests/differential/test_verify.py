"""Verify mode (CONTRACT section 3) catches what the key deliberately trusts: a library function
monkeypatched after a call is served from the cache by design, and verify mode must say so."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


def forward(x):
    return jax.nn.relu(x) * 2.0


def _x():
    return jnp.array([-1.0, 2.0])


def test_verify_catches_a_monkeypatched_library_function(monkeypatch):
    es.clear_caches()
    run = es.filter_jit(forward, verify=True)  # pyright: ignore[reportCallIssue]
    np.testing.assert_allclose(run(_x()), [0.0, 4.0])
    np.testing.assert_allclose(run(_x()), [0.0, 4.0])  # A hit that verifies clean.
    monkeypatch.setattr(jax.nn, "relu", lambda x: x)
    with pytest.raises(es.StaleProgramError, match="forward"):  # pyright: ignore
        run(_x())


def test_verify_from_the_environment(monkeypatch):
    es.clear_caches()
    monkeypatch.setenv("EQXSTABLE_VERIFY", "1")
    run = es.filter_jit(forward)
    run(_x())
    monkeypatch.setattr(jax.nn, "relu", jnp.abs)
    with pytest.raises(es.StaleProgramError, match="forward"):  # pyright: ignore
        run(_x())


def test_switching_verify_on_reaches_wrappers_made_before(monkeypatch):
    # `pytest --eqxstable-verify` switches verify mode on after the rootdir conftest.py may have
    # made wrappers: they follow the switch call by call, and `verify=False` stays off.
    from eqxstable._jit import _verify

    es.clear_caches()
    monkeypatch.delenv("EQXSTABLE_VERIFY", raising=False)
    monkeypatch.setattr(_verify, "ON", False)
    follows = es.filter_jit(forward)
    refuses = es.filter_jit(forward, verify=False)  # pyright: ignore[reportCallIssue]
    np.testing.assert_allclose(follows(_x()), [0.0, 4.0])
    np.testing.assert_allclose(refuses(_x()), [0.0, 4.0])
    monkeypatch.setattr(jax.nn, "relu", jnp.abs)
    # Not verified yet: the stale program is served, as by design outside verify mode.
    np.testing.assert_allclose(follows(_x()), [0.0, 4.0])
    _verify.switch_on()
    with pytest.raises(es.StaleProgramError, match="forward"):  # pyright: ignore
        follows(_x())
    np.testing.assert_allclose(refuses(_x()), [0.0, 4.0])
