"""The descriptor through which a module's code reads a static or dynamic field.

What JAX and Equinox see of a field is what its instance `__dict__` holds: Equinox's flatten
reads `__dict__` directly and its unflatten writes with `object.__setattr__`. That is the
canonical form: a [`Static`][eqxstable._module._static.Static] for a `StableModule`'s static
field, a [`Hyper`][eqxstable._module._dynamic.Hyper] for a Python number in
`eqxstable.field(dynamic=True)`.
Attribute reads (`self.cfg` in the module's own code, `getattr`, `dataclasses.asdict`, the
repr) go through this data descriptor instead and get the value to compute with: the value as
it was assigned (a dynamic number too, once its stored words are checked), or, inside a trace,
the dynamic number as a weakly typed array.

One exception: Equinox's construction (`_ModuleMeta.__call__`) checks that no array is in a
static field, by reading it. A static NumPy array is fine in a `StableModule` (its canonical
form is hashable), so that check is shown the `Static`, and a value a user converter returns
there is made canonical as it is stored (by `object.__setattr__`, or through the functions that
`_compat.STORE_FRAMES` lists on older Equinox).
"""

import dataclasses
import inspect
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx

from .._compat import EQX_CALL, STORE_FRAMES
from ._delegate import check_delegates, DELEGATED
from ._dynamic import decode, Hyper
from ._given import check_given, remember
from ._handed import hand_out
from ._static import Static


_MISSING: Any = dataclasses.MISSING
# Equinox's `__getattribute__`, through which every read passes (Equinox 0.13).
_EQX_GETATTRIBUTE = getattr(eqx.Module.__dict__.get("__getattribute__"), "__code__", None)
# What lies between Equinox's construction and a store it makes (`_compat.py`).
_STORE_FRAMES = frozenset(STORE_FRAMES or ())


def _called_by_equinox_construction() -> bool:
    frame = sys._getframe(2)
    if frame.f_code is _EQX_GETATTRIBUTE:
        frame = frame.f_back
    return frame is not None and frame.f_code is EQX_CALL


def _stored_by_equinox_construction() -> bool:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code in _STORE_FRAMES:
        frame = frame.f_back
    return frame is not None and frame.f_code is EQX_CALL


class FieldAccess:
    """A data descriptor for the field `name`: reads thaw a `Static` and decode a `Hyper`.

    - `default`: what the class attribute was (the dataclass default), for `Cls.name`.
    - `freeze`: for a static field, `freeze(value, owner, name)` gives the canonical form of a
        value that Equinox's construction stores (the result of a user converter).
    """

    __slots__ = ("name", "default", "freeze")

    def __init__(
        self,
        name: str,
        default: Any = _MISSING,
        freeze: Callable[[Any, type, str], Any] | None = None,
    ):
        self.name = name
        self.default = default
        self.freeze = freeze

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            if self.default is _MISSING:
                raise AttributeError(self.name)
            return self.default
        try:
            value = obj.__dict__[self.name]
        except KeyError:
            # Never set (a custom `__init__` that skips a field with a default): the class
            # attribute, as Python's own lookup would find it.
            if self.default is _MISSING:
                raise AttributeError(
                    f"{type(obj).__name__!r} object has no attribute {self.name!r}"
                ) from None
            return self.default
        t = type(value)
        if t is Static:
            if value[1] and _called_by_equinox_construction():  # It holds an array.
                return value
            # The list, dict, set or array the field was given, changed since, raises: the
            # module keeps a frozen copy and cannot follow the change (`_given.py`).
            check_given(obj, self.name, value)
            parts = value[2]
            if parts and parts[-1] is DELEGATED:
                # A leaf kept as the user's object, changed since its module was built, is
                # changed for good: a trace reading it now makes a program for another key.
                check_delegates(parts)
            # Lists and dicts as plain copies (`_plain.py`), so that JAX sees a list as a list:
            # one per module and field, checked for changes before each later read (`_handed.py`).
            if value[3].read is None:
                return value[0]
            return hand_out(obj, self.name, value)
        if t is Hyper:
            return decode(value)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        freeze = self.freeze
        if freeze is not None and type(value) is not Static and _stored_by_equinox_construction():
            given = value
            value = freeze(value, type(obj), self.name)
            remember(obj, self.name, given, value)
        obj.__dict__[self.name] = value

    def __delete__(self, obj: Any) -> None:
        try:
            del obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None


def install(cls: type, name: str, freeze: Callable[[Any, type, str], Any] | None = None) -> None:
    """Puts a [`FieldAccess`][] for the dataclass field `name` on `cls`, unless `cls` or a parent
    already has a suitable one, or `cls` implements the name otherwise (a property, a slot)."""
    field = cls.__dataclass_fields__[name]  # pyright: ignore[reportAttributeAccessIssue]
    own = cls.__dict__.get(name, _MISSING)
    if own is _MISSING:
        inherited = inspect.getattr_static(cls, name, _MISSING)
        if type(inherited) is FieldAccess and (freeze is None or inherited.freeze is not None):
            return
    elif own is not field.default and (type(own) is FieldAccess or hasattr(type(own), "__get__")):
        return
    setattr(cls, name, FieldAccess(name, field.default, freeze))
