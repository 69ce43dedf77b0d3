"""`equinox.error_if` failures inside `es.filter_jit` raise `equinox.EquinoxRuntimeError` with
Equinox's guidance, as under `equinox.filter_jit`, without JAX's ERROR log record."""

import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqxstable as es


def _positive_is_an_error(x):
    return eqx.error_if(x, x > 0, "egads, a positive number")


@pytest.mark.parametrize("jit", [es.filter_jit, eqx.filter_jit], ids=["es", "eqx"])
def test_error_if_raises_equinox_runtime_error(jit, caplog):
    f = jit(_positive_is_an_error)
    assert float(f(jnp.asarray(-1.0))) == -1.0
    with caplog.at_level(logging.DEBUG), pytest.raises(eqx.EquinoxRuntimeError) as info:
        f(jnp.asarray(1.0))
    text = str(info.value)
    assert text.startswith("Above is the stack outside of JIT")
    assert "egads, a positive number" in text
    assert "EQX_ON_ERROR" in text
    assert info.value.__cause__ is None
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_error_if_in_a_nested_stable_function(caplog):
    inner = es.filter_jit(_positive_is_an_error)

    @es.filter_jit
    def outer(x):
        return inner(x) * 2

    with pytest.raises(eqx.EquinoxRuntimeError, match="egads, a positive number") as info:
        outer(jnp.asarray(1.0))
    # The stack inside the jitted function names the function that failed.
    assert "_positive_is_an_error" in str(info.value)
    assert caplog.text == ""
    # A failed call still counts as a call; the program is reused by the next one.
    assert float(outer(jnp.asarray(-1.0))) == -2.0
    assert (outer.cache_info().hits, outer.cache_info().misses) == (1, 1)


def test_a_hit_whose_program_raises_is_counted():
    def check(x):
        return eqx.error_if(x, x > 0, "positive")

    f = es.filter_jit(check)
    for _ in range(3):
        with pytest.raises(eqx.EquinoxRuntimeError):
            f(jnp.asarray(1.0))
    # Every call ran the program: one miss, two hits (`hits + misses` is the number of calls).
    assert f.cache_info()[:2] == (2, 1)


def test_other_callback_errors_are_left_as_jax_raised_them():
    class Boom(Exception):
        pass

    def fail(x):
        raise Boom("kaboom")

    @es.filter_jit
    def f(x):
        return jax.pure_callback(fail, jax.ShapeDtypeStruct((), jnp.float32), x)

    with pytest.raises(Exception, match="kaboom") as info:
        f(jnp.asarray(1.0))
    assert not isinstance(info.value, eqx.EquinoxRuntimeError)
    assert "EQX_ON_ERROR" not in str(info.value)


def test_log_records_outside_stable_calls_are_untouched(caplog):
    with caplog.at_level(logging.ERROR, logger="jax._src.callback"):
        logging.getLogger("jax._src.callback").error("jax.pure_callback failed")
    assert [r.getMessage() for r in caplog.records] == ["jax.pure_callback failed"]


def test_only_programs_that_can_raise_are_waited_for():
    # Equinox waits for every call so that an `error_if` failure is raised by the call (on a GPU
    # it would otherwise surface where the result is used). The stable wrapper waits only for
    # programs holding such a check, and keeps every other call asynchronous.
    checked = es.filter_jit(_positive_is_an_error)
    plain = es.filter_jit(lambda x: x * 2)
    checked(jnp.asarray(-1.0))
    plain(jnp.asarray(-1.0))
    assert len(checked._program.waits) == 1
    assert len(plain._program.waits) == 0
