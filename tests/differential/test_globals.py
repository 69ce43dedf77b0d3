"""Differential situations: what a function reads through its globals (issue 9, item 1 and 2).

Module-level code is executed in a namespace dict (`h.module`), so its loop variables really are
globals, as in a script or a notebook.
"""

import builtins

import pytest

from .harness import check, MODES, Situations


SITUATIONS = Situations()


@SITUATIONS.add
def global_read_directly(h):
    """The issue's first example: a new lambda per value of a module-level loop variable."""
    h.module("""
    p, g = jnp.array([1.0, 1.0]), jnp.array([1.0, 2.0])
    for lr in (0.1, 0.5):
        h.call(lambda p, g: p - lr * g, p, g)
    """)


@SITUATIONS.add
def global_same_function_rebound(h):
    """One function object, its global rebound between calls."""
    h.module("""
    c = 2.0
    f = lambda x: x * c
    h.call(f, jnp.ones(3))
    c = 3.0
    h.call(f, jnp.ones(3))
    """)


@SITUATIONS.add
def global_read_by_helper(h):
    """The global is read by a helper that the function calls."""
    h.module("""
    def helper(x):
        return x * scale

    for scale in (1.0, 3.0):
        h.call(lambda x: helper(x) + 1.0, jnp.ones(2))
    """)


@SITUATIONS.add
def global_read_two_helpers_deep(h):
    h.module("""
    def inner(x):
        return x - offset

    def outer(x):
        return inner(x) * 2.0

    for offset in (0.0, 5.0):
        h.call(lambda x: outer(x), jnp.ones(2))
    """)


@SITUATIONS.add
def global_holding_a_function(h):
    """`for act in (gelu, relu): Net(lambda z: act(z) / 2)`: the global is a function."""
    h.module("""
    class Net(eqx.Module):
        act: object
        def __call__(self, x):
            return self.act(x)

    x = jnp.array([-1.0, 0.5, 2.0])
    for act in (jax.nn.gelu, jax.nn.relu):
        h.call(Net(lambda z: act(z) / 2), x)
    """)


@SITUATIONS.add
def global_function_rebound_same_lambda(h):
    h.module("""
    act = jnp.tanh
    f = lambda x: act(x) * 2.0
    h.call(f, jnp.array([0.5, 1.0]))
    act = jnp.sin
    h.call(f, jnp.array([0.5, 1.0]))
    """)


@SITUATIONS.add
def class_attribute(h):
    """A class attribute read by a new lambda after the class attribute changed."""
    h.module("""
    class Config:
        lr = 0.1

    h.call(lambda x: x * Config.lr, jnp.ones(2))
    Config.lr = 0.5
    h.call(lambda x: x * Config.lr, jnp.ones(2))
    """)


@SITUATIONS.add
def class_attribute_via_classmethod(h):
    h.module("""
    class Scaler:
        k = 2.0
        @classmethod
        def apply(cls, x):
            return x * cls.k

    h.call(Scaler.apply, jnp.ones(2))
    Scaler.k = 7.0
    h.call(Scaler.apply, jnp.ones(2))
    """)


@SITUATIONS.add
def staticmethod_reads_global(h):
    h.module("""
    class Ops:
        @staticmethod
        def f(x):
            return x + shift

    for shift in (1.0, 4.0):
        h.call(Ops.f, jnp.ones(2))
    """)


@SITUATIONS.add
def global_instance_attribute(h):
    """A global plain object whose attribute changes; the lambda is rebuilt."""
    h.module("""
    class Cfg:
        def __init__(self):
            self.lr = 0.1

    cfg = Cfg()
    h.call(lambda x: x * cfg.lr, jnp.ones(2))
    cfg.lr = 0.5
    h.call(lambda x: x * cfg.lr, jnp.ones(2))
    """)


@SITUATIONS.add
def global_frozen_dataclass_rebound(h):
    h.module("""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        lr: float

    for cfg in (Cfg(0.1), Cfg(0.5)):
        h.call(lambda x: x * cfg.lr, jnp.ones(2))
    """)


@SITUATIONS.add
def global_dict_mutated(h):
    h.module("""
    CFG = {"lr": 0.1}
    h.call(lambda x: x * CFG["lr"], jnp.ones(2))
    CFG["lr"] = 0.5
    h.call(lambda x: x * CFG["lr"], jnp.ones(2))
    """)


@SITUATIONS.add
def global_list_appended(h):
    h.module("""
    L = [1.0]
    f = lambda x: x * len(L) + sum(L)
    h.call(f, jnp.ones(2))
    L.append(2.0)
    h.call(f, jnp.ones(2))
    """)


@SITUATIONS.add
def global_numpy_array_mutated_in_place(h):
    h.module("""
    W = np.array([1.0, 2.0], dtype=np.float32)
    h.call(lambda x: x * W, jnp.ones(2))
    W[0] = 5.0
    h.call(lambda x: x * W, jnp.ones(2))
    """)


@SITUATIONS.add
def global_shadows_a_builtin_later(h):
    """`abs` resolves to the builtin, until the module defines a global `abs`."""
    h.module("""
    f = lambda x: abs(x) * 1.0
    h.call(f, jnp.array([-1.0, 2.0]))
    abs = lambda x: -x
    h.call(f, jnp.array([-1.0, 2.0]))
    h.call(lambda x: abs(x) * 1.0, jnp.array([-1.0, 2.0]))
    """)


@SITUATIONS.add
def global_deleted_falls_back_to_the_builtin(h):
    h.module("""
    abs = lambda x: -x
    f = lambda x: abs(x) * 1.0
    h.call(f, jnp.array([-1.0, 2.0]))
    del abs
    h.call(f, jnp.array([-1.0, 2.0]))
    """)


@SITUATIONS.add
def globals_updated_through_the_dict(h):
    h.module("""
    k = 2.0
    f = lambda x: x * k
    h.call(f, jnp.ones(2))
    globals().update(k=3.0)
    h.call(f, jnp.ones(2))
    h.call(lambda x: x * k, jnp.ones(2))
    """)


@SITUATIONS.add
def global_dtype_rebound(h):
    h.module("""
    for DTYPE in (jnp.float32, jnp.float16, jnp.int32):
        h.call(lambda x: (x * 2).astype(DTYPE), jnp.array([1.5, 2.5]))
    """)


@SITUATIONS.add
def module_property_reads_a_global(h):
    h.module("""
    class Net(eqx.Module):
        @property
        def scale(self):
            return SCALE
        def __call__(self, x):
            return x * self.scale

    for SCALE in (2.0, 3.0):
        h.call(Net(), jnp.ones(2))
    """)


@SITUATIONS.add
def module_class_variable_changed(h):
    h.module("""
    from typing import ClassVar

    class Net(eqx.Module):
        scale: ClassVar[float] = 2.0
        def __call__(self, x):
            return x * self.scale

    h.call(Net(), jnp.ones(2))
    Net.scale = 3.0
    h.call(Net(), jnp.ones(2))
    """)


@SITUATIONS.add
def builtins_module_attribute(h):
    """A name found in the `builtins` module, which a user sets and changes."""
    name = "_eqxstable_differential_scale"
    setattr(builtins, name, 2.0)
    try:
        h.module(f"""
        h.call(lambda x: x * {name}, jnp.ones(2))
        import builtins
        builtins.{name} = 3.0
        h.call(lambda x: x * {name}, jnp.ones(2))
        """)
    finally:
        delattr(builtins, name)


@SITUATIONS.add
def global_read_through_globals_call(h):
    """`globals()["c"]`: a read that no bytecode analysis of names can see."""
    h.module("""
    for c in (2.0, 3.0):
        h.call(lambda x: x * globals()["c"], jnp.ones(2))
    """)


@SITUATIONS.add
def global_rebound_to_equal_value_then_different(h):
    h.module("""
    lr = 0.1
    h.call(lambda x: x * lr, jnp.ones(2))
    lr = float("0.1")
    h.call(lambda x: x * lr, jnp.ones(2))
    lr = 0.2
    h.call(lambda x: x * lr, jnp.ones(2))
    """)


@SITUATIONS.add
def global_int_then_float(h):
    """The global keeps its value but changes type: 2 -> 2.0 changes the dtype."""
    h.module("""
    for k in (2, 2.0):
        h.call(lambda x: x * k, jnp.array([1, 2], dtype=jnp.int32))
    """)


@SITUATIONS.add
def recursion_through_global_name(h):
    """A recursive function reads a global; it calls itself by its global name."""
    h.module("""
    def power(x, n):
        return x if n == 0 else power(x * c, n - 1)

    for c in (2.0, 3.0):
        h.call(lambda x: power(x, 2), jnp.ones(2))
    """)


@SITUATIONS.add
def function_attribute_set_after_keyed(h):
    """`g.extra = 5` on a function after it was used; the function reads its own attribute."""
    h.module("""
    def g(x):
        return x * g.extra

    g.extra = 2.0
    h.call(g, jnp.ones(2))
    g.extra = 5.0
    h.call(g, jnp.ones(2))
    """)


@SITUATIONS.add
def method_on_global_instance_reads_global(h):
    h.module("""
    class Scaler:
        def __call__(self, x):
            return x * SCALE

    s = Scaler()
    for SCALE in (2.0, 3.0):
        h.call(lambda x: s(x), jnp.ones(2))
    """)


@SITUATIONS.add
def script_sweep_of_terms(h):
    """A diffrax-like term (a module holding `lambda t, y, args: -k * y`) built in a
    module-level sweep over `k`, and stepped by an explicit Euler solver."""
    h.module("""
    class ODETerm(eqx.Module):
        vector_field: object

    def euler(term, y):
        for _ in range(3):
            y = y + 0.1 * term.vector_field(0.0, y, None)
        return y

    for k in (1.0, 2.0, 4.0):
        h.call(ODETerm(lambda t, y, args: -k * y), jnp.ones(2), apply=euler)
    """)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_global(situation, mode):
    check(situation, mode)
