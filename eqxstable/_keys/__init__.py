"""The keys layer: `stable_key`, a type-exact key for "behaves identically inside a traced
computation", and the `Watch` that says cheaply whether a key computed earlier still holds.

See `README.md` in this folder for the rules (what is keyed by value, by identity and watched,
and taken as constant) and why each is sound.
"""

from typing import Any

from . import _memo, _ran_out, _rules
from ._context import Ctx, key, top
from ._fallbacks import TOO_MANY
from ._memo import recall, remember
from ._per_class import type_ids
from ._recent import Recent
from ._types import Equal, FunctionKey, Identity, Key, MutableKey, Namespace
from ._watch import merge, Watch


# Exact immutable scalars (`K-value`, `K-float`): their handlers read the value alone, touch no
# context and watch nothing, and no memo entry can hold one (no weak reference). Keyed by that
# very handler without a context: a call with 100,000 static ints (a vocabulary of pairs, a pytree
# of Python scalars) costs a dict lookup and a `Key` each, not a computation each.
# By the types' identities (`type_ids`): a user's metaclass may call its class equal to `int`.
_ATOMS = type_ids((int, bool, str, bytes, float, complex, type(None), type(Ellipsis)))
_NO_WATCH = Watch()
# The keys of the node data of the latest call, by the objects it holds (`_recent.py`).
_latest = Recent()


def compute(obj: Any) -> tuple[Key, Watch]:
    """The key of `obj` computed now, with the watch that says when it may have changed."""
    if id(type(obj)) in _ATOMS and obj == obj:
        # (A NaN, unequal to itself, takes the full computation: never substituted, `float_`.)
        return Key(key(obj, _ATOM_CTX, True), False), _NO_WATCH
    entry = recall(obj)
    if entry is not None:
        watch = entry.watch.strong()
        if watch is not None:
            return entry.key, watch
    ctx = Ctx()
    parts = top(obj, ctx, True)
    result = Key(parts, ctx.identity, not ctx.own_eq)
    watch = ctx.watch()
    if not ctx.copied_arrays and not _holds_itself(parts, obj):
        # Not when an array was keyed by contents: `intern` hands out a read-only copy of the
        # object, and the original stays writable, so its key must be computed afresh.
        # Spliced into another object's key only where its parts mean the same there: not
        # where they number objects of its own walk, nor where they stand for state no key sees
        # (`ctx.unread`): a function reading a file or `os.environ`, keyed on its own once, is
        # itself for its own wrappers, but a rebuilt function calling it is another reader.
        remember(obj, result, watch, not (ctx.stack.done or ctx.stack.cut or ctx.unread))
    return result, watch


# Never written to: the handlers of `_ATOMS` read nothing from their context (but a NaN's,
# which is never given this one).
_ATOM_CTX = Ctx()


def _holds_itself(parts: Any, obj: Any) -> bool:
    """Whether a key compares `obj` by its own `==` (`K-own-eq`, `K-jax-value`), and so holds it
    strongly: the memo, whose entry lives as long as `obj`, would then keep it alive for good."""
    if type(parts) is Equal:
        return parts.obj is obj
    return type(parts) is tuple and any(type(p) is Equal and p.obj is obj for p in parts)


def compute_node_data(data: Any) -> tuple[Key, Watch]:
    """The key of pytree node data: the lists, dicts and sets in it are made afresh by each
    flatten (a custom node's `flatten` may return a new dict), so they are keyed by contents."""
    if id(type(data)) in _ATOMS and data == data:
        # `None`, the node data of every tuple, list and `None` node.
        return Key(key(data, _ATOM_CTX, False), False), _NO_WATCH
    found = _latest.recall(data)
    if found is not None:
        return found
    ctx = Ctx(by_value=True)
    parts = top(data, ctx, False)
    result, watch = Key(parts, ctx.identity, not ctx.own_eq), ctx.watch()
    if not ctx.copied_arrays:
        _latest.remember(data, result, watch)
    return result, watch


def new_call() -> None:
    """A new call's keys begin (the jit cache's lookup): the node data keyed for the one before
    is no longer held (`_recent.py`)."""
    _latest.clear()


def stable_key(obj: Any) -> Key:
    """The key that [`eqxstable.intern`][] uses.

    `stable_key(a) == stable_key(b)` exactly when `a` and `b` are equivalent: guaranteed to
    behave identically inside a traced computation, now and later. Keys are type-exact (`1`,
    `1.0`, `True` and `np.int32(1)` are four keys; `0.0` and `-0.0` differ). A function's key
    covers everything its trace can read: its code, closure cells, defaults, attributes and the
    globals it loads, followed into the user's own helpers, classes and modules. An object that
    can change in place is keyed by its identity together with what it holds now.

    **Arguments:**

    - `obj`: any Python object.

    **Returns:**

    A hashable key. The key of an object that changed (a global it reads was rebound, a list it
    captures was appended to) is computed afresh on the next call.

    !!! example

        ```python
        import eqxstable as es

        def make(scale):
            return lambda x: x * scale

        assert es.stable_key(make(2.0)) == es.stable_key(make(2.0))
        assert es.stable_key(make(2.0)) != es.stable_key(make(2))
        assert es.stable_key(1) != es.stable_key(1.0)
        ```
    """
    if id(type(obj)) in _ATOMS and obj == obj:
        return Key(key(obj, _ATOM_CTX, True), False)
    entry = recall(obj)
    if entry is not None:
        return entry.key
    return compute(obj)[0]


def key_uses_identity(key: Key) -> bool:
    """Whether `key` names some changeable object by identity (a list, a plain object, a loop
    variable's cell): an equivalent rebuilt object will then get a different key."""
    return key.identity


def too_many_objects(key: Any) -> bool:
    """Whether `key` (or one of a tuple of keys) is that of an object reaching more objects than
    a key may walk (`MAX_OBJECTS`): it equals no other key, so a jitted call with it traces
    every time."""
    if type(key) is tuple:
        return any(too_many_objects(k) for k in key)
    parts = key.parts if type(key) is Key else None
    return (
        type(parts) is tuple
        and parts[:1] == (TOO_MANY,)
        and (len(parts) == 2 or (len(parts) == 3 and type(parts[2]) is str))
    )


def too_many_reaching(key: Any) -> str:
    """What the walk of a key (or of one of a tuple of keys) past the object budget ran out in
    ("a list of 55,000 items (Record)"), where `too_many_objects(key)` and it is known, else
    ""."""
    if type(key) is tuple:
        return next(filter(None, map(too_many_reaching, key)), "")
    if type(key) is Key and too_many_objects(key) and len(key.parts) == 3:
        return key.parts[2]
    return ""


def warns_hash_without_eq(t: type) -> bool:
    """Whether objects of type `t` are keyed by identity with an `es.StabilityWarning` because
    the class defines `__hash__` but not `__eq__`."""
    return _rules.resolve(t) is _rules.hash_without_eq


def clear() -> None:
    """Forgets every memoised key."""
    _memo.memo.clear()
    _latest.clear()
    _ran_out.clear()


__all__ = [
    "clear",
    "compute",
    "compute_node_data",
    "Equal",
    "FunctionKey",
    "Identity",
    "Key",
    "key_uses_identity",
    "merge",
    "MutableKey",
    "Namespace",
    "new_call",
    "stable_key",
    "too_many_objects",
    "too_many_reaching",
    "Watch",
    "warns_hash_without_eq",
]
