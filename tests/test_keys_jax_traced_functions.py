"""The documented trust of `docs/assumptions.md` "a function JAX traced is not kept past a global
it reads being rebound" (attack 15b-07): JAX keeps a function's traces by its identity, so one
traced before `G` was rebound computes with the old `G` in JAX, while its key (its globals now)
equals that of a rebuilt one. Pinned as a strict xfail; verify mode catches it."""

import jax
import jax.numpy as jnp
import pytest

import eqxstable as es


def _outer(x, fn):
    return fn(x)


def _stale_then_fresh(verify: bool) -> tuple[float, float]:
    namespace: dict = {"jax": jax, "G": 2.0}
    exec("make = lambda: jax.jit(lambda v: v * G)", namespace)  # A module of the user's own.
    x = jnp.float32(1.0)
    old = namespace["make"]()
    jitted = es.filter_jit(_outer, verify=verify)
    assert float(jitted(x, old)) == 2.0
    namespace["G"] = 1.0
    jitted(x, old)  # Traced again (the global changed), through JAX's trace of `old`.
    fresh = namespace["make"]()
    return float(jitted(x, fresh)), float(fresh(x))


@pytest.mark.xfail(strict=True, reason="documented trust: JAX's traces kept by identity")
def test_a_rebuilt_function_gets_its_own_value():
    served, eager = _stale_then_fresh(verify=False)
    assert served == eager == 1.0


def test_verify_mode_catches_it():
    with pytest.raises(es.StaleProgramError):
        _stale_then_fresh(verify=True)
