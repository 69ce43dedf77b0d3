"""The ambient state library code reads while tracing (NumPy's error state and print options,
Python's warning filters) is part of the key of a function keyed anew (attack 12b, finding 03):
an equivalent rebuilt function called under another state is traced again under it, as eager
Python and `equinox.filter_jit` run it, never served the program traced under the old state.
Under an unchanged state a rebuilt function still shares the compiled program."""

import warnings

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es


def _make(counter: list):
    def f(x):
        counter[0] += 1
        return x + np.log(np.float64(-1.0))

    return f


def _quiet():
    c = warnings.catch_warnings()
    c.__enter__()
    warnings.simplefilter("ignore")
    return c


def _outcome(run):
    try:
        return ("value", np.asarray(run()).tolist())
    except (FloatingPointError, RuntimeWarning) as e:
        return ("raises", type(e).__name__)


@pytest.mark.counts_traces
@pytest.mark.parametrize("state", ["errstate", "filter"])
def test_a_rebuilt_function_under_a_new_state_traces_as_eager_and_equinox(state):
    counter = [0]
    x = jnp.ones(())
    c = _quiet()
    try:
        first = es.filter_jit(_make(counter))(x)
        assert np.isnan(np.asarray(first)) and counter[0] == 1
    finally:
        c.__exit__(None, None, None)

    def under(run):
        with warnings.catch_warnings():
            if state == "filter":
                warnings.simplefilter("error")
                return _outcome(run)
            warnings.simplefilter("ignore")
            with np.errstate(invalid="raise"):
                return _outcome(run)

    got = under(lambda: es.filter_jit(_make(counter))(x))
    eager = under(lambda: _make([0])(x))
    ref = under(lambda: eqx.filter_jit(_make([0]))(x))
    assert got == eager == ref
    assert got[0] == "raises"
    assert counter[0] == 2  # Traced again, under the new state.


@pytest.mark.counts_traces
def test_print_options_are_keyed():
    n = 0

    def make():
        def g(x):
            nonlocal n
            n += 1
            return x * len(repr(np.array([1 / 3])))

        return g

    x = jnp.ones(())
    old = np.get_printoptions()
    try:
        a = float(es.filter_jit(make())(x))
        np.set_printoptions(precision=2)
        b = float(es.filter_jit(make())(x))
        assert b == float(make()(x)) == float(eqx.filter_jit(make())(x))
        assert a != b and n == 4  # Two traces of ours, one eager run, one of equinox's.
    finally:
        np.set_printoptions(**old)


@pytest.mark.counts_traces
def test_a_rebuilt_function_under_an_unchanged_state_shares_the_program(compiles):
    n = 0

    def make():
        def h(x):
            nonlocal n
            n += 1
            return x * 2.0

        return h

    x = jnp.ones(3)
    for _ in range(3):
        # A fresh `catch_warnings` (as pytest's per test) with equal filters is one state.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert es.filter_jit(make())(x).tolist() == [2.0, 2.0, 2.0]
    # `compiles` starts with no program an earlier test compiled for this jaxpr to reuse.
    assert n == 1 and compiles.count("h") == 1


@pytest.mark.counts_traces
def test_the_same_function_keeps_its_program_under_a_new_state():
    # As `equinox.filter_jit` serves its own cache: only a function keyed anew reads the state.
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x + 1.0

    w = es.filter_jit(f)
    x = jnp.ones(())
    w(x)
    with np.errstate(all="raise"):
        w(x)
    assert n == 1 and w.cache_info()[:2] == (1, 1)


@pytest.mark.counts_traces
def test_a_rebuilt_static_argument_under_a_new_state_traces_again():
    n = 0

    def step(x, fn):
        nonlocal n
        n += 1
        return fn(x)

    w = es.filter_jit(step)
    x = jnp.ones(())
    make = lambda: lambda x: x + np.log(np.float64(-1.0))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isnan(np.asarray(w(x, make())))
        with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
            w(x, make())
    assert n == 2


def test_jax_trace_time_warnings_follow_the_filters():
    # With x64 off, JAX warns while tracing that float64 is truncated: `-W error` raises it.
    make = lambda: lambda x: x + jnp.zeros((), dtype=jnp.float64)  # noqa: E731
    x = jnp.ones(())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert es.filter_jit(make())(x).tolist() == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            make()(x)
        with pytest.raises(UserWarning):
            eqx.filter_jit(make())(x)
        with pytest.raises(UserWarning):
            es.filter_jit(make())(x)


def _ambient(state: str):
    if state == "errstate":
        return np.errstate(invalid="raise")
    if state == "printoptions":
        return np.printoptions(precision=3)
    return warnings.catch_warnings()


@pytest.mark.parametrize(
    "state, part, change",
    [
        ("errstate", "NumPy's error state", "invalid 'warn' -> 'raise'"),
        ("printoptions", "NumPy's print options", "precision 8 -> 3"),
        ("filter", "the warning filters", "'error' for Warning matching '13b-02' added"),
    ],
)
def test_a_miss_under_a_new_state_names_the_state(state, part, change):
    # Attack 13b-02: such a miss said "compiled again for arguments it has seen before (JAX's
    # own cache no longer held the program...)", naming neither the state nor the new object.
    def step(x, act):
        return act(x)

    es.clear_caches()  # `step` of an earlier case shares the program: its misses too.
    wrapper = es.filter_jit(step)
    x = jnp.ones(3)
    made = []
    for context in (warnings.catch_warnings(), _ambient(state)):
        with context:
            if state == "filter" and made:
                warnings.filterwarnings("error", message="13b-02")
            # Rebuilt each time: an equivalent new object, keyed anew.
            made.append(lambda v: v * 2.0)
            np.testing.assert_allclose(wrapper(x, made[-1]), [2.0, 2.0, 2.0])
    miss = wrapper.misses[-1]
    assert (miss.kind, miss.path) == ("first", "")
    assert miss.reason.startswith(f"first call of `step` under this ambient state ({part}")
    assert change in miss.reason
    assert "a static argument is a new object, equivalent to one" in miss.reason
    assert "pass the same objects every call" in miss.reason
    assert "seen before" not in miss.reason


def test_a_miss_under_the_same_state_is_not_blamed_on_it():
    def step(x, act):
        return act(x)

    act = lambda v: v * 2.0  # noqa: E731
    wrapper = es.filter_jit(step)
    wrapper(jnp.ones(3), act)
    wrapper._state.program.cache.clear()  # pyright: ignore[reportAttributeAccessIssue]
    wrapper(jnp.ones(3), act)
    # Traced again with nothing changed, ambient state included: not blamed on that state.
    assert wrapper.misses[-1].kind == "first"
    assert "seen before" in wrapper.misses[-1].reason
