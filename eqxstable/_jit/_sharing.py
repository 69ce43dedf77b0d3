"""Which program a wrapper calls: the programs kept by key, shared by every wrapper of an
equivalent function, and how long they are kept.

A wrapper asks `get_program` for the program of its function's static part and options
(`_fun.program_key`); wrappers of equivalent functions get the same one, as `equinox.filter_jit`
shares its compiled programs, so `es.filter_jit(f)(x)` written inline does not recompile. A
function that changed itself while traced also finds the program under its new key, for the very
objects that traced it alone (`alias_program`). Programs that no live wrapper calls are kept a
while (`use`, `unuse`), within the bounds of `_lru.py`; `es.clear_caches()` and
`jax.clear_caches()` drop them.
"""

import weakref
from typing import Any

from .._caches import cache_clears
from . import _reuse
from ._accounting import live_wrappers
from ._aliases import Aliases
from ._fun import FunParts, program_key
from ._lru import LRU, sizes
from ._node_data import node_data
from ._program import _all_programs, _options, Program


# Programs by the key of what they are compiled for (`program_key`: the function without its
# arrays, the options, and the ambient state a trace reads), shared by every wrapper of an
# equivalent function, as `equinox.filter_jit` shares its compiled programs; the key covers
# everything the function's trace can read. Also by the key a function has after a trace that
# changed it (see `alias_program`). The least recently made or found are dropped beyond
# `sizes.programs`, and `jax.clear_caches()` or `es.clear_caches()` drops them all: a program
# then lives only as long as a wrapper that calls it, and goes, with everything its key holds (a
# closure's captured array), when the last one does.
_shared: LRU[Any, Program] = LRU(lambda: sizes.programs)
# The key a function has after a trace that changed it (see `alias_program`), for the very
# objects that traced it alone (the static template and node data), until they are keyed
# otherwise (`_aliases.py`).
_aliases = Aliases(lambda: sizes.programs)


def _forget(program: Program, _: Any = None) -> None:
    for key, found in _shared.items():
        if found is program:
            _shared.pop(key)
    _aliases.drop_target(program)


# The programs that no live wrapper calls, most recently released last: kept a while, so that
# `es.filter_jit(f)(x)` written inline (a new wrapper per call) finds its program again, but only
# the latest `sizes.released` of them, so that a sweep of dropped wrappers holds nothing more.
_released: LRU[Program, bool] = LRU(lambda: sizes.released, _forget)


def use(program: Program) -> None:
    """A wrapper (its shared state) calls `program` from now on."""
    program.users += 1
    _released.pop(program)
    program.cache.strengthen()


# Programs whose last wrapper may have gone: looked at by the next `get_program`, not at once,
# since a wrapper goes whenever the garbage collector runs (in the middle of any of these).
# Weakly: a program dropped from the registry meanwhile goes at once.
_maybe_released: "list[weakref.ref[Program]]" = []


def unuse(program: Program) -> None:
    """A wrapper that called `program` is gone, or calls another one now."""
    program.users -= 1
    if program.users <= 0:
        _maybe_released.append(weakref.ref(program))


def _release(keep: Program | None) -> None:
    kept = []
    while _maybe_released:
        ref = _maybe_released.pop()
        program = ref()
        if program is keep:
            # The program a new wrapper is about to call (`es.filter_jit(f)(reader, x)` written
            # inline): its entries keep their copies, so that a rebuilt static reader of the
            # same unchanged large array reuses the copy and its digest, checked in place. Looked
            # at again by the next `get_program`, should no wrapper call it after all.
            kept.append(ref)
        elif (
            program is not None
            and program.users <= 0
            and any(found is program for found in _shared.values())
        ):
            _released.set(program, True)
            # What only a live wrapper's calls need to check fast (a large array's copy) goes.
            program.cache.weaken()
    _maybe_released.extend(kept)


def get_program(fun: Any, parts: FunParts, donated_args: str, jitkwargs: dict[str, Any]) -> Program:
    """The program for `fun` (split into `parts`) with these options, shared by every wrapper of
    an equivalent function."""
    key = program_key(fun, parts, donated_args, _options(jitkwargs))
    program = _shared.get(key)
    if len(_aliases):
        # Only while some function has an alias (a trace counter): the node data walked once.
        data = _data(parts)
        if program is None:
            aliased = _aliases.get(key, parts.template, data)
            if aliased is not None:
                _release(aliased)
                return aliased
        # These objects are keyed `key` now: an alias they had stands for a state they left.
        _aliases.left(key, parts.template, data)
    if program is None:
        program = Program(fun, parts, donated_args, jitkwargs, key)
        _shared.set(key, program)
    _release(program)
    return program


def _data(parts: FunParts) -> list:
    return node_data(parts.treedef, list(parts.template))


def alias_program(program: Program, fun: Any, parts: FunParts) -> None:
    """After `fun` traced `program`: what a function changes in itself while traced (a
    `nonlocal` trace counter) is part of the program, so another wrapper of this function
    (`es.filter_jit(f)` or `es.filter_jit(m.method)` made again) reuses it. The key of what can
    change in place names it by identity (a rebound cell, a list), so an equivalent copy made
    elsewhere in the changed state, which never ran this trace, does not find it."""
    key = program_key(fun, parts, program.donated_args, _options(program.jitkwargs))
    if key != program.key and key not in _shared:
        # Only for these very objects: a function rebuilt over the same shared object (a list
        # the trace appends to) has this key too, but it never ran the trace, and traced now it
        # may compute something else (`x * len(shared)`).
        _aliases.set(key, program, parts.template, tuple(_data(parts)))
    elif len(_aliases):
        _aliases.left(key, parts.template, _data(parts))


def _clear_all() -> None:
    for program in list(_all_programs):
        program.clear()
    _shared.clear()
    _aliases.clear()
    _reuse.clear()
    _released.clear()
    for wrapper in list(live_wrappers):
        wrapper._stats.clear()


cache_clears.append(_clear_all)


class _JaxClear:
    """Registered with JAX's cache management, so that `jax.clear_caches()` (which drops every
    compiled program of JAX's) also drops the programs kept for reuse by key: those of dropped
    wrappers then go with everything their keys hold. The wrappers still alive keep theirs (JAX
    compiles them again at their next call; that miss is counted)."""

    def cache_clear(self) -> None:
        _shared.clear()
        _aliases.clear()
        _released.clear()

    def cache_info(self) -> Any:
        return (len(_shared), sizes.programs)

    def cache_keys(self) -> list:
        return list(_shared)


_jax_clear = _JaxClear()
try:
    from jax._src.util import register_cache

    register_cache(_jax_clear, "eqxstable: programs kept for reuse by key")
except Exception:  # A JAX without it: `es.clear_caches()` still drops them.
    pass
