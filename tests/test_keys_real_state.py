# pyright: reportAttributeAccessIssue=false, reportArgumentType=false, reportFunctionMemberAccess=false
"""An object's state is read where it lives, never through what its class says of itself.

A plain object's attributes live in its own `__dict__` slot and its slots in member descriptors
that `type` made. A class can make its own protocol show something else: a class body binding
`__dict__`, a `__getattribute__` or `__getattr__` answering `"__dict__"`, a `__slots__` entry
(plain data once the class is made) that was an iterator or was rebound. The keys read the slot
itself (`_state.layout`), so what `obj.scale = 3.0` stores is keyed and watched whatever the
class shows. The same holds for a dataclass's fields in a base class's slot (node data), and for
the attributes a `staticmethod`, `classmethod` or `jax.jit` function holds in its own
`__dict__`, which are keyed and watched, and stop `intern` from substituting it."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import eqxstable as es
from eqxstable._keys import compute_node_data
from eqxstable._keys._state import hidden_state


ONE = jnp.ones(2)
key = es.stable_key
scales = st.floats(allow_nan=False, allow_infinity=False, width=32)


class Shadowed:
    # The class attribute takes the place of `type`'s descriptor: `obj.__dict__` is this dict.
    __dict__ = {}


class Hiding:
    def __getattribute__(self, name):
        if name == "__dict__":
            return {}
        return object.__getattribute__(self, name)


class Act(str):
    __dict__ = {}

    def factor(self):
        return self.scale


class FromIterator:
    __slots__ = iter(("scale",))


class Rebound:
    __slots__ = ("scale",)


Rebound.__slots__ = ()  # Data only: the slot `scale` stays.


def _made(cls, scale):
    obj = cls()
    obj.scale = scale
    return obj


def _run_twice(cls):
    """The same function and a rebuilt one, before and after `cfg.scale` changes in place: the
    number of traces."""
    traces = 0

    def run(fn, x):
        nonlocal traces
        traces += 1
        return fn(x)

    jrun = es.filter_jit(run)
    cfg = _made(cls, 2.0)

    def make():
        return lambda x: x * cfg.scale

    f = make()
    assert float(jrun(f, ONE)[0]) == 2.0
    assert float(jrun(f, ONE)[0]) == 2.0
    before = traces
    cfg.scale = 3.0
    assert float(jrun(f, ONE)[0]) == 3.0
    assert float(jrun(make(), ONE)[0]) == 3.0
    return before, traces


@pytest.mark.counts_traces
@pytest.mark.parametrize("cls", [Shadowed, Hiding, FromIterator, Rebound])
def test_a_change_the_class_hides_is_seen(cls):
    # A class whose `__slots__` entry is an iterator is read by its readers as opaque (the
    # entry itself is no value): traced again, never stale.
    assert _run_twice(cls)[0] == 1


@pytest.mark.counts_traces
@pytest.mark.parametrize("cls", [Shadowed, Hiding, Rebound])
def test_a_rebuilt_reader_of_an_unchanged_object_shares_the_program(cls):
    traces = 0

    def run(fn, x):
        nonlocal traces
        traces += 1
        return fn(x)

    jrun = es.filter_jit(run)
    cfg = _made(cls, 2.0)
    assert [float(jrun(lambda x: x * cfg.scale, ONE)[0]) for _ in range(3)] == [2.0] * 3
    assert traces == 1


@pytest.mark.counts_traces
def test_many_objects_of_a_hiding_class_are_watched():
    # At least `_batch._LEAST` plain objects are checked as one batch on the hit path, which
    # reads `obj.__dict__` through the protocol: a class that answers it itself is left out.
    traces = 0
    cfgs = [_made(Hiding, 1.0) for _ in range(40)]

    def f(x):
        nonlocal traces
        traces += 1
        return x * sum([float(c.scale) for c in cfgs])

    jf = es.filter_jit(f)
    assert float(jf(ONE)[0]) == 40.0
    assert float(jf(ONE)[0]) == 40.0
    cfgs[17].scale = 2.0
    assert float(jf(ONE)[0]) == 41.0
    assert traces == 2


@pytest.mark.counts_traces
def test_a_hook_added_after_keying_does_not_hide_a_change():
    class Later:
        pass

    cfg = _made(Later, 2.0)
    saved = dict(vars(cfg))
    jrun = es.filter_jit(lambda fn, x: fn(x))

    def make():
        return lambda x: x * cfg.scale

    assert float(jrun(make(), ONE)[0]) == 2.0

    def hook(self, name):
        # Shows the attributes as they were when keyed.
        return saved if name == "__dict__" else object.__getattribute__(self, name)

    Later.__getattribute__ = hook
    cfg.scale = 3.0
    f = make()
    assert float(jrun(f, ONE)[0]) == 3.0  # The class changed: keyed anew.
    cfg.scale = 4.0  # Only the object changed, behind the hook.
    assert float(jrun(f, ONE)[0]) == 4.0
    assert float(jrun(make(), ONE)[0]) == 4.0


def test_getattr_is_never_asked_for_the_state():
    asked = []

    class Served:
        __slots__ = ("scale",)

        def __getattr__(self, name):
            asked.append(name)
            return {"scale": 1.0}

    a, b = Served(), Served()
    a.scale, b.scale = 2.0, 3.0
    assert key(a) != key(b)
    assert asked == []


@given(scales, scales)
def test_builtin_subclass_attributes_behind_a_bound_dict(x, y):
    a, b = Act("relu"), Act("relu")
    a.scale, b.scale = x, y
    same = math.copysign(1.0, x) == math.copysign(1.0, y) and x == y
    assert (key(a) == key(b)) == same
    es.intern(a)
    got = es.intern(b)
    # It holds data of its own: never substituted, whatever the values.
    assert got is b and got.factor() == y


def test_a_deleted_slot_descriptor_is_opaque():
    class Gone:
        __slots__ = ("scale", "other")

    del Gone.scale  # The slot stays in each instance, read only through a kept descriptor.
    assert hidden_state(Gone)

    class Kept:
        __slots__ = ("scale",)

    assert not hidden_state(Kept)


class _SlotBase:
    __slots__ = ("scale",)


@dataclasses.dataclass
class _Aux(_SlotBase):
    scale: float


class _Node:
    def __init__(self, x, scale):
        self.x, self.scale = x, scale


jax.tree_util.register_pytree_node(
    _Node, lambda n: ((n.x,), _Aux(n.scale)), lambda aux, ch: _Node(ch[0], aux.scale)
)


@pytest.mark.counts_traces
def test_node_data_dataclass_with_a_field_in_a_base_slot():
    traces = 0

    def f(n):
        nonlocal traces
        traces += 1
        return n.x * n.scale

    jf = es.filter_jit(f)
    assert float(jf(_Node(ONE, 2.0))[0]) == 2.0
    # A new equal aux per flatten still hits: it is compared by its fields, as JAX does.
    assert float(jf(_Node(ONE, 2.0))[0]) == 2.0
    assert traces == 1
    assert float(jf(_Node(ONE, 3.0))[0]) == 3.0
    assert traces == 2


@given(scales, scales)
def test_node_data_keys_follow_the_slot_field(x, y):
    # As the jit cache keys node data: by value, an aux data made afresh per flatten.
    ka, _ = compute_node_data(_Aux(x))
    kb, _ = compute_node_data(_Aux(y))
    same = math.copysign(1.0, x) == math.copysign(1.0, y) and x == y
    assert (ka == kb) == same


def _f(x):
    return x


@pytest.mark.parametrize("kind", [staticmethod, classmethod, jax.jit])
def test_a_callable_holding_attributes_is_not_substituted(kind):
    a, b = kind(_f), kind(_f)
    # With nothing of their own, they are one value (rebuilt optimisers, wrappers).
    assert key(a) == key(b) and es.intern(b) is es.intern(a)
    c, d = kind(_f), kind(_f)
    c.scale, d.scale = 2.0, 3.0
    assert key(c) != key(d)
    es.intern(c)
    assert es.intern(d) is d
    e = kind(_f)
    e.scale = 2.0
    assert key(c) == key(e) and es.intern(e) is e


class _Holder:
    s = staticmethod(_f)


STEP = jax.jit(lambda x: x + 1)


@pytest.mark.counts_traces
def test_attributes_changed_in_place_are_seen():
    # A rebuilt function (the same code) reading an attribute changed in place since.
    jrun = es.filter_jit(lambda fn, x: fn(x))

    def entry():
        return lambda x: x * _Holder.__dict__["s"].scale

    def step():
        return lambda x: STEP(x) * STEP.scale

    _Holder.__dict__["s"].scale = 2.0
    STEP.scale = 2.0
    assert float(jrun(entry(), ONE)[0]) == 2.0
    assert float(jrun(step(), ONE)[0]) == 4.0
    _Holder.__dict__["s"].scale = 3.0
    STEP.scale = 3.0
    assert float(jrun(entry(), ONE)[0]) == 3.0
    assert float(jrun(step(), ONE)[0]) == 6.0


@pytest.mark.counts_traces
def test_a_dict_a_class_body_binds_as_dunder_dict_is_keyed():
    # Every `obj.__dict__` is then this one class-level dict, which code reads: an entry of the
    # class's namespace like any other (only `type`'s own descriptor is left out).
    class Table:
        __dict__ = {"scale": 2.0}

    t = Table()
    jrun = es.filter_jit(lambda fn, x: fn(x))

    def make():
        return lambda x: x * t.__dict__["scale"]

    assert float(jrun(make(), ONE)[0]) == 2.0
    t.__dict__["scale"] = 3.0
    assert float(jrun(make(), ONE)[0]) == 3.0


class _Tagged(np.ndarray):
    __dict__ = {}


@pytest.mark.counts_traces
def test_an_ndarray_subclass_attribute_behind_a_bound_dict_is_watched():
    tagged = np.ones(2).view(_Tagged)
    tagged.scale = 2.0
    jrun = es.filter_jit(lambda fn, x: fn(x))

    def make():
        return lambda x: x * tagged.scale

    f = make()
    assert float(jrun(f, ONE)[0]) == 2.0
    tagged.scale = 3.0
    assert float(jrun(f, ONE)[0]) == 3.0
    assert float(jrun(make(), ONE)[0]) == 3.0


class _Lower:
    __slots__ = ("x",)

    def read(self):
        # The base class's own slot, which `getattr(obj, "x")` no longer reaches.
        return _Lower.__dict__["x"].__get__(self)


class _Upper(_Lower):
    __slots__ = ("x",)  # A second slot of the same name.


@pytest.mark.counts_traces
def test_a_slot_declared_again_below_is_read_through_each_descriptor():
    obj = _Upper()
    obj.x = 0.0
    _Lower.__dict__["x"].__set__(obj, 2.0)
    jrun = es.filter_jit(lambda fn, x: fn(x))

    def make():
        return lambda x: x * obj.read()

    assert float(jrun(make(), ONE)[0]) == 2.0
    _Lower.__dict__["x"].__set__(obj, 3.0)
    assert float(jrun(make(), ONE)[0]) == 3.0
