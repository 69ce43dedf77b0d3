"""JAX's configuration holders (`jax.enable_checks`, `jax.log_compiles`: `State` objects) read
through `.value` are keyed by their value now, watched (attack 12a, finding 09): inside
`with jax.enable_checks(True):`, or after `jax.config.update(...)`, a rebuilt function reading one
traces again, as under `equinox.filter_jit`; with nothing changed it still hits."""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es

from .helpers import count_traces


HOLDERS = {"enable_checks": jax.enable_checks, "log_compiles": jax.log_compiles}
ALIAS = jax.enable_checks


def _reader(name, where):
    holder = HOLDERS[name]
    if where == "module attribute":
        if name == "enable_checks":
            return lambda x: x * (3.0 if jax.enable_checks.value else 1.0)
        return lambda x: x * (3.0 if jax.log_compiles.value else 1.0)
    if where == "global":
        return lambda x: x * (3.0 if ALIAS.value else 1.0) if name == "enable_checks" else x
    if where == "default":
        return lambda x, h=holder: x * (3.0 if h.value else 1.0)
    # A closure cell.
    return lambda x: x * (3.0 if holder.value else 1.0)


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(["enable_checks", "log_compiles"]),
    st.sampled_from(["module attribute", "global", "default", "cell"]),
    st.sampled_from(["context", "update"]),
)
def test_a_rebuilt_reader_follows_the_holders_value(name, where, how):
    if where == "global" and name != "enable_checks":
        return
    run = es.filter_jit(lambda f, x: f(x))
    x = jnp.float32(1.0)
    assert float(run(_reader(name, where), x)) == 1.0
    holder = HOLDERS[name]
    if how == "context":
        with holder(True):
            assert float(run(_reader(name, where), x)) == float(_reader(name, where)(x)) == 3.0
    else:
        jax.config.update(f"jax_{name}", True)
        try:
            assert float(run(_reader(name, where), x)) == float(_reader(name, where)(x)) == 3.0
        finally:
            jax.config.update(f"jax_{name}", False)
    assert float(run(_reader(name, where), x)) == 1.0


@pytest.mark.counts_traces
def test_with_nothing_changed_a_rebuilt_reader_hits():
    counter = count_traces(lambda f, x: f(x))
    run = es.filter_jit(counter)
    for _ in range(3):
        assert float(run(_reader("enable_checks", "module attribute"), jnp.float32(1.0))) == 1.0
    assert counter.count == 1
