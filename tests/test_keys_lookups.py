"""Where a name a function reads comes from, and who serves it: a builtin the program bound
itself, a module whose class is not `ModuleType`, a globals mapping that is not a `dict`, a user
function on a library submodule. Each is keyed by what the trace reads, or makes its reader a key
equal to nothing; never a stale program."""

import builtins
import types

import jax
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


def _module_with_a_property(name: str, state: dict) -> types.ModuleType:
    # The PEP 549 idiom, `sys.modules[__name__].__class__ = M`, on a module of the user's.
    module = types.ModuleType(name)
    module.__file__ = f"/nowhere/{name}.py"

    class Served(types.ModuleType):
        @property
        def LR(self):
            return state["lr"]

    module.__class__ = Served
    module.STEP = 1.0  # pyright: ignore[reportAttributeAccessIssue]
    return module


def test_a_module_whose_class_serves_an_attribute():
    state = {"lr": 2.0}
    cfg = _module_with_a_property("fix7k_cfg", state)

    def f(x):
        return x * cfg.LR  # pyright: ignore[reportAttributeAccessIssue]

    def whole(x):
        return x * _read(cfg)

    jf, jw = es.filter_jit(f), es.filter_jit(whole)
    assert float(jf(ONE)) == 2.0 and float(jw(ONE)) == 2.0
    state["lr"] = 3.0
    assert float(jf(ONE)) == 3.0 and float(jw(ONE)) == 3.0


_CFG = _module_with_a_property("fix7k_cfg2", {"lr": 2.0})


def _read(module):
    return module.LR


@pytest.mark.counts_traces
def test_a_module_whose_class_serves_nothing_read_still_shares():
    # Its class is keyed and watched: a property added to it later is seen.
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return x * _CFG.STEP  # pyright: ignore[reportAttributeAccessIssue]

        return f

    jitted = [es.filter_jit(make()) for _ in range(2)]
    assert [float(j(ONE)) for j in jitted] == [1.0, 1.0]
    assert traces == 1
    type(_CFG).STEP = property(lambda self: 5.0)  # pyright: ignore[reportAttributeAccessIssue]
    assert float(jitted[0](ONE)) == 5.0


_ACT_SCALE = 2.0


def _act(x):
    return x * _ACT_SCALE


@pytest.mark.counts_traces
def test_a_user_function_on_a_library_submodule():
    global _ACT_SCALE
    traces = 0

    def make():
        def f(x):
            nonlocal traces
            traces += 1
            return jax.nn.fix7k_act(x) + jax.nn.relu(x) * 0  # pyright: ignore[reportAttributeAccessIssue]

        return f

    jax.nn.fix7k_act = _act  # pyright: ignore[reportAttributeAccessIssue]
    try:
        jf = es.filter_jit(make())
        assert float(jf(ONE)) == 2.0
        _ACT_SCALE = 3.0
        assert float(jf(ONE)) == 3.0
        # Rebuilt: still shared (the library's own code, `jax.nn.relu`, is constant).
        assert float(es.filter_jit(make())(ONE)) == 3.0
        assert traces == 2
    finally:
        del jax.nn.fix7k_act  # pyright: ignore[reportAttributeAccessIssue]
        _ACT_SCALE = 2.0


def test_a_module_attribute_absent_then_served():
    cfg = types.ModuleType("fix7k_optional")
    cfg2 = types.ModuleType("fix7k_optional2")
    namespace = {"cfg": cfg, "cfg2": cfg2}
    source = (
        "def f(x):\n"
        "    try:\n"
        "        s = cfg.LR\n"
        "    except AttributeError:\n"
        "        s = 1.0\n"
        "    return x * s\n"
        "def g(x):\n"
        "    return x * getattr(cfg2, 'LR', 1.0) + x * (cfg2.LR if hasattr(cfg2, 'LR') else 0.0)\n"
    )
    exec(compile(source, "<user>", "exec"), namespace)
    jf = es.filter_jit(namespace["f"])  # pyright: ignore[reportArgumentType]
    assert float(jf(ONE)) == 1.0
    cfg.__getattr__ = lambda name: 5.0  # pyright: ignore[reportAttributeAccessIssue]
    assert float(jf(ONE)) == 5.0

    class Served(types.ModuleType):
        LR = 4.0

    jg = es.filter_jit(namespace["g"])  # pyright: ignore[reportArgumentType]
    assert float(jg(ONE)) == 1.0
    cfg2.__class__ = Served
    assert float(jg(ONE)) == 8.0


def _private_scale(module, x):
    return x * getattr(module, "__scale")


def test_names_starting_with_two_underscores_are_keyed():
    cfg = types.ModuleType("fix7k_private")
    setattr(cfg, "__scale", 2.0)
    f = es.filter_jit(lambda x: _private_scale(cfg, x))
    assert float(f(ONE)) == 2.0
    setattr(cfg, "__scale", 3.0)
    assert float(f(ONE)) == 3.0
    namespace: dict = {"__scale": 2.0}
    exec(compile("def g(x):\n    return x * globals()['__scale']\n", "<user>", "exec"), namespace)
    g = es.filter_jit(namespace["g"])  # pyright: ignore[reportArgumentType]
    assert float(g(ONE)) == 2.0
    namespace["__scale"] = 3.0
    assert float(g(ONE)) == 3.0
    namespace["__version__"] = "2"
    assert float(g(ONE)) == 3.0
