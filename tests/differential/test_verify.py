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
