"""The walk that freezes a static value (`Freezer`), and the plain-module form it makes: `freeze`.

One walk serves both forms. For a plain module (`freeze`) a list, dict, set, frozenset, NumPy
array or scalar becomes a canonical form of its class (`_canonical.py`), whose `Token` is
registered here by its key (a list, dict, set or array: a new object per call, the module's own;
a frozenset or scalar: the class's one); for a `StableModule` (`freeze_static`, `_static.py`)
the value is rebuilt from the read-back forms (`_readonly.py`) and the key is its `Static`'s.
The key is the structure (container types, lengths, dict keys, set order) and the leaves after
interning, by identity, with NumPy arrays and scalars by dtype, shape and bytes, and the current
keys of the leaves that can change in place.
"""

import operator
import struct
import threading
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .._keys import too_many_objects
from .._keys._per_class import type_ids, TypeTable
from ._arrays import (
    array_key,
    canonical_array,
    canonical_view,
    mutable_dtype,
    object_like,
    own_view,
    private_dtype,
)
from ._canonical import (
    canonical_scalar_class,
    CanonicalArray,
    CanonicalDict,
    CanonicalFrozenSet,
    CanonicalList,
    CanonicalSet,
    token_of,
)
from ._delegate import Delegate, leaf_key, own_eq_class
from ._owned import snapshot, Token
from ._plain import MAX_DEPTH
from ._readonly import OrderedFrozenSet, ReadOnlyDict, ReadOnlyList, ReadOnlySet
from ._views import VIEW_BASES


# `table_key(...)` -> the `Token` of that equivalence class of the canonical forms that `freeze`
# stores in a plain module's static field (held by its members, so alive while one is).
_forms: "weakref.WeakValueDictionary[tuple, Token]" = weakref.WeakValueDictionary()
_lock = threading.RLock()

Leaf = Callable[[Any, Any], Any]
# Immutable atoms whose value (of that exact type) determines what they compute.
# By identity (`type_ids`, `TypeTable`), as `_KINDS`: a user's metaclass may call its class `int`.
_ATOMS = type_ids((str, bytes, int, bool, float, type(None)))
_FLOAT = struct.Struct("<d")
# Deeper than this, the rest of a static value is one leaf (never a `RecursionError`).
_MAX_DEPTH = MAX_DEPTH
# The kinds a walk takes apart; a read-back or canonical form is walked as what it stands for.
_KINDS: TypeTable[type] = TypeTable(
    {list: list, tuple: tuple, dict: dict, set: set, frozenset: frozenset, **VIEW_BASES}
)
_KINDS[np.ndarray] = _KINDS[CanonicalArray] = np.ndarray
# Tags the table key of a value holding changeable leaves (see `Freezer.changeable`).
_CHANGEABLE = object()


def table_key(parts: tuple, changeable: tuple) -> tuple:
    """The key of the canonical tables: `parts`, and the current keys of the changeable leaves
    kept by reference, if any (a plain `parts` tuple never starts with `_CHANGEABLE`)."""
    return (_CHANGEABLE, parts, changeable) if changeable else parts


def _reusable(key: Any) -> bool:
    """Whether a registered canonical form with table key `key` may be taken as it is: not one
    holding changeable leaves, whose keys must be computed afresh (they may have changed)."""
    return key is not None and key[:1] != (_CHANGEABLE,)


class Freezer:
    """One walk over a static value: builds the value to read back and the table key.

    With `canonical`, for a plain module (`freeze`): a list, dict, set, frozenset, NumPy array
    or scalar becomes the one canonical form of its class, so that it can be hashed and compares
    type-exactly, where JAX compares it: at the top, or inside tuples and NamedTuples. Inside a
    canonical form (compared as a whole) and for a `StableModule` (`freeze_static`, keyed as a
    whole by the `Static`), the read-only forms that keep Python's `==`.

    A container met twice in one walk is frozen once, and the key says so: `[x, x]` reads back
    as one list twice (what `is` and a YAML dump's anchors show), `[x, copy(x)]` as two.
    """

    __slots__ = (
        "leaf",
        "parts",
        "changeable",
        "has_array",
        "depth",
        "canonical",
        "seen",
        "delegate",
        "delegates",
        "plain",
        "inner",
        "shared",
    )

    def __init__(self, leaf: Leaf, canonical: bool):
        self.leaf = leaf
        # Whether a leaf that `intern` may not substitute is compared through a `Delegate`
        # (the `StableModule` form, one `Static` per module then), and whether one was.
        self.delegate = not canonical
        self.delegates = False
        self.parts: list = []
        # The keys of the leaves kept by reference that can change in place (an `OrderedDict`,
        # a `deque`, a user object): a leaf's identity does not say what it holds, so the same
        # object changed must find another canonical form (a new `Static`, and so a new program
        # under plain `eqx.filter_jit`), never the one made for its old contents.
        self.changeable: list = []
        self.has_array = False
        self.depth = 0
        self.canonical = canonical
        # `id` -> (the object, kept alive; what it froze to; where its parts start).
        self.seen: dict[int, tuple[Any, Any, int]] = {}
        # A plain module's walk (`freeze`): the read-only containers and array views it makes
        # inside a canonical form, which that form alone holds and checks (`_owned.intact`),
        # and the shared arrays under those views (their `id` is in the key: the token holds them).
        self.plain = canonical
        self.inner: list = []
        self.shared: list = []

    def __call__(self, obj: Any, path: Any) -> Any:
        if self.depth >= _MAX_DEPTH:
            # Nested too deeply to walk (a 500-deep tuple): one leaf, which `leaf` keys.
            return self._leaf(obj, path)
        self.depth += 1
        try:
            return self._freeze(obj, path)
        finally:
            self.depth -= 1

    def _freeze(self, obj: Any, path: Any) -> Any:
        t = type(obj)
        parts = self.parts
        if id(t) in _ATOMS:
            # Compared by value, type-exactly (a float by its bits: `-0.0` is not `0.0`): no
            # need to intern them. A NaN by its identity: `[nan_a] == [nan_b]` is False, so
            # another canonical form's NaN would change what `==` answers (the form holds it, so
            # its `id` is not reused while the key is in the table).
            if obj != obj:
                parts.append((t, "nan", id(obj)))
            else:
                parts.append((t, _FLOAT.pack(obj) if t is float else obj))
            return obj
        kind = _KINDS.get(id(t))
        if kind is None:
            if isinstance(obj, np.generic):
                return self._scalar(obj, path)
            if issubclass(t, tuple) and hasattr(obj, "_make") and not hasattr(obj, "__dict__"):
                # A NamedTuple (a subclass that can hold instance attributes is a leaf: `leaf`
                # keys those too, where `_make` would drop them).
                parts.append((t, len(obj)))
                items = [self(x, (path, i)) for i, x in enumerate(obj)]
                return obj if all(map(operator.is_, items, obj)) else obj._make(items)
            return self._leaf(obj, path)
        if kind is tuple:
            parts.append((tuple, len(obj)))
            items = [self(x, (path, i)) for i, x in enumerate(obj)]
            return obj if all(map(operator.is_, items, obj)) else tuple(items)
        if kind is np.ndarray:
            # Equal arrays are one canonical array anyway: that one is shared, not the original.
            return self._container(obj, kind, path)
        seen = self.seen.get(id(obj))
        if seen is not None:
            # Relative, so that a form's key means the same inside another's.
            parts.append(("same as", len(parts) - seen[2]))
            return seen[1]
        start = len(parts)
        value = self._container(obj, kind, path)
        self.seen[id(obj)] = (obj, value, start)
        return value

    def _container(self, obj: Any, kind: type, path: Any) -> Any:
        parts = self.parts
        canonical = self.canonical
        if canonical:
            token = token_of(obj)
            if token is not None and _reusable(token.key) and _forms.get(token.key) is token:
                # Already a canonical form as made (its token alive, so still the one in its
                # table); its key is what a walk of it appends.
                parts.extend(token.key)
                return obj
        start = (len(parts), len(self.changeable), len(self.inner), len(self.shared))
        if kind is np.ndarray:
            self.has_array = True
            if obj.dtype.hasobject:
                # A copy of an object array shares its items, so they are frozen as any other
                # static value's (a list in it reads back read-only), never kept as the user's
                # lists, which could change under a form keyed by the items' addresses.
                obj = self._object_items(obj, path)
            array = canonical_array(obj, False)  # Shared by dtype, shape, bytes; handed to no one.
            parts.extend(array_key(array))
            if canonical:
                # A `CanonicalArray` of this module's own over its memory (`a.shape = ...`
                # through `np.ndarray`'s own descriptor changes no other module's).
                return self._register(canonical_view(array), start, path, array)
            if self.plain:
                view = own_view(array)
                self.inner.append(view)
                self.shared.append(array)
                return view
            return array
        # Inside a canonical form, which is compared as a whole: the read-only forms.
        self.canonical = False
        try:
            if kind is list:
                parts.append((list, len(obj)))
                items = [self(x, (path, i)) for i, x in enumerate(obj)]
                value = _new(CanonicalList if canonical else ReadOnlyList, items)
            elif kind is dict:
                parts.append((dict, len(obj)))
                pairs = [(self(k, (path, "{key}")), self(v, (path, (k,)))) for k, v in obj.items()]
                value = _new(CanonicalDict if canonical else ReadOnlyDict, pairs)
            else:
                # A set or frozenset in its own iteration order, which depends on how it was
                # built: code that loops over it sees that order, so it is part of the value.
                parts.append((kind, len(obj)))
                items = [self(x, (path, "{...}")) for x in obj]
                value = self._set(obj, kind, items, canonical)
        finally:
            self.canonical = canonical
        if canonical:
            return self._register(value, start, path)
        if self.plain and kind is not frozenset:
            self.inner.append(value)
        return value

    def _object_items(self, obj: np.ndarray, path: Any) -> np.ndarray:
        self.parts.append((np.ndarray, "object items", obj.size))
        canonical = self.canonical
        self.canonical = False  # Inside an array, compared as a whole: the read-only forms.
        try:
            flat = obj.reshape(-1)
            items = [self(x, (path, i)) for i, x in enumerate(flat.tolist())]
        finally:
            self.canonical = canonical
        out = np.empty(obj.shape, dtype=obj.dtype)
        out.reshape(-1)[...] = _object_vector(items)
        # Laid out as the array given (`W.T` reads back Fortran-ordered, as on a plain module).
        return object_like(out, obj)

    def _set(self, obj: Any, kind: type, items: list, canonical: bool) -> Any:
        if canonical:
            cls = CanonicalSet if kind is set else CanonicalFrozenSet
            return cls._make(items)
        same = all(map(operator.is_, items, obj))
        if kind is set:
            # From the set itself where nothing changed: laid out as `set(obj)` would be.
            return ReadOnlySet._make(obj if same and type(obj) is set else items)
        # A plain frozenset where one laid out from its items (as `pickle` and `copy` rebuild
        # it) iterates as it did: the original itself if nothing changed, it is immutable.
        plain = frozenset(items)
        if all(map(operator.is_, plain, items)):
            return obj if same and type(obj) is frozenset else plain
        return OrderedFrozenSet._make(items)

    def _scalar(self, obj: Any, path: Any) -> Any:
        # Immutable: read back as it is (in a plain module, as an instance of a subclass of its
        # type that compares type-exactly), keyed by its exact type and bytes.
        self.has_array = True
        if isinstance(obj, np.void):
            if obj.flags.writeable or mutable_dtype(obj.dtype):
                # Not immutable: a structured scalar is a view into the array it came from,
                # which the user can change (`v["a"] = 0.0`), under a key made of its old bytes,
                # and it shares that array's dtype, whose field names can be assigned
                # (`a.dtype.names = ("b", "a")`). As a NumPy array, it is read back as a
                # read-only copy with a dtype of its own.
                # (`np.array(v, copy=True)` of such a scalar still shares its array's memory.)
                copy = np.array(obj).copy().view(private_dtype(obj.dtype))
                copy.flags.writeable = False
                obj = copy[()]
        elif not leaf_key(obj).substitutable:
            # What `intern` may not hand out for another (`K-numpy-scalar`): a NaN or NaT, unequal
            # to every other NaN object, or a user's subclass holding attributes. The module's
            # own object, as any such leaf (`_leaf`): never one made for another module.
            return self._leaf(obj, path)
        t = getattr(type(obj), "_base", type(obj))
        if obj.dtype.hasobject:
            self.parts.append((t, id(obj)))
            return obj
        part = (t, obj.dtype, obj.tobytes())
        if not self.canonical or not isinstance(obj, (np.number, np.bool_)):
            # A NumPy string, date or record in a plain module is stored as it is (hashable).
            self.parts.append(part)
            return obj if type(obj) is t else np.asarray(obj)[()]
        cls = canonical_scalar_class(t)
        made = cls(np.asarray(obj)[()])
        start = (len(self.parts), len(self.changeable), len(self.inner), len(self.shared))
        self.parts.append(part)
        if type(made) is not cls:
            # NumPy hands out its own two `bool` scalars, whatever the class asked for.
            return obj
        return self._register(made, start, path)

    def _register(self, value: Any, start: tuple[int, ...], path: Any, held: Any = None) -> Any:
        """`value` as a member of its equivalence class (its `Token`, made if new). A list,
        dict, set or array (an owned form) is `value` itself, this walk's own, with a snapshot
        of what it holds; an immutable one (a frozenset, a NumPy scalar) is the class's one."""
        key = table_key(tuple(self.parts[start[0] :]), tuple(self.changeable[start[1] :]))
        owned = not isinstance(value, (CanonicalFrozenSet, np.generic))
        snap = snapshot(value, self.inner[start[2] :]) if owned else None
        with _lock:
            token = _forms.get(key)
            if token is None:
                # The token keeps alive what the key names by `id`: the first member's items
                # (the snapshot's tuples, which no write changes) or the shared array.
                token = Token(key, value if not owned else (snap, held, self.shared[start[3] :]))
                if not owned:
                    value._token = token  # pyright: ignore[reportAttributeAccessIssue]
                _forms[key] = token
        if not owned:
            return token.held
        value._token = token
        value._snap = snap
        value._where = path
        return value

    def _leaf(self, obj: Any, path: Any) -> Any:
        x = self.leaf(obj, path)
        if isinstance(x, jax.Array):
            self.has_array = True  # Kept, after a warning, by the module layer.
        # Equivalent leaves are one object after interning, so the identity is the key; the
        # canonical form holds the leaf, so the `id` is not reused while the key is in a table.
        # A leaf that can change in place is also looked up by its key now (`changeable`).
        key = leaf_key(x)
        if self.delegate and not key.substitutable:
            # Kept as it is (its owner's object), compared by its own `==` or its key.
            # A NumPy scalar (a NaN, a user's subclass holding attributes) by its key: NumPy's
            # `==` compares values only, across types and whatever the attributes say.
            own = own_eq_class(type(x)) and not isinstance(x, np.generic)
            try:
                hash(d := Delegate(x, own))  # Once: it holds the key `x` has now.
            except Exception:
                pass  # Unhashable after all: by identity, as before.
            else:
                self.parts.append(d)
                self.delegates = True
                return x
        self.parts.append((type(x), id(x)))
        if key.identity and not too_many_objects(key):
            # (An object reaching too many objects to key gets a key equal to nothing: it is
            # left to its identity, as Equinox leaves a static object, rather than given a new
            # canonical form, and so a new program, at every build.)
            self.changeable.append(key)
        return x


def _object_vector(items: list) -> np.ndarray:
    # Item by item: `np.array(items)` would take a list item apart into another dimension.
    out = np.empty(len(items), dtype=object)
    for i, x in enumerate(items):
        out[i] = x
    return out


def _new(cls: Any, items: list) -> Any:
    value = cls.__new__(cls)
    (list.extend if issubclass(cls, list) else dict.update)(value, items)
    return value


def keep(obj: Any, path: Any) -> Any:
    return obj


def freeze(obj: Any, leaf: Leaf | None = None, path: Any = None) -> Any:
    """The canonical form of a static value that a plain `equinox.Module` stores: hashable,
    type-exact, and read back as the original (see `_canonical.py`). Lists, dicts, sets,
    frozensets, NumPy arrays and scalars, at any depth, become canonical forms of their class
    (lists, dicts, sets and arrays new objects of this call's own); tuples and NamedTuples
    stay what they are, holding canonical forms; everything else
    is passed to `leaf`. A canonical value is returned as it is.

    **Arguments:**

    - `obj`: the value of a static field.
    - `leaf`: called as `leaf(x, path)` on every other value; by default the value is kept.
    - `path`: where `obj` is, passed on to `leaf` as `(path, index)`, `(path, (key,))` or
        `(path, "{...}")` for an element of a list, dict or set, so that `leaf` can name the
        place of a bad value (see `field_path` in `_paths.py`).

    **Returns:**

    The frozen value.
    """
    t = type(obj)
    if id(t) in _ATOMS:
        return obj
    token = token_of(obj)
    if token is not None and _reusable(token.key) and _forms.get(token.key) is token:
        return obj
    return Freezer(keep if leaf is None else leaf, canonical=True)(obj, path)
