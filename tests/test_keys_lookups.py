"""Where a name a function reads comes from, and who serves it: a builtin the program bound
itself, a module whose class is not `ModuleType`, a globals mapping that is not a `dict`, a user
function on a library submodule. Each is keyed by what the trace reads, or makes its reader a key
equal to nothing; never a stale program."""

import builtins

import jax.numpy as jnp
import pytest

import eqxstable as es


ONE = jnp.float32(1.0)
_HELPER_SCALE = 2.0


def _helper(x):
    return x * _HELPER_SCALE


@pytest.mark.counts_traces
def test_a_builtin_the_program_binds_itself():
    global _HELPER_SCALE
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * FIX7K_SCALE  # pyright: ignore[reportUndefinedVariable]  # noqa: F821

    def g(x):
        return fix7k_helper(x)  # pyright: ignore[reportUndefinedVariable]  # noqa: F821

    builtins.FIX7K_SCALE = 2.0  # pyright: ignore[reportAttributeAccessIssue]
    builtins.fix7k_helper = _helper  # pyright: ignore[reportAttributeAccessIssue]
    try:
        jf, jg = es.filter_jit(f), es.filter_jit(g)
        assert float(jf(ONE)) == 2.0 and float(jg(ONE)) == 2.0
        builtins.FIX7K_SCALE = 3.0  # pyright: ignore[reportAttributeAccessIssue]
        _HELPER_SCALE = 3.0
        assert float(jf(ONE)) == 3.0 and float(jg(ONE)) == 3.0
        assert float(jf(ONE)) == 3.0
        assert traces == 2
        # Keyed by value: an equal rebinding is still a hit.
        builtins.FIX7K_SCALE = 3.0  # pyright: ignore[reportAttributeAccessIssue]
        assert float(jf(ONE)) == 3.0 and traces == 2
    finally:
        del builtins.FIX7K_SCALE  # pyright: ignore[reportAttributeAccessIssue]
        del builtins.fix7k_helper  # pyright: ignore[reportAttributeAccessIssue]
        _HELPER_SCALE = 2.0


def test_a_python_builtin_rebound():
    def f(x):
        return x * len(bin(2))

    jf = es.filter_jit(f)
    assert float(jf(ONE)) == 4.0
    original = builtins.bin
    builtins.bin = lambda v: "0b1"
    try:
        assert float(jf(ONE)) == 3.0
    finally:
        builtins.bin = original
    assert float(jf(ONE)) == 4.0


class _Served(dict):
    def __init__(self, source):
        super().__init__()
        self.source = source

    def __missing__(self, name):
        return self.source[name]


def test_globals_that_are_not_a_dict_serve_names_no_key_sees():
    source = {"FIX7K_LR": 2.0}
    namespace = _Served(source)
    namespace["__builtins__"] = builtins
    exec(compile("def h(x):\n    return x * FIX7K_LR\n", "<user>", "exec"), namespace)
    h = namespace["h"]
    jh = es.filter_jit(h)
    assert float(jh(ONE)) == 2.0
    source["FIX7K_LR"] = 3.0
    assert float(jh(ONE)) == 3.0
    # Rebuilt from the same source, never shared with another: each is a key equal to nothing.
    exec(compile("def h(x):\n    return x * FIX7K_LR\n", "<user>", "exec"), namespace)
    assert es.stable_key(namespace["h"]) != es.stable_key(h)
