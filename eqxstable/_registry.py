"""The interning registry: one canonical instance per equivalence class, and named callables."""

import difflib
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, overload, TypeVar

import numpy as np

from ._caches import cache_clears
from ._errors import RegistryError
from ._keys import (
    clear as _clear_memo,
    Identity,
    Key,
    MutableKey,
    stable_key,
    too_many_objects,
    too_many_reaching,
)
from ._keys._context import MAX_DEPTH


_T = TypeVar("_T")

# Canonical instances that support weak references (functions, partials, modules) are held
# weakly: the registry never keeps alive what only it references. The others (tuples, numbers,
# NamedTuples) are held strongly in a table bounded by count and by the bytes of the arrays
# they hold (each held twice: the read-only copy, and its bytes in the key), the least recently
# used first out; one holding more than `_MAX_ENTRY_BYTES` of arrays is never held (a rebuilt
# `Config(table, name)` of a 40 MB table kept 80 MB after the program dropped it). Evicting one,
# or not keeping it, only costs a missed sharing (a recompile), never a wrong answer.
_MAX_STRONG = 4096
_MAX_ENTRY_BYTES = 1 << 20
_MAX_STRONG_BYTES = 64 << 20
_weak: dict[Key, weakref.ref] = {}
_strong: "OrderedDict[Key, Any]" = OrderedDict()
# The array bytes of each strongly held canonical that holds arrays, and their sum.
_strong_bytes: dict[Key, int] = {}
_strong_total = 0
_names: dict[str, Any] = {}
# The identities of a canonical function's own slots when it became canonical (`_slots_of`).
_slots: dict[Key, tuple] = {}
# Re-entrant: interning a container interns its elements.
_lock = threading.RLock()


MSG_TAKEN = (
    "`eqxstable.register({name!r}, ...)`: the name {name!r} is already registered to "
    "{old!r}, which is not equivalent to the new {new!r}. Register the new callable under "
    "another name, or pass the same callable (an equivalent rebuilt one is fine)."
)
MSG_TOO_MANY = (
    "`eqxstable.register({name!r}, ...)`: the name {name!r} is already registered to "
    "{old!r}, and whether the new {new!r} is equivalent to it cannot be checked: {which} "
    "reaches too many objects to key ({reaching}), so its key equals nothing. Register it "
    "once and look it up with `eqxstable.lookup({name!r})` when rebuilding, or keep the large "
    "data out of what the callable captures (pass it as an argument)."
)
MSG_UNKNOWN = (
    "`eqxstable.lookup({name!r})`: no callable is registered under {name!r}.{hint} "
    "Register one first with `eqxstable.register({name!r}, fn)`."
)
MSG_NAME_TYPE = "`eqxstable.register(name, ...)`: `name` must be a str, not {type}."
MSG_NAME_EMPTY = (
    "`eqxstable.register({name!r}, ...)`: the name is empty; give the callable a name to look "
    'it up by, e.g. `es.register("swish", swish)`.'
)
MSG_NOT_CALLABLE = (
    "`eqxstable.register({name!r}, fn)`: `fn` must be a callable (a function, a partial, a "
    "module), not {type} {value!r}. To use `register` as a decorator, write "
    "`@es.register({name!r})` above the function."
)


# The slots of a function that its program is made of and that can be rebound (its cells
# cannot be; their contents are in its key).
_FUNCTION_SLOTS = ("__code__", "__defaults__", "__kwdefaults__", "__dict__")


def _slots_of(obj: Any) -> tuple | None:
    """The identities of a function's own slots, else `None`.

    A function's code, defaults, keyword defaults and attributes are taken as part of its
    program: rebinding one after interning is a program change that `intern` does not follow
    (neither does Equinox's cache of a static function). The registry only makes sure never to
    hand out a canonical function whose slots were rebound since it became canonical.

    Identities, not the objects: holding a function's `__dict__` or defaults would keep alive a
    function that they reference. A slot rebound to an object that took a freed one's `id` is
    still caught by the key check of `_find` unless it holds an equivalent value."""
    if type(obj) is not types.FunctionType:
        return None
    return tuple(id(getattr(obj, name)) for name in _FUNCTION_SLOTS)


def _drop(key: Key, ref: weakref.ref) -> None:
    with _lock:
        if _weak.get(key) is ref:
            del _weak[key]
            _slots.pop(key, None)


def _find(key: Key) -> Any:
    """The live canonical instance for `key`, or `None`. A canonical whose closure cells were
    rebound since it was interned no longer matches its key, and one whose own slots were
    rebound (even to equal values) is retired: either is dropped, never returned."""
    ref = _weak.get(key)
    if ref is not None:
        canonical = ref()
    elif key in _strong:
        canonical = _strong[key]
        _strong.move_to_end(key)
    else:
        return None
    if canonical is None or not _unchanged(key, canonical) or stable_key(canonical) != key:
        _weak.pop(key, None)
        _forget_strong(key)
        _slots.pop(key, None)
        return None
    return canonical


def _forget_strong(key: Key) -> None:
    global _strong_total
    _strong.pop(key, None)
    _strong_total -= _strong_bytes.pop(key, 0)


def _hold(key: Key, canonical: Any) -> None:
    """Holds `canonical` strongly (it takes no weak reference) within the table's bounds: by
    count, and by the bytes of the arrays it holds (`_MAX_ENTRY_BYTES`, `_MAX_STRONG_BYTES`)."""
    global _strong_total
    size = _array_bytes(canonical)
    if size > _MAX_ENTRY_BYTES:
        return
    _strong[key] = canonical
    if size:
        _strong_bytes[key] = size
        _strong_total += size
    while _strong and (len(_strong) > _MAX_STRONG or _strong_total > _MAX_STRONG_BYTES):
        _forget_strong(next(iter(_strong)))


def _array_bytes(obj: Any, depth: int = 0, memo: dict[int, int] | None = None) -> int:
    """The bytes of the NumPy arrays in `obj`, through the same tuples and frozensets as
    `_canonical_copy`; each object once (`memo`, by `id`: a tuple met twice on other paths,
    `t = (t, t)` n deep, is n objects, not 2**n paths)."""
    if type(obj) is np.ndarray:
        return obj.nbytes
    t = type(obj)
    if issubclass(t, (tuple, frozenset)) and depth < MAX_DEPTH:
        memo = {} if memo is None else memo
        found = memo.get(id(obj))
        if found is not None:
            return 0  # Counted where it was first met.
        memo[id(obj)] = 0
        items = tuple.__iter__(obj) if issubclass(t, tuple) else frozenset.__iter__(obj)
        return sum(_array_bytes(x, depth + 1, memo) for x in items)
    return 0


def _unchanged(key: Key, canonical: Any) -> bool:
    snapshot = _slots.get(key)
    if snapshot is None:
        return True
    return _slots_of(canonical) == snapshot


def _holds_array(obj: Any, depth: int = 0, memo: set[int] | None = None) -> bool:
    """Whether `obj` holds a NumPy array keyed by its contents, through the tuples and
    frozensets its key reads by contents (each once: `memo`, by `id`). Past the keys' depth
    limit nothing is keyed by contents."""
    if type(obj) is np.ndarray:
        return True
    t = type(obj)
    if issubclass(t, (tuple, frozenset)) and depth < MAX_DEPTH:
        memo = set() if memo is None else memo
        if id(obj) in memo:
            return False  # Answered where it was first met.
        memo.add(id(obj))
        # The items in its C storage, as its key reads them: a subclass's `__iter__` may do
        # something else.
        items = tuple.__iter__(obj) if issubclass(t, tuple) else frozenset.__iter__(obj)
        return any(_holds_array(x, depth + 1, memo) for x in items)
    return False


def _canonical_copy(obj: Any) -> Any:
    """What `intern` hands out for `obj`, which nothing else holds equal: `obj` itself; for a
    NumPy array keyed by its contents, a read-only view of its own over an immutable copy
    (`_module._arrays`); `None` for a tuple or frozenset holding such an array, which is never
    substituted: Python compares a container's items by `is` first, so another container
    holding a copy of the user's array is not `==` to the user's (a 2-element array raises, a
    NaN one is unequal), and one shared object holding an array would let one caller's
    `a.shape = ...` change every other caller's."""
    if type(obj) is np.ndarray:
        if obj.dtype.hasobject:
            return None
        from ._module._arrays import canonical_array, own_view

        return own_view(canonical_array(obj, False))
    if _holds_array(obj):
        return None
    return obj


def _substitutable(key: Key) -> bool:
    """Whether `intern` may hand out another object of `key`'s class. Not where it is keyed by
    its own identity (alone in its class), nor where some part of it is compared by a class's
    own `==` (a user's hashable object with lists of its own, a library value not on the
    allowlist), nor where it can change in place (a partial's keywords): equal, but not the
    same."""
    return (
        key.substitutable and type(key.parts) is not Identity and type(key.parts) is not MutableKey
    )


def intern(obj: _T) -> _T:
    """Returns the canonical instance of `obj`'s equivalence class.

    The first member seen becomes canonical; later equivalent objects return that same instance,
    so that `intern(a) is intern(b)` exactly when `a` and `b` are equivalent (see
    [`eqxstable.stable_key`][]). An object that cannot be proven equivalent to anything else is
    returned unchanged. A NumPy array is returned as a read-only view (one per call) of a copy
    that cannot change; a tuple or frozenset holding one is returned unchanged.

    **Arguments:**

    - `obj`: any Python object.

    **Returns:**

    The canonical instance, equivalent to `obj`.

    !!! example

        ```python
        import eqxstable as es

        acts = [es.intern(lambda x: x * 2) for _ in range(3)]
        assert acts[0] is acts[1] is acts[2]
        ```
    """
    key = stable_key(obj)
    ref = _weak.get(key)
    if (ref is not None and ref() is obj) or _strong.get(key) is obj:
        # `obj` is the canonical instance, and computing its key just checked that it still
        # matches: the common case of re-interning an already stable tree.
        return obj
    with _lock:
        canonical = _find(key)
        if canonical is not None:
            return canonical
        if not _substitutable(key):
            return obj
        canonical = _canonical_copy(obj)
        if canonical is None:
            return obj
        if canonical is not obj and type(obj) is np.ndarray:
            # A view of its own for each caller, over one shared immutable copy: nothing to
            # store (the copy is shared by `_module._arrays`).
            return canonical
        try:
            _weak[key] = weakref.ref(canonical, lambda r, key=key: _drop(key, r))
            slots = _slots_of(canonical)
            if slots is not None:
                _slots[key] = slots
        except TypeError:
            _hold(key, canonical)
        return canonical


@overload
def register(name: str) -> Callable[[_T], _T]: ...


@overload
def register(name: str, fn: _T) -> _T: ...


def register(name: str, fn: Any = None) -> Any:
    """Names a shared callable (an activation, say) and returns its canonical instance.

    Re-registering an equivalent callable under the same name returns the canonical one, so a
    module that registers its activation in `__init__` may be rebuilt freely. Where `intern`
    would keep `fn` itself (a partial, a function with attributes: they can change in place),
    `fn` is returned and the name keeps its first callable.

    **Arguments:**

    - `name`: the name, looked up later with [`eqxstable.lookup`][].
    - `fn`: the callable. Omit it to use `register` as a decorator.

    **Returns:**

    The canonical instance of `fn`: the callable the name holds where `fn` is equivalent to it
    and `intern` would substitute it, `fn` itself where `intern` keeps it (or, without `fn`, a
    decorator that registers its argument).

    **Raises:**

    [`eqxstable.RegistryError`][] if `name` is taken by a callable that is not equivalent;
    `TypeError` if `name` is not a string or `fn` is not callable; `ValueError` if `name` is
    empty.

    !!! example

        ```python
        import jax
        import eqxstable as es

        @es.register("swish")
        def swish(x):
            return x * jax.nn.sigmoid(x)

        assert es.lookup("swish") is swish
        ```
    """
    if not isinstance(name, str):
        raise TypeError(MSG_NAME_TYPE.format(type=type(name).__name__))
    if not name.strip():
        raise ValueError(MSG_NAME_EMPTY.format(name=name))
    if fn is None:
        return lambda f: register(name, f)
    if not callable(fn):
        raise TypeError(MSG_NOT_CALLABLE.format(name=name, type=type(fn).__name__, value=fn))
    canonical = intern(fn)
    with _lock:
        old = _names.get(name)
        if old is None:
            _names[name] = canonical
            return canonical
        if old is canonical:
            return old
        key, old_key = stable_key(fn), stable_key(old)
        if old_key == key:
            if _substitutable(key) and _canonical_copy(fn) is fn:
                return old
            # Equivalent now, but `intern` keeps `fn` (a partial's keywords, a function's
            # attributes can change in place): the name stays `old`'s, the caller keeps its own.
            return fn
        keys = (("the new one", key), ("the registered one", old_key))
        unkeyed = [(w, k) for w, k in keys if too_many_objects(k)]
        if unkeyed:
            which, k = unkeyed[0]
            raise RegistryError(
                MSG_TOO_MANY.format(
                    name=name,
                    old=old,
                    new=fn,
                    which=which,
                    reaching=too_many_reaching(k) or "past the object budget",
                )
            )
        raise RegistryError(MSG_TAKEN.format(name=name, old=old, new=fn))


def lookup(name: str) -> Any:
    """The callable registered under `name` with [`eqxstable.register`][].

    **Arguments:**

    - `name`: the registered name.

    **Returns:**

    The canonical instance registered under `name`.

    **Raises:**

    [`eqxstable.RegistryError`][] (a `KeyError`) listing close matches if `name` is unknown.
    """
    try:
        return _names[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), list(_names), n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise RegistryError(MSG_UNKNOWN.format(name=name, hint=hint)) from None


def _clear() -> None:
    global _strong_total
    with _lock:
        _weak.clear()
        _strong.clear()
        _strong_bytes.clear()
        _strong_total = 0
        _slots.clear()
    _clear_memo()


cache_clears.append(_clear)
