"""One jitted program: the `jax.jit` of a body that rebuilds the call from an `Entry`, the cache
of entries, and the history of signatures that explains each miss.

Wrappers of equivalent functions (the same `stable_key`, the same options) share one program, so
`es.filter_jit(f)(x)` written inline does not recompile, as with `equinox.filter_jit`.
"""

import functools as ft
import weakref
from typing import Any

import equinox as eqx
import jax
import jax.tree_util as jtu

from .._caches import cache_clears
from .._keys import too_many_objects
from ._accounting import Call, current, live_wrappers, Miss, miss_listeners
from ._bind import Binder
from ._cache import Cache, Entry
from ._describe import describe_change
from ._fun import FunParts, static_key
from ._guards import check
from ._signature import _array_leaf, diff, Signature, signature, too_many_reason


_HISTORY_SEARCHED = 64
_MSG_UNEXPLAINED = (
    "`{name}` compiled for arguments nested too deeply to compare with earlier calls."
)


class Mixed:
    """An output with non-array leaves. It is a pytree node whose children are the array leaves
    and whose node data is the rest, so it travels through `jax.jit`, and JAX's unflattening of
    each call's result rebuilds the user's output directly (see `_rebuild`)."""

    __slots__ = ("dynamic", "treedef", "template", "dyn_pos")

    def __init__(self, dynamic, treedef, template, dyn_pos):
        self.dynamic = dynamic
        self.treedef = treedef
        self.template = template
        self.dyn_pos = dyn_pos


def _rebuild(spec: tuple, dynamic: Any) -> Any:
    treedef, template, dyn_pos = spec
    leaves = list(template)
    for i, x in zip(dyn_pos, dynamic):
        leaves[i] = x
    return treedef.unflatten(leaves)


jtu.register_pytree_node(Mixed, lambda m: (m.dynamic, (m.treedef, m.template, m.dyn_pos)), _rebuild)


def _split_output(out: Any) -> Any:
    """`out` itself when all its leaves are arrays (the usual case: JAX then rebuilds it with no
    Python of ours in the way), else a `Mixed`."""
    leaves, treedef = jtu.tree_flatten(out)
    mask = [eqx.is_array(x) for x in leaves]
    if all(mask):
        return out
    dynamic = [x for x, m in zip(leaves, mask) if m]
    template = tuple(None if m else x for x, m in zip(leaves, mask))
    return Mixed(dynamic, treedef, template, tuple(i for i, m in enumerate(mask) if m))


def _strip_wrappers(fun: Any) -> Any:
    seen = set()
    while id(fun) not in seen:  # `f.__wrapped__ = f` must not hang.
        seen.add(id(fun))
        if isinstance(fun, ft.partial):
            inner = fun.func
        else:
            inner = getattr(fun, "__wrapped__", None)
        if inner is None:
            return fun
        fun = inner
    return fun


def fun_names(fun: Any) -> tuple[str, str]:
    """The `__name__` and `__qualname__` that compile logs and profiles should show."""
    fun = _strip_wrappers(fun)
    try:
        return fun.__name__, fun.__qualname__
    except AttributeError:
        return type(fun).__name__, type(fun).__qualname__


class Program:
    """The jitted body of one function's static part with one set of options, and its cache.

    The function's arrays are arguments of the program (donated with the rest under
    `donate="all"`), so wrappers of modules that differ only in their weights share it."""

    def __init__(self, fun: Any, parts: FunParts, donate: str, jitkwargs: dict[str, Any], key):
        self.fun_treedef = parts.treedef
        self.fun_mask = parts.mask
        self.name, self.qualname = fun_names(fun)
        self.donate = donate
        self.jitkwargs = jitkwargs
        self.key = key
        self.cache = Cache(donate)
        self.bind = Binder(fun)
        # The signature of every call that compiled, oldest first: what a new miss is compared to.
        self.history: list[Signature] = []
        # The number of programs compiled since the last clear (`CacheInfo.currsize`).
        self.compiled = 0
        # Used only if JAX traces the body outside a call of a wrapper (it does not today).
        self.template = parts.template
        # The entries whose compiled programs can raise while they run: their calls wait.
        self.waits: set[Entry] = set()
        self.jitted = self._make_jitted()
        _all_programs.add(self)

    def rebuild_fun(self, template: tuple, fun_dynamic: Any) -> Any:
        """The function inside a trace: its arrays (traced) put back among its other leaves."""
        return FunParts(self.fun_treedef, self.fun_mask, template, ()).rebuild(fun_dynamic)

    split_output = staticmethod(_split_output)

    def clear(self) -> None:
        self.cache.clear()
        self.history.clear()
        self.compiled = 0
        self.waits = set()
        # A fresh `jax.jit` object drops JAX's compiled programs along with ours.
        self.jitted = self._make_jitted()

    def _make_jitted(self):
        def body(donated: list, kept: list, fun_dynamic: list, entry: Entry):
            call = current.call
            record = (
                call is not None and call.program is self and not call.lowering and not call.traced
            )
            explained = None
            if record:
                assert call is not None
                call.traced = True
                # Decide the miss and run the guards before the user's function is traced, so
                # that a refused recompilation costs nothing and leaves nothing half-made.
                explained = self._explain(call, entry)
                self._check(call, explained[0])
            # The calling wrapper's own function is traced, not the one this program was made
            # for: wrappers of equivalent functions share the program, and each checks on every
            # call that its function still has the key the program was made for.
            template = call.wrapper._fun_template if call is not None else self.template
            fun = self.rebuild_fun(template, fun_dynamic)
            args, kwargs = entry.rebuild(donated, kept)
            out = fun(*args, **kwargs)
            if explained is not None:
                assert call is not None
                self._commit(call, entry, *explained)
            return _split_output(out)

        # Compile logs and profiles show the user's function, not ours.
        body.__name__ = self.name
        body.__qualname__ = self.qualname
        # As `equinox.filter_jit`: every mode but "none" donates the function's own arrays too.
        donate_argnums = () if self.donate == "none" else (0, 2)
        return jax.jit(body, static_argnums=3, donate_argnums=donate_argnums, **self.jitkwargs)

    def _explain(self, call: Call, entry: Entry) -> tuple[Miss, Signature | None]:
        try:
            sig = signature(call.args, call.kwargs)
        except RecursionError:
            # A pytree nested deeper than Python's recursion limit: still compile, unexplained.
            sig = None
        if sig is not None and call.wrapper._dynamic:
            # The function's own arrays are arguments of the program too (`fun.weight`).
            fun_leaves = tuple(
                (f"fun{jtu.keystr(path)}", _array_leaf(x))
                for (path, x) in call.wrapper._array_paths()
            )
            sig = Signature(sig.leaves + fun_leaves, sig.nodes)
        rebound = call.wrapper._state.rebound
        if rebound is not None:
            reason = (
                f"{rebound}, so `{self.name}` was traced again instead of reusing the program "
                "compiled before the change; pass what changes as an argument instead."
            )
            return Miss("mutated", self.name, reason), sig
        mutated = getattr(entry, "mutated", None)
        if mutated is not None:
            index, old, new = mutated
            path = "(a static field)"
            if index is not None and sig is not None:
                path = sig.leaves[index][0]
            if too_many_objects(new):
                return Miss("identity", path, too_many_reason(path)), sig
            what = describe_change(old, new)
            reason = (
                f"`{path}` is the same object as before, but it was changed in place after it "
                f"was used ({what}), so it was traced again instead of reusing the program "
                "compiled before the change; "
                "pass what changes as an array argument, or keep it unchanged."
            )
            return Miss("mutated", path, reason), sig
        if sig is None:
            return Miss("first", "", _MSG_UNEXPLAINED.format(name=self.name)), None
        # The closest entry is searched among the latest signatures only, so that a function
        # with very many programs does not pay for all of them on each miss.
        return diff(self.history[-_HISTORY_SEARCHED:], sig, self.name), sig

    def _check(self, call: Call, miss: Miss) -> None:
        wrapper = call.wrapper
        check(
            self.name,
            miss,
            len(call.stats.misses),
            wrapper.max_traces,
            wrapper.on_recompile,
        )

    def _commit(self, call: Call, entry: Entry, miss: Miss, sig: Signature | None) -> None:
        if sig is not None:
            self.history.append(sig)
        self.compiled += 1
        call.stats.misses.append(miss)
        call.committed = True
        for listener in miss_listeners:
            listener(call.wrapper, miss)
        entry.mutated = None
        # What the function changed while it was traced (a `nonlocal` trace counter, say) is
        # part of this program, not a change after it: look again from here on.
        self.cache.rekey(entry)

    def untraced_miss(self, call: Call) -> None:
        """A compilation without a trace (a new input sharding, or a program `.lower()`ed before
        its first call): explained, guarded and recorded here, before XLA compiles."""
        miss, sig = self._explain(call, call.entry)
        self._check(call, miss)
        self._commit(call, call.entry, miss, sig)


_all_programs: "weakref.WeakSet[Program]" = weakref.WeakSet()
# Programs by the key of what they are compiled for (`static_key`: the function without its
# arrays, and the options), shared by every wrapper of an equivalent function until
# `es.clear_caches()`, as `equinox.filter_jit` shares its compiled programs; the key covers
# everything the function's trace can read. Also by the key a function has after a trace that
# changed it (see `alias_program`).
_shared: dict[Any, Program] = {}


def _options(jitkwargs: dict[str, Any]) -> tuple:
    return tuple(sorted(jitkwargs.items()))


def get_program(fun: Any, parts: FunParts, donate: str, jitkwargs: dict[str, Any]) -> Program:
    """The program for `fun` (split into `parts`) with these options, shared by every wrapper of
    an equivalent function."""
    key = static_key(fun, parts, donate, _options(jitkwargs))
    program = _shared.get(key)
    if program is None:
        program = _shared[key] = Program(fun, parts, donate, jitkwargs, key)
    return program


def alias_program(program: Program, fun: Any, parts: FunParts) -> None:
    """After `fun` traced `program`: what a function changes in itself while traced (a
    `nonlocal` trace counter) is part of the program, so another wrapper of this function
    (`es.filter_jit(f)` or `es.filter_jit(m.method)` made again) reuses it. The key of what can
    change in place names it by identity (a rebound cell, a list), so an equivalent copy made
    elsewhere in the changed state, which never ran this trace, does not find it."""
    key = static_key(fun, parts, program.donate, _options(program.jitkwargs))
    if key != program.key:
        _shared.setdefault(key, program)


def _clear_all() -> None:
    for program in list(_all_programs):
        program.clear()
    _shared.clear()
    for wrapper in list(live_wrappers):
        wrapper._stats.clear()


cache_clears.append(_clear_all)
