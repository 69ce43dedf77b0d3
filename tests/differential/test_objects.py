"""Differential situations: bound methods, callable objects and plain objects whose state
changes between calls (attributes, `__slots__`, properties, `__class__`, the class)."""

import collections
import dataclasses
import gc
import types
import warnings

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

from ..helpers import AlwaysEqual
from .harness import check, MODES, Situations


SITUATIONS = Situations()


class Obj:
    def __init__(self, k):
        self.k = k

    def scale(self, x):
        return x * self.k

    def __call__(self, x):
        return x + self.k


def _by_k(c, x):
    return x * c.k


def _first_item(c, x):
    return x * c[0]


@SITUATIONS.add
def bound_method_self_attribute_changed(h):
    o = Obj(2.0)
    m = o.scale
    h.call(m, jnp.ones(2))
    o.k = 3.0
    h.call(m, jnp.ones(2))
    h.call(o.scale, jnp.ones(2))


@SITUATIONS.add
def bound_methods_of_equal_instances_one_mutated(h):
    o1, o2 = Obj(2.0), Obj(2.0)
    h.call(o1.scale, jnp.ones(2))
    h.call(o2.scale, jnp.ones(2))
    o1.k = 5.0
    h.call(o2.scale, jnp.ones(3))
    h.call(o1.scale, jnp.ones(3))


@SITUATIONS.add
def identity_reused_after_gc(h):
    """Each object dies before the next is made, so the next one often gets the same `id()`: an
    identity key must never match it."""
    for k in (2.0, 3.0, 4.0, 5.0):
        o = Obj(k)
        h.call(o, jnp.ones(2), apply=_by_k)
        del o
        gc.collect()
    for k in (6.0, 7.0):
        s = [k]
        h.call(s, jnp.ones(2), apply=_first_item, box=True)
        del s
        gc.collect()


@SITUATIONS.add
def user_callable_whose_eq_is_always_true(h):
    for k in (2.0, 3.0):
        h.call(AlwaysEqual(k), jnp.ones(2))


@SITUATIONS.add
def callable_object_state_changed(h):
    o = Obj(1.0)
    h.call(o, jnp.ones(2))
    o.k = 4.0
    h.call(o, jnp.ones(2))


@SITUATIONS.add
def class_of_instance_reassigned(h):
    class Other(Obj):
        def scale(self, x):
            return x - self.k

    o = Obj(2.0)
    h.call(lambda x: o.scale(x), jnp.ones(2))
    o.__class__ = Other
    h.call(lambda x: o.scale(x), jnp.ones(2))


@SITUATIONS.add
def instance_attribute_shadows_class_attribute_later(h):
    class C:
        k = 2.0

        def scale(self, x):
            return x * self.k

    o = C()
    h.call(o.scale, jnp.ones(2))
    o.k = 6.0
    h.call(o.scale, jnp.ones(2))


@SITUATIONS.add
def method_replaced_on_the_class(h):
    class C:
        def scale(self, x):
            return x * 2.0

    o = C()
    h.call(o.scale, jnp.ones(2))
    C.scale = lambda self, x: x * 8.0
    h.call(o.scale, jnp.ones(2))


@SITUATIONS.add
def slots_attribute_changed(h):
    """An object with `__slots__` has no `__dict__` to snapshot."""

    class S:
        __slots__ = ("k",)

        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return x * self.k

    s = S(2.0)
    h.call(s, jnp.ones(2))
    s.k = 3.0
    h.call(s, jnp.ones(2))


@SITUATIONS.add
def property_over_private_state(h):
    class P:
        def __init__(self):
            self._k = 2.0

        @property
        def k(self):
            return self._k * 2.0

        def __call__(self, x):
            return x * self.k

    p = P()
    h.call(p, jnp.ones(2))
    p._k = 5.0
    h.call(p, jnp.ones(2))


@SITUATIONS.add
def getattr_hook_over_a_table(h):
    class Dyn:
        def __init__(self):
            self.table = {"scale": 2.0}

        def __getattr__(self, name):
            if name == "table":
                raise AttributeError(name)
            try:
                return self.table[name]
            except KeyError:
                raise AttributeError(name) from None

    d = Dyn()
    h.call(lambda x: x * d.scale, jnp.ones(2))
    d.table["scale"] = 3.0
    h.call(lambda x: x * d.scale, jnp.ones(2))


@SITUATIONS.add
def class_level_table_mutated(h):
    class T:
        table = {"k": 2.0}

        def __call__(self, x):
            return x * self.table["k"]

    t = T()
    h.call(t, jnp.ones(2))
    T.table["k"] = 3.0
    h.call(t, jnp.ones(2))
    h.call(T(), jnp.ones(2))


@SITUATIONS.add
def eqx_module_static_field_set_by_force(h):
    """`object.__setattr__` on a frozen module (what some libraries do in `__init__`-time
    hooks); the module is then called again."""

    class M(eqx.Module):
        k: float = eqx.field(static=True)

        def __call__(self, x):
            return x * self.k

    m = M(2.0)
    h.call(m, jnp.ones(2))
    object.__setattr__(m, "k", 3.0)
    h.call(m, jnp.ones(2))


@SITUATIONS.add
def eqx_module_static_list_appended(h):
    """A list in a static field of a plain module, changed in place (issue item 5)."""
    h.static_copies = True  # A `StableModule` holds a read-only copy (harness docstring).

    class M(eqx.Module):
        ks: list = eqx.field(static=True)

        def __call__(self, x):
            return x * len(self.ks) + sum(self.ks)

    m = M([1.0])
    h.call(m, jnp.ones(2))
    m.ks.append(2.0)
    h.call(m, jnp.ones(2))


@SITUATIONS.add
def eqx_module_static_numpy_mutated(h):
    h.static_copies = True  # A `StableModule` holds a read-only copy (harness docstring).

    class M(eqx.Module):
        w: np.ndarray = eqx.field(static=True)

        def __call__(self, x):
            return x * self.w

    with warnings.catch_warnings():
        # Equinox warns about an array in a static field; users see it and carry on.
        warnings.simplefilter("ignore", UserWarning)
        m = M(np.array([1.0, 2.0], dtype=np.float32))
    h.call(m, jnp.ones(2))
    m.w[0] = 9.0
    h.call(m, jnp.ones(2))


def _by_lr(c, x):
    return x * c.lr


def _by_scale_list(c, x):
    return x * len(c.xs) + sum(c.xs)


@SITUATIONS.add
def plain_dataclass_mutated(h):
    @dataclasses.dataclass
    class Cfg:
        lr: float

    cfg = Cfg(0.1)
    h.call(cfg, jnp.ones(2), apply=_by_lr)
    cfg.lr = 0.5
    h.call(cfg, jnp.ones(2), apply=_by_lr)


@SITUATIONS.add
def frozen_dataclass_with_a_list_inside(h):
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        xs: list

    cfg = Cfg([1.0])
    h.call(cfg, jnp.ones(2), apply=_by_scale_list, box=True)
    cfg.xs.append(2.0)
    h.call(cfg, jnp.ones(2), apply=_by_scale_list, box=True)


@SITUATIONS.add
def frozen_dataclass_field_left_out_of_eq(h):
    """`field(compare=False)`: equal by `==`, different where the trace reads."""

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        name: str
        lr: float = dataclasses.field(compare=False)

    h.call(Cfg("adam", 0.1), jnp.ones(2), apply=_by_lr, box=True)
    h.call(Cfg("adam", 0.5), jnp.ones(2), apply=_by_lr, box=True)


@SITUATIONS.add
def simple_namespace_mutated(h):
    ns = types.SimpleNamespace(lr=0.1)
    h.call(ns, jnp.ones(2), apply=_by_lr, box=True)
    ns.lr = 0.5
    h.call(ns, jnp.ones(2), apply=_by_lr, box=True)


@SITUATIONS.add
def mapping_proxy_over_a_changing_dict(h):
    """A read-only view whose dict underneath changes."""
    d = {"lr": 0.1}
    view = types.MappingProxyType(d)
    apply = lambda v, x: x * v["lr"]  # noqa: E731
    h.call(view, jnp.ones(2), apply=apply, box=True)
    d["lr"] = 0.5
    h.call(view, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def tuple_holding_a_list_mutated(h):
    h.static_copies = True  # A `StableModule` holds a read-only copy (harness docstring).
    t = ([2.0], "scale")
    apply = lambda t, x: x * t[0][0]  # noqa: E731
    h.call(t, jnp.ones(2), apply=apply, box=True)
    t[0][0] = 3.0
    h.call(t, jnp.ones(2), apply=apply, box=True)


@SITUATIONS.add
def deque_appended(h):
    """A library container with no `__dict__` (a `collections.deque`), changed in place."""
    d = collections.deque([2.0])
    h.call(d, jnp.ones(2), apply=_first_item, box=True)
    d.appendleft(3.0)
    h.call(d, jnp.ones(2), apply=_first_item, box=True)


@SITUATIONS.add
def empty_namespace_filled_later(h):
    """A library object with no attributes yet is not a constant: they may come later."""
    ns = types.SimpleNamespace()
    apply = lambda c, x: x * getattr(c, "k", 2.0)  # noqa: E731
    h.call(ns, jnp.ones(2), apply=apply, box=True)
    ns.k = 3.0
    h.call(ns, jnp.ones(2), apply=apply, box=True)


@jtu.register_pytree_node_class
class _AuxList:
    """A custom node whose aux data is the user's own list (not a fresh one per flatten)."""

    def __init__(self, ks):
        self.ks = ks

    def __call__(self, x):
        return x * len(self.ks)

    def tree_flatten(self):
        return (), self.ks

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(aux)


@SITUATIONS.add
def custom_node_aux_list_appended(h):
    h.static_copies = True  # A `StableModule` holds a read-only copy (harness docstring).
    c = _AuxList([1.0])
    h.call(c, jnp.ones(2))
    c.ks.append(2.0)
    h.call(c, jnp.ones(2))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_object(situation, mode):
    check(situation, mode)
