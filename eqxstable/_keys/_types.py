"""The small hashable objects that stable keys are built from.

A key is a `Key` wrapping nested tuples, each tagged with the exact type (or kind) it stands for.
Inside them three helper types stand for things that are not compared by value: `Identity` (this
very object), `Namespace` (a constant: a globals dict, a library module or class; identity is the
expected key there, not a fallback), and `Equal` (an object whose class defines its own
`__eq__`/`__hash__` and is not on the allowlist, compared with that equality within one exact
type; a key holding one is never substituted by `intern`). `FunctionKey` and
`MutableKey` name the parts of the two compound keys that explanations read.
"""

import weakref
from typing import Any, NamedTuple

import numpy as np

from ._handles import Handle


class Key:
    """A stable key: `stable_key(a) == stable_key(b)` exactly when `a` and `b` are equivalent.

    The hash is computed once, so a key is cheap to use in a dict however deep it is.
    """

    __slots__ = ("parts", "identity", "substitutable", "_hash")

    def __init__(self, parts: Any, identity: bool, substitutable: bool = True):
        self.parts = parts
        # Whether any part of this key fell back to identity (a list, a plain object, ...).
        self.identity = identity
        # Whether `intern` may hand out another object with this key: not when some part is
        # compared by an object's own `==` (`Equal`), which says nothing of the state it holds.
        self.substitutable = substitutable
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not Key:
            return NotImplemented
        return self._hash == other._hash and self.parts == other.parts

    def __repr__(self) -> str:
        return f"Key({self.parts!r})"


class Identity:
    """Stands for one particular object, the safe fallback.

    It holds a weak reference where the object supports one (so a key never keeps alive what it
    names) and compares those reference objects: CPython shares one plain weak reference per
    live object, and a dead one is never handed to a new object, so a later object that reuses a
    dead object's `id()` can never compare equal. Other objects are held strongly.
    """

    __slots__ = ("_ref", "_hash")

    def __init__(self, obj: Any):
        self._ref = weakref.ref(obj) if type(obj).__weakrefoffset__ else obj
        self._hash = id(obj)

    @classmethod
    def through(cls, handle: Handle, obj: Any) -> "Identity":
        """Stands for `obj`, a dict that supports no weak reference, through its `Handle`
        (`_handles.py`): equal to another exactly when both hold the same handle."""
        self = cls.__new__(cls)
        self._ref = handle
        self._hash = id(obj)
        return self

    @property
    def obj(self) -> Any:
        """The object, or `None` if it has been garbage collected."""
        ref = self._ref
        if type(ref) is Handle:
            return ref.get()
        return ref() if type(ref) is weakref.ref else ref

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._ref is self._ref  # pyright: ignore

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.obj).__name__} at {self._hash:#x})"


class Namespace(Identity):
    """A constant: a globals dictionary, a module or class of an installed package, a builtin, a
    library function. Compared by identity, as `Identity`, but that is the expected key for such
    an object rather than a fallback worth reporting."""

    __slots__ = ()


class Equal:
    """An object whose class defines `__eq__` and `__hash__` (and is not on the allowlist):
    compared with its own equality, as Equinox compares static values, and only against objects
    of exactly the same type."""

    __slots__ = ("obj", "_hash")

    def __init__(self, obj: Any, obj_hash: int):
        self.obj = obj
        self._hash = hash((type(obj), obj_hash))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if type(other) is not Equal:
            return False
        a, b = self.obj, other.obj
        if a is b:
            return True
        if type(a) is not type(b) or self._hash != other._hash:
            return False
        return proven_equal(a, b)

    def __repr__(self) -> str:
        return f"Equal({self.obj!r})"


def proven_equal(a: Any, b: Any) -> bool:
    """Whether `a == b` answers a plain `True` (a NumPy boolean counts). A user `__eq__` may
    return an array or raise: anything else means "not proven equal", which only ever costs a
    recompile."""
    try:
        result = a == b
        return result if type(result) is bool else type(result) is np.bool_ and bool(result)
    except Exception:
        return False


class FunctionKey(NamedTuple):
    """The key of a Python function: everything its trace can read, by name."""

    tag: str  # always "fn"
    code: Any  # the code object (nested code, constants and line table included)
    namespace: Any  # `Namespace` of its globals dict: the same dict is read, now and later
    defaults: Any
    kwdefaults: Any
    cells: tuple  # one per free variable: the contents' key, with `Identity(cell)` if rebindable
    attrs: tuple  # its `__dict__`
    globals: tuple  # `(name, key of the value it reads)` for every global it loads
    # `__name__`, `__qualname__`, `__module__`, `__doc__`, `__type_params__`, `__builtins__`:
    # what code can read of it besides the above (a dispatcher keyed by `__name__`).
    names: tuple
    annotations: tuple  # `__annotations__`, by contents


class MutableKey(NamedTuple):
    """The key of an object that can change in place: this very object, and what it holds now.
    Two different such objects are never equivalent; the same one is when its contents are."""

    identity: Any  # `Identity(obj)`
    contents: Any
