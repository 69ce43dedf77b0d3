"""A program also stands for the state its trace left its objects in (a trace counter, a list it
appends to: `Cache.rekey`, `_sharing.alias_program`), for those very objects, only until a call
sees them in another state (`_aliases.py`). A user who then writes the state back is traced
again, as a fresh trace from that state computes (attack 8b-08): the aliased program was traced
from another state."""

import jax.numpy as jnp
import pytest
from hypothesis import example, given, settings, strategies as st

import eqxstable as es


def _global_reader():
    """A function that appends to a list it captures while traced (as a global would be)."""
    log: list = []

    def f(x):
        log.append(1)
        return x * len(log)

    return log, es.filter_jit(f), lambda w, x: w(x)


def _static_reader():
    """The same list, reached through a static argument's function."""
    log: list = []

    def get():
        return log

    def f(x, get):
        get().append(1)
        return x * len(get())

    return log, es.filter_jit(f), lambda w, x: w(x, get)


_READERS = {"function": _global_reader, "static-argument": _static_reader}


@pytest.mark.counts_traces
@pytest.mark.parametrize("reader", list(_READERS))
def test_a_state_written_back_by_the_user_is_traced_again(reader):
    log, wrapper, call = _READERS[reader]()
    x = jnp.ones(())
    assert float(call(wrapper, x)) == 1.0  # Traced from []: x * 1, leaves [1].
    assert float(call(wrapper, x)) == 1.0  # The state the trace left: the same program.
    assert log == [1]
    log[:] = [7, 7]
    assert float(call(wrapper, x)) == 3.0
    log[:] = [1]
    # Eager, and a fresh trace from [1], give x * 2.
    assert float(call(wrapper, x)) == 2.0
    assert log == [1, 1]
    path = {"function": "f", "static-argument": "args[1]"}[reader]
    assert [(m.kind, m.path) for m in wrapper.misses] == [
        ("first", ""),
        ("mutated", path),
        ("mutated", path),
    ]
    # The write back is a change in place like any other.
    assert wrapper.misses[2].reason == wrapper.misses[1].reason
    assert "the list held by the `log` it captures was changed in place" in (
        wrapper.misses[2].reason
    )
    # The state this trace left is its own again: a hit.
    assert float(call(wrapper, x)) == 2.0
    assert wrapper.cache_info().traces == 3


@pytest.mark.counts_traces
def test_a_trace_counter_is_still_a_hit_on_the_next_call_and_for_a_new_wrapper():
    n = 0
    traces = 0

    def f(x):
        nonlocal n, traces
        n += 1
        traces += 1
        return x + 1

    x = jnp.ones(())
    es.filter_jit(f)(x)
    es.filter_jit(f)(x)  # Another wrapper of `f`, in the state the trace left.
    wrapper = es.filter_jit(f)
    wrapper(x)
    wrapper(x)
    assert traces == 1
    wrapper(jnp.ones(2))  # A new shape traces again, under the same program.
    wrapper(jnp.ones(2))
    wrapper(x)
    es.filter_jit(f)(x)
    assert traces == 2


_states = st.lists(st.integers(0, 2), max_size=3)


@pytest.mark.counts_traces
@settings(max_examples=40)
@example(reader="function", writes=[[0], [1]])
@example(reader="static-argument", writes=[[2, 2], None, [1]])
@given(
    reader=st.sampled_from(list(_READERS)),
    writes=st.lists(st.one_of(st.none(), _states), min_size=1, max_size=6),
)
def test_every_call_computes_what_a_trace_from_its_state_computes(reader, writes):
    """A call computes `x * (len(state) + 1)` from the state it is given, except one that finds
    the objects in the state the trace before it left them (the counter idiom): that call reuses
    the program it just traced, as `equinox.filter_jit` would."""
    log, wrapper, call = _READERS[reader]()
    x = jnp.ones(())
    traced_from: set = set()
    previous = None  # (the state after the previous call, its output)
    for write in [None, *writes]:
        if write is not None:
            log[:] = write
        state = tuple(log)
        if previous is not None and previous[0] == state:
            expected = previous[1]
        else:
            expected = float(len(state) + 1)
            if state not in traced_from:
                traced_from.add(state)
                state = (*state, 1)
        assert float(call(wrapper, x)) == expected
        assert tuple(log) == state
        previous = (state, expected)
