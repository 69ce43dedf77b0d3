"""Generated situations: hypothesis writes small programs as source text (globals, a helper, a
closure with a `nonlocal` setter, a list) with random constants, then a random mutation between
calls, and the harness compares every mode with eager Python at every step."""

import hypothesis.strategies as st
import pytest
from hypothesis import given, HealthCheck, note, Phase, settings

from .harness import check, MODES


# Values chosen to collide under `==` where a careless key would: ints and floats, signed zeros.
_VALUES = st.sampled_from(["2.0", "3.0", "2", "-0.0", "0.0", "0.5", "True"])

_READS = {
    "global": "G0",
    "helper": "helper(x)",
    "cell": "c",
    "list": "L[0]",
    "class": "Cfg.k",
}

_MUTATIONS = {
    "rebind_global": "G0 = {v}",
    "rebind_helper_global": "G1 = {v}",
    "set_cell": "setc({v})",
    "list_item": "L[0] = {v}",
    "list_append": "L.insert(0, {v})",
    "class_attribute": "Cfg.k = {v}",
    "redefine_helper": "def helper(x):\n    return x * G1 - {v}",
    "reexec_make": "f, setc = make({v})",
}

_TEMPLATE = """\
G0 = {g0}
G1 = {g1}
L = [{l0}]

class Cfg:
    k = {k0}

def helper(x):
    return x * G1

def make(v):
    c = v
    def f(x):
        return x * 1.0 + {expr}
    def setc(w):
        nonlocal c
        c = w
    return f, setc

f, setc = make({c0})
h.call(f, X)
h.call({call0}, X)
{mutation}
h.call(f, X)
h.call({call1}, X)
h.call(make({c1})[0], X)
"""

_CALLS = ["f", "lambda x: f(x)", "make(c0_again)[0]", "ft.partial(f)"]


@st.composite
def programs(draw) -> str:
    reads = draw(st.lists(st.sampled_from(sorted(_READS)), min_size=1, max_size=3, unique=True))
    expr = " + ".join(_READS[r] if r != "helper" else _READS[r] for r in reads)
    mutation = draw(st.sampled_from(sorted(_MUTATIONS)))
    values = {name: draw(_VALUES) for name in ("g0", "g1", "l0", "k0", "c0", "c1", "v")}
    source = _TEMPLATE.format(
        expr=expr,
        mutation=_MUTATIONS[mutation].format(v=values["v"]),
        call0=draw(st.sampled_from(_CALLS)),
        call1=draw(st.sampled_from(_CALLS)),
        **{k: v for k, v in values.items() if k != "v"},
    )
    return source.replace("c0_again", values["c0"])


@pytest.mark.parametrize("mode", MODES)
@settings(
    max_examples=10,
    deadline=None,
    # No shrinking: each example compiles several programs, and the report prints the source.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@given(source=programs())
def test_generated_program(mode, source):
    import jax.numpy as jnp

    def situation(h):
        h.expect_distinct = False  # A random program may well compute the same thing twice.
        h.module(source, X=jnp.array([1.0, -2.0]))

    situation.__name__ = "generated"
    note(source)
    check(situation, mode)
