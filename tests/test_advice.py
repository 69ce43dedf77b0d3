"""Each miss gets advice that fits its cause, or says that the recompile is expected.

"Pass what changes as an argument" is right for a number that changes from run to run; it is
wrong for a trace counter reset from outside, a function defined again in a notebook cell, or a
sweep that switches the activation on purpose.
"""

import jax
import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._jit._advice import rebound_advice


TRACES = 0
SCALE = 2.0


def _counted(x):
    global TRACES
    TRACES += 1
    return x * SCALE


def _counter_and_reset():
    n = 0

    def counted(x):
        nonlocal n
        n += 1
        return x * SCALE

    def reset():
        # Not to 0: back at the value it was traced with, the function is the one traced.
        nonlocal n
        n = 100

    return counted, reset


def _key_after(change) -> tuple:
    old = es.stable_key(_counted)
    change()
    return old, es.stable_key(_counted)


def test_a_trace_counter_reset_from_outside_is_not_told_to_become_an_argument():
    # A counter that only its function bumps is no part of the key (a global, or a closure
    # variable): resetting the global is no change at all.
    global TRACES
    old = es.stable_key(_counted)
    TRACES = 0
    assert es.stable_key(_counted) == old

    # A closure variable that a sibling resets is read by the key; its reset is explained.
    counted, reset = _counter_and_reset()
    counted(1.0)
    old = es.stable_key(counted)
    reset()
    advice = rebound_advice(old, es.stable_key(counted))
    assert "`n` is assigned by" in advice and "itself" in advice
    assert "pass what changes as an argument" not in advice


def test_the_stable_filter_jit_explains_a_reset_counter_the_same_way():
    counted, reset = _counter_and_reset()
    f = es.filter_jit(counted)
    f(jnp.ones(2))
    reset()
    f(jnp.ones(2))
    miss = f.misses[-1]
    assert miss.kind == "mutated"
    assert "`n` is assigned by" in miss.reason
    assert "pass what changes as an argument" not in miss.reason


def test_a_changed_setting_is_told_to_become_an_argument():
    global SCALE

    def change():
        global SCALE
        SCALE = 3.0

    try:
        old, new = _key_after(change)
    finally:
        SCALE = 2.0
    assert "pass what changes as an argument" in rebound_advice(old, new)


def _apply(x, activation):
    return activation(x)


@pytest.mark.counts_traces
def test_a_sweep_over_activations_is_an_expected_recompile():
    run = es.filter_jit(_apply)
    for activation in (jax.nn.relu, jax.nn.gelu):
        run(jnp.ones(2), activation)
    miss = run.misses[-1]
    assert (miss.kind, miss.path) == ("static", "args[1]")
    assert "`args[1]` is another function: `relu` -> `gelu`" in miss.reason
    assert "expected when you switch it on purpose" in miss.reason
    assert "as an array" not in miss.reason and "compared by identity" not in miss.reason


_CELL = """
def activation(x):
    return x * {factor}
"""


@pytest.mark.counts_traces
def test_a_function_defined_again_in_a_notebook_cell_is_an_expected_recompile():
    # Each run of a notebook cell executes its source again, in the same namespace.
    run = es.filter_jit(_apply)
    namespace: dict = {}
    for factor in (2, 3):
        exec(compile(_CELL.format(factor=factor), "<cell>", "exec"), namespace)
        run(jnp.ones(2), namespace["activation"])
    miss = run.misses[-1]
    assert "`args[1]` was defined again" in miss.reason
    assert "this recompile is expected" in miss.reason
    assert "pass the same function" not in miss.reason
