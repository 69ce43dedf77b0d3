"""One test per row of the keys table (`eqxstable/_keys/README.md`): each checks the property its
row promises, on equal but distinct objects, so that it fails when the row's handler is removed
or weakened (checked by hand for every row; see tests/README.md)."""

import dataclasses
import decimal
import enum
import functools as ft
import importlib
import importlib.util
import pathlib
import re
import sys
import types
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import eqxstable as es
from eqxstable._keys import Key


def key(obj: Any) -> Key:
    return es.stable_key(obj)


def same(a: Any, b: Any) -> bool:
    """Whether `a` and `b` share a key; they must be two objects, or the check proves nothing."""
    assert a is not b
    return key(a) == key(b)


def closure_over(value):
    return lambda x: (x, value)


# int, bool, str, bytes, None: exact type and value.
def test_plain_values_by_exact_type_and_value():
    assert same(int("123456789"), int("123456789"))
    assert same("".join(["ab", "c"]), "".join(["a", "bc"]))
    assert same(bytes([1, 2]), bytes([1, 2]))
    assert key(1) != key(True) and key(0) != key(False) and key(1) != key(1.0)
    assert key("a") != key(b"a")
    assert key(None) != key(0) and key(None) != key(False)
    assert key(int("123456789")) != key(int("123456788"))


# float, complex: exact type and IEEE bits.
def test_floats_and_complexes_by_bits():
    assert same(float("1.5"), float("1.5"))
    assert key(0.0) != key(-0.0)
    assert same(float("nan"), float("nan"))
    assert same(complex("1+2j"), complex("1+2j"))
    assert key(complex(0.0, 0.0)) != key(complex(0.0, -0.0))
    assert key(complex(0.0, 1.0)) != key(complex(1.0, 0.0))
    assert key(complex(1.0, 0.0)) != key(1.0)


# NumPy scalar: type, full dtype description, bytes.
def test_numpy_scalars_by_type_dtype_and_bytes():
    assert same(np.float32(0.5), np.float32(0.5))
    assert key(np.float32(1)) != key(np.float64(1)) != key(np.int32(1))
    assert key(np.float32(0.0)) != key(np.float32(-0.0))
    # One type, the same bytes, and another dtype: a date in days or in seconds.
    assert key(np.datetime64(1, "D")) != key(np.datetime64(1, "s"))
    assert key(np.timedelta64(1, "D")) != key(np.timedelta64(1, "s"))
    assert same(np.datetime64(1, "D"), np.datetime64(1, "D"))
    # Two 8-byte structured dtypes with the same bytes, only their fields differ.
    a = np.zeros((), dtype=[("a", "<f4"), ("b", "<f4")])[()]
    b = np.zeros((), dtype=[("x", "<f4"), ("y", "<f4")])[()]
    assert a.tobytes() == b.tobytes() and key(a) != key(b)
    # A subclass of a NumPy scalar type has the same dtype, and may compute otherwise.
    sub = type("Scaled", (np.float64,), {"__mul__": lambda self, o: 2 * float(self) * o})
    assert key(sub(1.0)) != key(np.float64(1.0))


class Loose(int):
    """An `int` subclass whose own `==` calls everything equal."""

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0


class Tagged(float):
    pass


def tagged(value: float, tag: str) -> Tagged:
    out = Tagged(value)
    out.tag = tag  # pyright: ignore[reportAttributeAccessIssue]
    return out


# A subclass of a builtin value: exact type, the builtin value, attributes; its `==` never used.
def test_builtin_subclasses_by_value_and_attributes():
    assert same(Loose(3), Loose(3))
    assert key(Loose(3)) != key(Loose(4))
    assert key(Loose(3)) != key(type("OtherInt", (int,), {})(3))
    assert key(Loose(3)) != key(3)
    assert same(tagged(1.0, "a"), tagged(1.0, "a"))
    assert key(tagged(1.0, "a")) != key(tagged(1.0, "b"))
    assert key(tagged(0.0, "a")) != key(tagged(-0.0, "a"))
    # Its attributes are watched: setting one is a new key.
    t = tagged(1.0, "a")
    before = key(t)
    t.tag = "b"  # pyright: ignore[reportAttributeAccessIssue]
    assert key(t) != before


# range, slice: start, stop, step.
def test_ranges_and_slices_by_start_stop_step():
    assert same(range(0, 4, 2), range(0, 4, 2))
    assert key(range(0, 4, 1)) != key(range(0, 4, 2))
    assert key(range(0, 4)) != key(range(1, 4)) != key(range(0, 5))
    assert key(range(0)) != key(range(2, 2))
    assert same(slice(1, 5, 2), slice(1, 5, 2))
    assert key(slice(1, 5, 1)) != key(slice(1, 5, 2))
    assert key(slice(0, 5)) != key(slice(1, 5)) != key(slice(1, 6))
    assert key(slice(1)) != key(slice(1.0))
    assert key(slice(None, 1)) != key(slice(None, True))


class Color(enum.Enum):
    RED = 1


class Shade(enum.Enum):
    RED = 1


class Perm(enum.IntFlag):
    R = 4
    W = 2


# Enum member: class and value.
def test_enum_members_by_class_and_value():
    assert key(Color.RED) == key(Color(1))
    assert key(Color.RED) != key(Shade.RED)
    assert key(Perm(0)) != key(Perm(8))
    assert key(Perm.R | Perm.W) == key(Perm(6))
    assert key(Perm(6)) != key(6)


class A(NamedTuple):
    x: Any


class B(NamedTuple):
    x: Any


# tuple, NamedTuple, frozenset: exact type, items in iteration order, attributes.
def test_tuples_by_exact_type_and_items():
    assert same(tuple([1.0, "a"]), tuple([1.0, "a"]))
    assert same(A(float("1.0")), A(float("1.0")))
    assert key(A(1.0)) != key(B(1.0))
    assert key(A(1.0)) != key((1.0,))
    assert key((1, 2)) != key((2, 1))
    a, b = A(1.0), B(1.0)
    assert type(es.intern(a)) is A
    assert type(es.intern(b)) is B
    # Items are keyed type-exactly.
    assert key((1,)) != key((1.0,)) and key(A(1)) != key(A(True))
    assert same(frozenset(["a", "b"]), frozenset(["a", "b"]))
    # A NamedTuple is rebuilt by `intern` with read-only arrays; another tuple subclass is not.
    assert not key(A(np.ones(1))).identity
    assert key(type("T", (tuple,), {})([np.ones(1)])).identity
    # Attributes of a tuple or frozenset subclass are part of the key.
    T = type("T", (frozenset,), {})
    t1, t2 = T([1]), T([1])
    t1.tag, t2.tag = "a", "b"  # pyright: ignore[reportAttributeAccessIssue]
    assert key(t1) != key(t2)
    assert key(frozenset([1])) != key(frozenset([True]))


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: Any


class Mod(eqx.Module):
    value: Any


@dataclasses.dataclass(frozen=True)
class Unset:
    value: Any = dataclasses.field(init=False)


def _body(x, y=0):
    return x + y


# Frozen dataclass, `eqx.Module`: exact class and fields; a library module's own dicts watched.
def test_frozen_dataclasses_and_modules_by_class_and_fields():
    assert same(Frozen(float("2.0")), Frozen(float("2.0")))
    assert key(Frozen(1)) != key(Frozen(1.0))
    assert key(Frozen(1)) != key(Mod(1))
    assert same(Mod((1, "a")), Mod((1, "a")))
    assert key(Mod(1)) != key(Mod(2))
    # A user's array in a field is the user's: by identity (and watched), not by contents.
    a = np.ones(2)
    assert key(Mod(a)) != key(Mod(a.copy())) and key(Mod(a)).identity
    assert key(eqx.Partial(_body, y=a)) != key(eqx.Partial(_body, y=a.copy()))
    # An attribute set beside the fields, and a field never set, are part of the key.
    f1, f2 = Frozen(1), Frozen(1)
    object.__setattr__(f1, "extra", 1)
    assert key(f1) != key(f2)
    assert same(Unset(), Unset())
    none = Unset()
    object.__setattr__(none, "value", None)
    assert key(Unset()) != key(none)
    # `eqx.Partial.keywords` is the partial's own dict: by value, and watched.
    assert same(eqx.Partial(_body, y=1), eqx.Partial(_body, y=1))
    assert same(eqx.Partial(_body, y=(1, 2)), eqx.Partial(_body, y=(1, 2)))
    p = eqx.Partial(_body, y=1)
    before = key(p)
    p.keywords["y"] = 2
    assert key(p) != before
    assert key(p) == key(eqx.Partial(_body, y=2))


# `Decimal`: sign, digits and exponent.
def test_decimals_by_sign_digits_and_exponent():
    assert same(decimal.Decimal("1.5"), decimal.Decimal("1.5"))
    assert decimal.Decimal("1.00") == decimal.Decimal("1.0")
    assert key(decimal.Decimal("1.00")) != key(decimal.Decimal("1.0"))
    assert key(decimal.Decimal("1.5")) != key(decimal.Decimal("-1.5"))


class OnlyHash:
    def __hash__(self):
        return 0


# `__hash__` without `__eq__`: identity, with a warning.
def test_hash_without_eq_is_identity_with_a_warning():
    a, b = OnlyHash(), OnlyHash()
    with pytest.warns(es.StabilityWarning, match="OnlyHash"):
        ka = key(a)
    with pytest.warns(es.StabilityWarning, match="OnlyHash"):
        kb = key(b)
    assert ka != kb and ka.identity


class Plain:
    def __init__(self, v):
        self.v = v


class Slotted:
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


# list, dict, set, bytearray, plain object: identity and contents; a change is a new key.
@pytest.mark.parametrize(
    "make, change",
    [
        (lambda: [1.0], lambda o: o.append(2.0)),
        (lambda: [1.0], lambda o: o.__setitem__(0, 1)),
        (lambda: [1.0, 2.0], lambda o: o.pop()),
        (lambda: {"a": 1}, lambda o: o.update(b=2)),
        (lambda: {"a": 1}, lambda o: o.update(a=1.0)),
        (lambda: {1}, lambda o: o.add(2)),
        (lambda: bytearray(b"a"), lambda o: o.extend(b"b")),
        (lambda: Plain(1), lambda o: setattr(o, "v", 2)),
        (lambda: Plain(1), lambda o: setattr(o, "w", 2)),
        (lambda: Slotted(1), lambda o: setattr(o, "v", 2)),
    ],
)
def test_mutables_by_identity_and_contents(make, change):
    a, b = make(), make()
    assert key(a) != key(b)
    assert key(a) == key(a) is not None and key(a).identity
    before = key(a)
    assert key(a) == before
    change(a)
    assert key(a) != before
    # Through a function that captures it, too.
    f = closure_over(b)
    before = key(f)
    change(b)
    assert key(f) != before


# NumPy array at the top level: dtype, shape, bytes; `intern` hands out a read-only copy.
def test_top_level_arrays_by_contents():
    assert same(np.arange(3.0), np.arange(3.0))
    assert key(np.arange(3.0)) != key(np.arange(3))
    assert key(np.zeros(4)) != key(np.zeros((2, 2)))
    a = np.arange(3.0)
    canonical = es.intern(a)
    assert canonical is not a and not canonical.flags.writeable


# NumPy array reached through a function: identity and bytes, watched.
def test_captured_arrays_by_identity_and_bytes():
    a, b = np.ones(2), np.ones(2)
    assert key(closure_over(a)).identity
    assert key(closure_over(a)) != key(closure_over(b))
    f = closure_over(a)
    before = key(f)
    a[0] = 3.0
    assert key(f) != before


# `jax.Array`: identity.
def test_jax_arrays_by_identity():
    a = jnp.ones(2)
    assert key(a) != key(jnp.ones(2))
    assert key(a) == key(a) and key(a).identity


SCALE = 2.0


def reads_scale(x):
    return x * SCALE


def test_functions_by_code_cells_defaults_attributes_and_globals():
    global SCALE
    assert same(closure_over(2.0), closure_over(2.0))
    assert key(closure_over(2.0)) != key(closure_over(2))
    # A function attribute set after the function was keyed is seen.
    g = closure_over(1.0)
    before = key(g)
    g.extra = 5  # pyright: ignore[reportFunctionMemberAccess]
    assert key(g) != before
    # Defaults and keyword defaults.
    f = closure_over(1.0)
    before = key(f)
    f.__defaults__ = (1,)
    assert key(f) != before
    # A global it reads, rebound.
    before = key(reads_scale)
    old = SCALE
    SCALE = 3.0
    try:
        assert key(reads_scale) != before
    finally:
        SCALE = old
    assert key(reads_scale) == before


def make_rebindable(value):
    c = value

    def f(x):
        return x * c

    def rebind(new):
        nonlocal c
        c = new

    return f, rebind


# Closure cells: contents; a rebindable cell also by its identity; an empty cell by identity.
def test_closure_cells():
    f1, _ = make_rebindable(1.0)
    f2, _ = make_rebindable(1.0)
    # Rebindable cells: never shared, whatever they hold.
    assert key(f1) != key(f2)
    # Sealed cells: by contents.
    assert same(closure_over(1.0), closure_over(1.0))

    def late():
        f = lambda: later  # noqa: E731  # pyright: ignore[reportUndefinedVariable]
        if False:
            later = 1
        return f

    empty1, empty2 = late(), late()
    assert empty1.__closure__ is not None
    with pytest.raises(ValueError, match="empty"):
        empty1.__closure__[0].cell_contents
    # Empty for good (the frame returned, nothing else holds the cell): no state, one key.
    assert key(empty1) == key(empty2)


_GONE = """
def make(v):
    return lambda x: x * v

def make_doubling(v):
    def f(x):
        nonlocal v
        v = v * 2
        return x * v
    return f

def make_pair(v):
    f = lambda x: x * v

    def rebind(new):
        nonlocal v
        v = new

    return f, rebind
"""


def _factories_that_are_gone() -> dict:
    # Their enclosing code can no longer be found by name (taken out of the namespace the
    # closures' globals are), so only the reference counts can prove a cell alone.
    ns: dict = {}
    exec(_GONE, ns)
    return {name: ns.pop(name) for name in ("make", "make_doubling", "make_pair")}


# A cell whose enclosing code is not found: sealed when nothing but its function holds it and its
# own code never writes it; otherwise keyed by its identity too.
def test_cells_alone_by_reference_counts():
    gone = _factories_that_are_gone()
    assert same(gone["make"](1.0), gone["make"](1.0))
    assert key(gone["make"](1.0)) != key(gone["make"](2.0))
    # Its own code rebinds it.
    assert key(gone["make_doubling"](1.0)) != key(gone["make_doubling"](1.0))
    # A setter shares it.
    (f1, _), (f2, _) = gone["make_pair"](1.0), gone["make_pair"](1.0)
    assert key(f1) != key(f2)


def make_counter(start):
    n = start

    def f(x):
        nonlocal n
        n += 1
        return x

    def read():
        return n

    return f, read


# A cell only its own function writes, and only as `n += k`: a count of its runs, by identity.
def test_counter_cells_by_identity_alone():
    f, read = make_counter(0)
    before = key(f)
    f(1.0)
    f(1.0)
    assert read() == 2 and key(f) == before
    # Another closure's counter is another cell.
    g, _ = make_counter(0)
    assert key(g) != key(f)
    # A float counter too; anything else is keyed by contents.
    h, _ = make_counter(0.5)
    before = key(h)
    h(1.0)
    assert key(h) == before
    # Other spellings of a count, beside other reads (a sealed cell, an attribute of the same
    # name, a nested function that does not use the count).
    for make in (_count_spelled_out, _count_down_beside_other_reads):
        f = make()
        before = key(f)
        f(1.0)
        assert key(f) == before
    # An array bumped in place (its `__iadd__` could be anything): by contents.
    a, _ = make_counter(np.zeros(()))
    before = key(a)
    a(1.0)
    assert key(a) != before


def _count_spelled_out():
    n = 0

    def f(x):
        nonlocal n
        n = n + 1
        return x

    return f


def _count_down_beside_other_reads():
    real = 10
    scale = 2.0

    def f(x):
        nonlocal real
        real -= 1
        helper = lambda y: y * scale  # noqa: E731
        return helper(x).real

    return f


def _count_read_by_a_nested_function():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return (lambda: x * n)()

    return f


def _count_multiplied():
    n = 1

    def f(x):
        nonlocal n
        n *= 2
        return x

    return f


def _reads_its_count():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x * n

    return f


def _count_set_from_outside():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x

    def reset():
        nonlocal n
        n = 0

    return f, reset


def _count_by_a_float():
    n = 0

    def f(x):
        nonlocal n
        n += 0.5
        return x

    return f


def _count_in_a_nested_function():
    n = 0

    def f(x):
        def bump():
            nonlocal n
            n += 1

        bump()
        return x

    return f


def _owner_counts_too():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x

    n += 1
    return f


# Anything else that changes a cell written by its function is a change.
@pytest.mark.parametrize(
    "make",
    [
        _reads_its_count,
        lambda: _count_set_from_outside()[0],
        _count_by_a_float,
        _count_in_a_nested_function,
        _owner_counts_too,
        _count_read_by_a_nested_function,
        _count_multiplied,
    ],
    ids=[
        "read",
        "reset from outside",
        "float step",
        "nested",
        "owner writes twice",
        "read by a nested function",
        "multiplied",
    ],
)
def test_cells_that_are_not_counters_by_contents(make):
    f = make()
    before = key(f)
    f(1.0)
    assert key(f) != before


# Partials: type, function, arguments, keywords (watched).
def test_partials():
    assert same(ft.partial(_body, 1, y=2), ft.partial(_body, 1, y=2))
    assert key(ft.partial(_body, 1)) != key(ft.partial(_body, 2))
    assert key(ft.partial(_body, y=1)) != key(ft.partial(_body, y=2))
    assert key(ft.partial(_body, 1)) != key(jtu.Partial(_body, 1))
    p = ft.partial(_body, y=1)
    before = key(p)
    p.keywords["y"] = 3
    assert key(p) != before
    # Its attributes too.
    q1, q2 = ft.partial(_body, 1), ft.partial(_body, 1)
    q1.tag, q2.tag = (1, 2), (1, 2)  # pyright: ignore[reportAttributeAccessIssue]
    assert key(q1) == key(q2)
    q2.tag = (1, 3)  # pyright: ignore[reportAttributeAccessIssue]
    assert key(q1) != key(q2)


@dataclasses.dataclass(frozen=True)
class Scaler:
    factor: Any

    def apply(self, x):
        return x * self.factor


# Bound method: function and `__self__`.
def test_bound_methods():
    assert same(Scaler(2).apply, Scaler(2).apply)
    assert key(Scaler(2).apply) != key(Scaler(3).apply)


# `jax.jit` function: the wrapped function and every option.
def test_jax_jit_functions():
    assert same(jax.jit(_body), jax.jit(_body))
    assert key(jax.jit(_body)) != key(jax.jit(_body, donate_argnums=0))
    assert key(jax.jit(_body)) != key(jax.jit(closure_over(1)))


# User class: identity and every entry of its namespace; assigning a class attribute is seen.
def test_user_classes_watched():
    class Config:
        lr = 0.1

        def scaled(self, x):
            return x * self.lr

    class Other:
        lr = 0.1

    assert key(Config) != key(Other)
    f = closure_over(Config)
    before = key(f)
    Config.lr = 0.2
    assert key(f) != before


# User module read whole: identity and every public name.
def test_user_modules_read_whole(tmp_path, monkeypatch):
    (tmp_path / "rows_user_module.py").write_text("VALUE = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "rows_twin_module.py").write_text("VALUE = 1.0\n")
    module = importlib.import_module("rows_user_module")
    twin = importlib.import_module("rows_twin_module")
    try:
        f = closure_over(module)
        before = key(f)
        assert same(closure_over(module), f)
        # Another module with the same contents is another module.
        assert key(closure_over(twin)) != before
        module.VALUE = 2.0  # pyright: ignore[reportAttributeAccessIssue]
        assert key(f) != before
        module.VALUE = 1.0  # pyright: ignore[reportAttributeAccessIssue]
        assert key(f) == before
        # Reloaded from the same file, it holds the same: the same key.
        assert importlib.reload(module) is module
        assert key(f) == before
        module.T = (1, 2)  # pyright: ignore[reportAttributeAccessIssue]
        with_tuple = key(f)
        module.T = (1, 3)  # pyright: ignore[reportAttributeAccessIssue]
        assert key(f) != with_tuple
        module.A = np.ones(1)  # pyright: ignore[reportAttributeAccessIssue]
        assert key(f).identity
    finally:
        sys.modules.pop("rows_user_module", None)
        sys.modules.pop("rows_twin_module", None)


# Library function, module, class, builtin: constants.
def test_library_objects_are_constants():
    assert not key(jax.nn.relu).identity
    assert not key(np).identity and not key(np.ndarray).identity
    assert not key(len).identity and key(len) != key(abs)
    assert key(jnp.sin) != key(jnp.cos)
    assert same(closure_over(jnp.sin), closure_over(jnp.sin))


# An object of a library class holding user functions (`jax.custom_vjp`): identity and
# attributes, watched (`defvjp` changes a rule in place).
def test_library_objects_holding_user_functions():
    def make():
        @jax.custom_vjp
        def f(x):
            return x

        f.defvjp(lambda x: (x, None), lambda _, g: (g,))
        return f

    f = make()
    assert key(f) != key(make())
    before = key(f)
    f.defvjp(lambda x: (x, None), lambda _, g: (2 * g,))
    assert key(f) != before


# Deeper than `MAX_DEPTH`: walked in cuts from the top, keyed as a shallow object is (a chain
# of tuples by value, a chain of lists by identity and contents). Unreadable: a key equal to
# nothing, not even the same object's next key.
def test_too_deep_and_unreadable():
    def chain(leaf: Any, box: Any = lambda x: (x,)) -> Any:
        for _ in range(500):
            leaf = box(leaf)
        return leaf

    deep = chain(0)
    assert key(deep) == key(deep) == key(chain(0))
    assert key(deep) != key(chain(1)) and key(deep) != key(chain(0.0))
    lists = chain(0, lambda x: [x])
    assert key(lists) == key(lists) != key(chain(0, lambda x: [x]))

    class Broken:
        def __eq__(self, other):
            raise RuntimeError

        def __hash__(self):
            raise RuntimeError

    a = Broken()
    assert key(a) != key(Broken())
    assert key(a).identity


def test_modules_are_keyed_by_what_they_are():
    user = types.ModuleType("made_by_hand")
    user.X = 1  # pyright: ignore[reportAttributeAccessIssue]
    f = closure_over(user)
    before = key(f)
    user.X = 2  # pyright: ignore[reportAttributeAccessIssue]
    assert key(f) != before


_ROWS = "tests/test_keys_rows.py::"
_ALLOW = "tests/test_keys_allowlist.py::"
# Row id (`eqxstable/_keys/README.md`) -> the test that defends it.
ROW_TESTS = {
    "K-value": _ROWS + "test_plain_values_by_exact_type_and_value",
    "K-float": _ROWS + "test_floats_and_complexes_by_bits",
    "K-numpy-scalar": _ROWS + "test_numpy_scalars_by_type_dtype_and_bytes",
    "K-builtin-subclass": _ROWS + "test_builtin_subclasses_by_value_and_attributes",
    "K-range": _ROWS + "test_ranges_and_slices_by_start_stop_step",
    "K-enum": _ROWS + "test_enum_members_by_class_and_value",
    "K-tuple": _ROWS + "test_tuples_by_exact_type_and_items",
    "K-frozen-dataclass": _ROWS + "test_frozen_dataclasses_and_modules_by_class_and_fields",
    "K-decimal": _ROWS + "test_decimals_by_sign_digits_and_exponent",
    "K-fraction": _ALLOW + "test_allowlisted_library_values",
    "K-datetime": _ALLOW + "test_allowlisted_library_values",
    "K-path": (
        "tests/test_keys_paths.py::"
        "test_paths_by_type_and_text_and_a_concrete_one_reached_is_never_shared"
    ),
    "K-pattern": _ALLOW + "test_allowlisted_library_values",
    "K-uuid": _ALLOW + "test_allowlisted_library_values",
    "K-signature": _ALLOW + "test_allowlisted_library_values",
    "K-dtype": _ALLOW + "test_structured_dtypes_watched_never_substituted",
    "K-jax-value": _ALLOW + "test_jax_values_by_their_own_eq_within_the_type_and_substituted",
    "K-key-path": "tests/test_keys_wrappers.py::test_key_path_entries_type_exactly",
    "K-own-eq": _ALLOW + "test_own_eq_is_its_own_eq_type_exactly_never_substituted",
    "K-hash-without-eq": _ROWS + "test_hash_without_eq_is_identity_with_a_warning",
    "K-mutable": _ROWS + "test_mutables_by_identity_and_contents",
    "K-array-top": _ROWS + "test_top_level_arrays_by_contents",
    "K-array-reached": _ROWS + "test_captured_arrays_by_identity_and_bytes",
    "K-jax-array": _ROWS + "test_jax_arrays_by_identity",
    "K-function": _ROWS + "test_functions_by_code_cells_defaults_attributes_and_globals",
    "K-module-attrs": _ALLOW + "test_library_data_read_by_a_function_is_keyed",
    "K-impure-library": (
        "tests/test_keys_library_calls.py::test_readers_are_never_one_key_and_never_substituted"
    ),
    "K-cell": _ROWS + "test_closure_cells",
    "K-counter-cell": _ROWS + "test_counter_cells_by_identity_alone",
    "K-trace-log": ("tests/test_keys_trace_log.py::test_a_function_reading_the_log_sees_it_change"),
    "K-const-subscript": "tests/test_keys_const_subscript.py::test_only_the_items_read_are_keyed",
    "K-partial": _ROWS + "test_partials",
    "K-method": _ROWS + "test_bound_methods",
    "K-jit": _ROWS + "test_jax_jit_functions",
    "K-jaxpr": "tests/test_key_jaxpr.py::test_the_same_computation_converted_twice_has_one_key",
    "K-user-class": _ROWS + "test_user_classes_watched",
    "K-jaxtyping-array": (
        "tests/test_keys_jaxtyping_classes.py::test_rebuilt_annotations_share_and_differing_ones_do_not"
    ),
    "K-treedef": _ALLOW + "test_treedefs_by_node_data_type_exactly",
    "K-user-module": _ROWS + "test_user_modules_read_whole",
    "K-library-code": _ROWS + "test_library_objects_are_constants",
    "K-library-object": _ROWS + "test_library_objects_holding_user_functions",
    "K-dispatch": "tests/test_keys_library_registries.py::test_singledispatch_register_is_seen",
    "K-primitive": "tests/test_keys_primitives.py::test_a_primitive_s_rules_are_in_its_key",
    "K-closure-function": (
        "tests/test_keys_closure_to_pytree.py::test_closures_that_compute_differently_never_share"
    ),
    "K-library-container": _ALLOW + "test_weak_containers_identity_and_items_watched",
    "K-opaque": _ALLOW + "test_c_objects_with_hidden_state_are_identity",
    "K-buffer": _ALLOW + "test_buffers_identity_and_bytes_watched",
    "K-weakref": _ALLOW + "test_weak_references_are_identity_never_substituted",
    "K-descriptor": _ALLOW + "test_descriptors_by_the_functions_they_run",
    "K-mapping-proxy": "tests/test_keys_edges.py::test_what_a_container_holds_is_watched",
    "K-too-deep": _ROWS + "test_too_deep_and_unreadable",
    "K-node-data": (
        "tests/test_jit_cache.py::test_node_data_made_afresh_by_each_flatten_is_keyed_by_contents"
    ),
    "K-canonical-form": (
        "tests/test_stabilize_c_writes.py::"
        "test_stable_jit_retraces_the_module_whose_program_it_holds"
    ),
}


def test_row_ids_agree():
    """The README's table, `scripts/check_key_rows.py` and `ROW_TESTS` name the same rows, and
    each row's test exists."""
    root = pathlib.Path(__file__).parent.parent
    readme = (root / "eqxstable" / "_keys" / "README.md").read_text()
    in_readme = re.findall(r"^\| `(K-[a-z-]+)` \|", readme, flags=re.MULTILINE)
    assert len(in_readme) == len(set(in_readme))
    spec = importlib.util.spec_from_file_location(
        "check_key_rows", root / "scripts" / "check_key_rows.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert set(in_readme) == set(script.BREAKS) == set(ROW_TESTS)
    for where in ROW_TESTS.values():
        path, name = where.split("::")
        assert f"def {name}(" in (root / path).read_text(), where
