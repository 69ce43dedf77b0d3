"""`Watch`: the flat list of cheap checks that say a key computed earlier is still the key now.

A key is a function of the present state of what it covers. Recomputing it on every call would
cost tens of microseconds, so each computation also records, for everything whose change could
change the key, how to see that it did not: an object's state (closure cell contents, a list's
items, a dict's values, an object's attributes) compared item by item with `is`; a name in a
namespace (a global, a module or class attribute) compared with `is`; the bytes of a NumPy array
compared with `==`. When every check passes, the key is unchanged. When one fails, the key is
recomputed, which is the authoritative answer (a global rebound to an equal value keeps its key).
"""

import operator
import weakref
from collections.abc import Callable
from itertools import islice
from typing import Any

from ._bytes import ArrayState, same_bytes
from ._handles import Handle, known


_is = operator.is_
_MISSING = object()
# (object, state function, state it had): valid while `state_fn(obj)` holds the same objects.
State = tuple[Any, Callable[[Any], tuple], tuple]
# (namespace, name, value it had): valid while `namespace.get(name)` is the same object.
Name = tuple[Any, str, Any]
# (array, bytes it had).
Blob = tuple[Any, bytes]


_sizes: dict[int, int] = {}


def size(n: int) -> int:
    """`n` as one object per value, for a state compared with `is`: CPython caches only the ints
    up to 256, so the `len()` of a 300-item list is a new object on every call and a state that
    held it never matched again (every hit re-keyed the whole container). Exact: two sizes are
    the same object exactly when they are equal. One entry per distinct size ever watched."""
    return n if n < 257 else _sizes.setdefault(n, n)


def list_state(obj: Any) -> tuple:
    return (size(len(obj)), *obj)


def dict_state(d: dict) -> tuple:
    return (size(len(d)), *d.keys(), *d.values())


def plain_fn_state(f: Any) -> tuple:
    """The state of a function that had no closure, keyword defaults, attributes or annotations
    when it was keyed (what `fn_state` gives then): its code, defaults and names (`__name__`,
    `__qualname__`, `__module__`, `__doc__`, which code can read). Keyword defaults, attributes
    or annotations added since give another tuple, which matches no such state. `Watch.valid`
    checks these inline, as they are the functions every jitted call looks at."""
    if f.__kwdefaults__ is not None or f.__dict__ or f.__annotations__:
        return (f.__code__, f.__defaults__, f.__kwdefaults__, f.__dict__, f.__annotations__)
    return (f.__code__, f.__defaults__, f.__name__, f.__qualname__, f.__module__, f.__doc__)


class _Held:
    """A watched weak reference itself (jaxtyping's `[weakref.ref(wrapper)]`), held as it is: never
    mistaken for the weak reference `_weak` makes, which stands for its referent."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj


class Batch:
    """A run of plain objects' states (`_state.object_state`) checked as one (`_batch.py`):
    the objects, what their states held, and those states, which a weak watch holds instead."""

    __slots__ = ("objs", "types", "sizes", "keys", "values", "triples")

    def __init__(
        self, objs: tuple, types: tuple, sizes: list, keys: tuple, values: tuple, triples: tuple
    ):
        self.objs = objs
        self.types = types
        self.sizes = sizes
        self.keys = keys
        self.values = values
        self.triples = triples


def batched_watch(states: tuple, names: tuple = (), blobs: tuple = ()) -> "Watch":
    """A `Watch` whose runs of plain objects' states are each one `Batch` (the hit path)."""
    # `_batch` imports `_state`, which imports this module.
    from ._batch import batched

    return Watch(batched(states), names, blobs)


def _unbatched(states: tuple) -> tuple:
    if not any(type(s[0]) is Batch for s in states):
        return states
    return tuple(t for s in states for t in (s[0].triples if type(s[0]) is Batch else (s,)))


def _weak(x: Any) -> Any:
    if type(x) is weakref.ref:
        return _Held(x)
    try:
        return weakref.ref(x) if type(x).__weakrefoffset__ else x
    except TypeError:
        return x


def _weak_namespace(ns: Any) -> Any:
    # A function's globals dict, through the handle its key holds (`_handles.py`): the
    # namespace of generated code holds the function, which the memo must not keep alive.
    if type(ns) is dict:
        h = known(ns)
        if h is not None:
            return h
    return _weak(ns)


def _strong(x: Any) -> Any:
    if type(x) is weakref.ref:
        x = x()
        if x is None:
            raise _Dead
    elif type(x) is _Held:
        return x.obj
    elif type(x) is Handle:
        x = x.get()
        if x is None:
            raise _Dead
    return x


class _Dead(Exception):
    pass


def _same(now: Any, saved: Any) -> bool:
    # A dead weak reference returns `None`: it matches nothing, `None` included (a global
    # rebound to `None` after its old value was collected is a change).
    if type(saved) is weakref.ref:
        then = saved()
        return then is not None and then is now
    return now is saved or (type(saved) is _Held and saved.obj is now)


class Watch:
    """What must stay as it is for a key to stay valid. See the module docstring."""

    __slots__ = ("states", "names", "blobs")

    def __init__(self, states: tuple = (), names: tuple = (), blobs: tuple = ()):
        self.states: tuple[State, ...] = states
        self.names: tuple[Name, ...] = names
        self.blobs: tuple[Blob, ...] = blobs

    def __bool__(self) -> bool:
        return bool(self.states or self.names or self.blobs)

    def __len__(self) -> int:
        return len(self.states) + len(self.names) + len(self.blobs)

    def valid(self) -> bool:
        """Whether everything watched is as it was (the hit path: identity checks only)."""
        for obj, state_fn, state in self.states:
            if state_fn is plain_fn_state:
                # `plain_fn_state(obj) == state` by identity, without the call and the tuple.
                if (
                    obj.__code__ is not state[0]
                    or obj.__defaults__ is not state[1]
                    or obj.__kwdefaults__ is not None
                    or obj.__dict__
                    or obj.__annotations__
                    or obj.__name__ is not state[2]
                    or obj.__qualname__ is not state[3]
                    or obj.__module__ is not state[4]
                    or obj.__doc__ is not state[5]
                ):
                    return False
                continue
            # An exact list's or dict's state compared where it is, without the tuple of all its
            # items that `list_state` or `dict_state` builds (a 1,000,000-item vocabulary: 1.5x
            # and 2x less CPU). Exact types only: their `len` is what they iterate.
            if state_fn is list_state and type(obj) is list:
                if len(obj) != state[0] or not all(map(_is, obj, islice(state, 1, None))):
                    return False
                continue
            if state_fn is dict_state and type(obj) is dict:
                n = state[0]
                if (
                    len(obj) != n
                    or not all(map(_is, obj, islice(state, 1, n + 1)))
                    or not all(map(_is, obj.values(), islice(state, n + 1, None)))
                ):
                    return False
                continue
            check = getattr(state_fn, "valid", None)
            if check is not None:
                # A state that compares itself where it is (`_records.records_state`).
                if not check(obj, state):
                    return False
                continue
            now = state_fn(obj)
            if len(now) != len(state) or not all(map(_is, now, state)):
                return False
        for namespace, name, value in self.names:
            if namespace.get(name, _MISSING) is not value:
                return False
        for array, data in self.blobs:
            if not same_bytes(array, data):
                return False
        return True

    def weak(self) -> "Watch":
        """The same checks holding weak references where possible, for the key memo: a memo
        entry must not keep alive what it describes (a self-recursive closure holds itself)."""
        return Watch(
            tuple((_weak(o), fn, _weak_items(s)) for o, fn, s in _unbatched(self.states)),
            tuple((_weak_namespace(ns), name, _weak(v)) for ns, name, v in self.names),
            tuple((_weak(a), _weak_blob(data)) for a, data in self.blobs),
        )

    def weak_valid(self) -> bool:
        """`valid()` for a `weak()` watch: a collected object means "changed"."""
        try:
            for holder, state_fn, state in self.states:
                now = state_fn(_strong(holder))
                if len(now) != len(state):
                    return False
                if not all(map(_is, now, state)) and not all(map(_same, now, state)):
                    return False
            last, namespace = None, None
            for holder, name, value in self.names:
                if holder is not last:
                    # A function's globals come in a run: one `Handle.get` for all of them.
                    last, namespace = holder, _strong(holder)
                if not _same(namespace.get(name, _MISSING), value):  # pyright: ignore
                    return False
            for holder, data in self.blobs:
                if not same_bytes(_strong(holder), _strong_blob(data)):
                    return False
        except _Dead:
            return False
        return True

    def strong(self) -> "Watch | None":
        """A `weak()` watch made strong again (fast to check), or `None` if something watched
        was collected."""
        try:
            return batched_watch(
                tuple((_strong(o), fn, _strong_items(s)) for o, fn, s in self.states),
                tuple((_strong(ns), name, _strong_or_self(v)) for ns, name, v in self.names),
                tuple((_strong(a), _strong_blob(data)) for a, data in self.blobs),
            )
        except _Dead:
            return None


def _weak_blob(data: Any) -> Any:
    # A shared copy of a large array, held weakly by the memo (see `ArrayState`).
    return weakref.ref(data) if type(data) is ArrayState and data.shared else data


def _strong_blob(data: Any) -> Any:
    # Its copy gone with the last strong watch: the key is computed afresh (a new copy).
    if type(data) is weakref.ref:
        data = data()
        if data is None:
            raise _Dead
    return data


def _strong_or_self(x: Any) -> Any:
    return _strong(x)


def _weak_items(state: tuple) -> tuple:
    # A state of a million `int`s or `str`s is kept as it is: the scan of the types runs in C,
    # a Python call per item would cost a second per million.
    # (A set of the types compares them with their metaclass's `==`, which may merge two: that
    # only decides whether the state is held weakly or as it is, both compared by `is`.)
    if not any(map(_referable, set(map(type, state)))):
        return state
    return tuple(map(_weak, state))


def _strong_items(state: tuple) -> tuple:
    types = set(map(type, state))
    if weakref.ref not in types and _Held not in types:
        return state
    return tuple(map(_strong, state))


def _referable(t: type) -> bool:
    # What `_weak` would replace: an object that supports weak references, or a weak reference.
    return bool(t.__weakrefoffset__) or t is weakref.ref


def merge(watches: list["Watch"]) -> Watch:
    """One watch over several, each check once (the watches of a `jax.jit` function and of the
    function it wraps share entries, and each costs a state computation per call)."""
    states: dict[tuple[int, Any], State] = {}
    names: dict[tuple[int, str], Name] = {}
    blobs: dict[int, Blob] = {}
    for w in watches:
        for s in w.states:
            states.setdefault((id(s[0]), s[1]), s)
        for n in w.names:
            names.setdefault((id(n[0]), n[1]), n)
        for b in w.blobs:
            blobs.setdefault(id(b[0]), b)
    return Watch(tuple(states.values()), tuple(names.values()), tuple(blobs.values()))


MISSING = _MISSING
