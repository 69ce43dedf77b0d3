"""A function's globals dictionary, held weakly by keys and by the memo's watches (`Handle`).

A dict supports no weak reference, so a key that named a function's globals dict
(`Namespace(f.__globals__)`) held it strongly. The namespace of code made with `exec` (sympy's
`lambdify`, a templated kernel) is the function's own, and holds the function: the memo's entry
for the function (and the registry's, keyed by the function's key) then kept it alive for good,
and the weak reference that drops the entry when the function dies never fired.

A `Handle` stands for such a dict instead. It holds weak references to objects whose life
implies the dict's (the functions whose `__globals__` it is, which cannot be reassigned; the
module whose `__dict__` it is), and `handle` hands it out for the dict only while one of them
lives. So while a handle says "alive", the dict at that `id()` is the very one it was made for,
and a later dict that reuses a dead one's `id()` gets a new handle, equal to no older one (the
contract's rule for identity keys). A dict whose every witness died while it lives gets a new
handle too: another key for the same dict, which costs a recompile, never a wrong answer.
"""

import sys
import types
import weakref
from typing import Any


class Handle:
    """Stands for one globals dict in a key (compared by identity) and in a weak watch."""

    __slots__ = ("_id", "_refs", "_module", "__weakref__")

    def __init__(self, i: int, module: bool):
        self._id = i
        # `id(witness)` -> a weak reference to it (a function, or the module, whose dict it is).
        self._refs: dict[int, weakref.ref] = {}
        self._module = module

    def get(self) -> dict | None:
        """The dict, or `None` once no object that implies it lives."""
        # A copy: a witness's death (in another thread) edits the dict.
        for ref in tuple(self._refs.values()):
            owner = ref()
            if owner is not None:
                return _MODULE_DICT.__get__(owner) if self._module else owner.__globals__
        return None

    def _add(self, owner: Any) -> None:
        i = id(owner)
        old = self._refs.get(i)
        if old is None or old() is not owner:
            self._refs[i] = weakref.ref(owner, _dropper(weakref.ref(self), i))


def _dropper(handle: "weakref.ref[Handle]", i: int) -> Any:
    def dropped(ref: weakref.ref, handles: dict = _handles) -> None:
        # `handles` is bound as a default: at interpreter exit, module globals may be gone.
        h = handle()
        if h is None:
            return
        if h._refs.get(i) is ref:
            del h._refs[i]
        if not h._refs and handles.get(h._id) is h:
            del handles[h._id]

    return dropped


# `id(dict)` -> the live handle of that dict: one entry per globals dict with a live witness.
_handles: dict[int, Handle] = {}


def handle(f: types.FunctionType) -> Handle:
    """The handle of `f.__globals__`, with `f` (or the module whose dict it is) as a witness."""
    d = f.__globals__
    i = id(d)
    h = _handles.get(i)
    if h is not None and h.get() is d:
        if not h._module:
            h._add(f)
        return h
    module = _module_of(d)
    h = Handle(i, module is not None)
    if module is not None:
        h._add(module)
    else:
        h._add(f)
        # The dict's own functions witness it too (the `make` of a `make(2.0)` that returns a
        # lambda, in code run with `exec`): a rebuilt lambda, whose predecessor died, then finds
        # the same handle, so its key equals the old one. Scanned once per handle.
        for g in tuple(d.values()):
            if type(g) is types.FunctionType and g.__globals__ is d:
                h._add(g)
    _handles[i] = h
    return h


def known(d: Any) -> Handle | None:
    """The live handle of the dict `d`, if a key made one (for `Watch.weak`), else `None`."""
    h = _handles.get(id(d))
    return h if h is not None and h.get() is d else None


def _module_of(d: dict) -> types.ModuleType | None:
    """The module in `sys.modules` whose `__dict__` is `d`, if any: a witness that lives as
    long as the module does (a module's functions come and go, rebuilt lambdas)."""
    name = d.get("__name__")
    m = sys.modules.get(name) if type(name) is str else None
    if isinstance(m, types.ModuleType) and _MODULE_DICT.__get__(m) is d:
        return m
    return None


_MODULE_DICT: Any = vars(types.ModuleType)["__dict__"]
