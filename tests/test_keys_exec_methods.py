"""A method a user made with `exec` (compiled from "<string>", as `dataclasses` compiles the
methods it generates) is the user's code: the globals it reads are keyed."""

import sys

import jax.numpy as jnp
import pytest

import eqxstable as es


SCALE = 2.0
_ns: dict = {}
exec("def __call__(self, x):\n    return x * SCALE", globals(), _ns)


class ExecCall:
    __call__ = _ns["__call__"]


# Python 3.10's code objects have no qualified name: there a method compiled from "<string>" is
# taken as one `dataclasses` made (`_classes.generated`), as before.
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="no co_qualname on 3.10")


@pytest.mark.counts_traces
def test_exec_dunder_reading_a_global():
    global SCALE
    traces = 0

    def f(x, o):
        nonlocal traces
        traces += 1
        return o(x)

    w = es.filter_jit(f)
    obj = ExecCall()
    try:
        assert float(w(jnp.float32(1.0), obj)) == 2.0
        SCALE = 3.0
        assert float(w(jnp.float32(1.0), obj)) == float(obj(jnp.float32(1.0))) == 3.0
        assert traces == 2
    finally:
        SCALE = 2.0


def test_class_key_follows_the_global():
    global SCALE
    before = es.stable_key(ExecCall)
    SCALE = 5.0
    try:
        assert es.stable_key(ExecCall) != before
    finally:
        SCALE = 2.0
