"""A non-array output leaf the trace made (a plain object, a `set`) is served only to the calls of
the objects that traced it (attack 12b, finding 02): an equivalent rebuilt function, through a
new wrapper or the same one, gets a fresh object of its own, as `equinox.filter_jit` (which traces
it again) returns one, never another function's, which its caller may have written to. It still
runs the program compiled for the equal trace (one compile); immutable values (numbers, strings,
dtypes, tuples of such) are shared with no new trace, and a returned model's callables are the
caller's own already (`test_jit_output_objects.py`)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._jit._fingerprint import AVAILABLE

from .helpers import compile_log


class Log:
    def __init__(self):
        self.lines = []


def _factory(counter: list):
    def step(x):
        counter[0] += 1
        return x + 1, Log(), {"seen": {1}}

    return step


def _run(jit, counter):
    x = jnp.ones(3)
    _, log_a, aux_a = jit(_factory(counter))(x)
    log_a.lines.append("A's note")
    aux_a["seen"].add(2)
    y, log_b, aux_b = jit(_factory(counter))(x)
    return log_a, log_b, aux_a, aux_b, y


@pytest.mark.counts_traces
def test_rebuilt_functions_get_fresh_objects_and_share_the_compiled_program():
    ours, theirs = [0], [0]
    with compile_log() as log:
        a, b, aux_a, aux_b, y = _run(es.filter_jit, ours)
    ea, eb, eaux_a, eaux_b, ey = _run(eqx.filter_jit, theirs)
    assert (a is b, b.lines, aux_b["seen"]) == (ea is eb, eb.lines, eaux_b["seen"])
    assert a is not b and b.lines == [] and aux_b["seen"] == {1}
    assert y.tolist() == ey.tolist() == [2.0, 2.0, 2.0]
    # Each function traced (as under Equinox); the second ran the first's executable.
    assert ours[0] == theirs[0] == 2
    if AVAILABLE:
        assert log.count("step") == 1


@pytest.mark.counts_traces
def test_the_same_function_is_served_its_traced_object_as_by_equinox():
    for jit in (es.filter_jit, eqx.filter_jit):
        n = [0]
        f = _factory(n)
        w = jit(f)
        first = w(jnp.ones(3))[1]
        assert w(jnp.ones(3))[1] is first
        assert jit(f)(jnp.ones(3))[1] is first  # A new wrapper of the very same function.
        other = w(jnp.ones(4))[1]  # Another shape is another trace, with its own.
        assert other is not first and w(jnp.ones(3))[1] is first
        assert n[0] == 2


@pytest.mark.counts_traces
def test_a_rebuilt_function_keeps_its_own_objects_across_shapes():
    n = [0]
    es.filter_jit(_factory(n))(jnp.ones(3))
    w = es.filter_jit(_factory(n))
    mine3 = w(jnp.ones(3))[1]
    mine4 = w(jnp.ones(4))[1]
    assert w(jnp.ones(3))[1] is mine3 and w(jnp.ones(4))[1] is mine4
    assert mine3 is not mine4
    first_again = es.filter_jit(_factory(n))(jnp.ones(3))[1]
    assert first_again is not mine3 and first_again is not mine4
    assert n[0] == 4


@pytest.mark.counts_traces
def test_immutable_outputs_are_shared_without_a_new_trace():
    n = 0

    def make():
        def f(x):
            nonlocal n
            n += 1
            return x * 2, 1, 2.5, "label", (3, "a"), None, jnp.float32, x.dtype

        return f

    x = jnp.ones(2)
    a = es.filter_jit(make())(x)
    b = es.filter_jit(make())(x)
    assert a[1:] == b[1:] == eqx.filter_jit(make())(x)[1:]
    assert n == 2  # Ours once, Equinox's once.


@pytest.mark.counts_traces
def test_a_step_returning_the_model_does_not_trace_per_rebuilt_model():
    n = 0

    def step(model, x):
        nonlocal n
        n += 1
        return model, model(x)

    w = es.filter_jit(step)
    x = jnp.ones(2)
    for i in range(3):
        model = eqx.nn.MLP(2, 2, 4, 2, activation=lambda v: jax.nn.relu(v), key=jax.random.key(i))
        out, y = w(model, x)
        assert out.activation is model.activation and y.shape == (2,)
    assert n == 1


@pytest.mark.counts_traces
def test_an_object_reached_through_a_static_input_is_the_callers_own():
    # `cfg.log` is no output of the trace's making, but no static input leaf either: the
    # current call's object, as `equinox.filter_jit` (keying `cfg` by identity) returns it.
    class Cfg:
        def __init__(self):
            self.log = Log()

    n = 0

    def step(x, cfg):
        nonlocal n
        n += 1
        return x + 1, cfg.log

    w = es.filter_jit(step)
    c1, c2 = Cfg(), Cfg()
    assert w(jnp.ones(2), c1)[1] is c1.log
    assert w(jnp.ones(2), c2)[1] is c2.log
    assert w(jnp.ones(2), c1)[1] is c1.log
    assert n == 2


def test_the_miss_of_a_rebuilt_function_says_why_it_traced():
    def make():
        return lambda x: (x - 1, Log())

    es.filter_jit(make())(jnp.ones(5))
    w = es.filter_jit(make())
    assert w(jnp.ones(5))[0].tolist() == [0.0] * 5
    (miss,) = w.misses
    assert miss.kind == "identity"
    assert "its trace made" in miss.reason and "host callback" not in miss.reason
