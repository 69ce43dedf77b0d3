"""What eqxstable's `filter_jit` would do with the calls an `equinox.filter_jit` receives.

The prediction is not a model of eqxstable written a second time: each call is looked up in the
jit layer's own `Cache` (the identity fast path, the mutation snapshots and the `stable_key`
slow path of the hit path), the jitted function is watched with the same `snapshot_mutables` /
`MutationCheck` that a stable wrapper keeps on its function, programs are shared between
equivalent functions by `stable_key` as `get_program` shares them, and a predicted miss is
explained with the same `signature`/`diff` as a real one. What is left to this file is JAX's part:
under one cache entry, a program per set of array types (shape, dtype, weak type, placement).

One rule is the contract's rather than today's code: after the jitted function changed (a global
it reads was rebound), the program is the one of the function's new `stable_key`, so rebinding a
global to an equivalent value is a hit. `tests/test_doctor_prediction.py` runs every example
both ways and checks that `--stabilize` does what was predicted.
"""

import itertools
from typing import Any, NamedTuple

from .._jit import diff, Miss, Signature, signature
from .._jit._cache import Cache, Entry
from .._jit._program import fun_names
from .._jit._signature import _array_leaf, ArrayLeaf
from .._keys import key_uses_identity, stable_key
from .._mutation import snapshot_mutables
from .._mutation_check import MutationCheck


# As `eqxstable._jit._program`: a miss is compared with the latest signatures only.
_HISTORY_SEARCHED = 64
# `ShadowWrapper.pair` once its calls used more than one (program, entry).
_MANY: Any = object()


class ShadowProgram:
    """One program of eqxstable's `filter_jit`, without the compiling: its cache of entries, the
    array types each entry was compiled for, and the signature of each compile."""

    __slots__ = ("cache", "seen", "history")

    def __init__(self):
        self.cache = Cache("none")
        self.seen: dict[Entry, set[tuple[ArrayLeaf, ...]]] = {}
        self.history: list[Signature] = []


class ShadowWrapper:
    """What a stable wrapper of one Equinox wrapper's function would hold: the watch on its
    function, its program, and what changed in the function since the last call."""

    __slots__ = ("fun", "options", "key", "check", "program", "rebound", "calls", "pair")

    def __init__(self, fun: Any, options: Any, key: Any, program: ShadowProgram):
        self.fun = fun
        self.options = options
        self.key = key
        self.program = program
        self.rebound: str | None = None
        self.calls = 0
        # The one (program, entry) every call used so far, or `_MANY`: while it is one, a call
        # that Equinox served from its cache was compiled for under that entry too.
        self.pair: Any = None
        self.resnapshot()

    def resnapshot(self) -> None:
        snapshot = snapshot_mutables(self.fun)
        self.check = None if snapshot is None else MutationCheck(snapshot)


class Decision(NamedTuple):
    """Where eqxstable's `filter_jit` would look one call up, decided before the call runs."""

    wrapper: ShadowWrapper
    program: ShadowProgram
    entry: Entry
    rebound: str | None


class Predictor:
    """The programs eqxstable would share between wrappers of equivalent functions (by the
    function's `stable_key`, as `get_program` shares them), and the per-call decisions."""

    def __init__(self):
        self.programs: dict[Any, ShadowProgram] = {}

    def wrapper(self, fun: Any, options: Any, key: Any) -> ShadowWrapper:
        """A shadow of a stable wrapper of `fun`; `key` is `stable_key((fun, options))`, or
        `None` when that key is by identity or `fun` holds arrays (then nothing is shared)."""
        return ShadowWrapper(fun, options, key, self._program(key))

    def _program(self, key: Any) -> ShadowProgram:
        if key is None:
            return ShadowProgram()
        program = self.programs.get(key)
        if program is None:
            program = self.programs[key] = ShadowProgram()
        return program

    def before(self, wrapper: ShadowWrapper, leaves: list, treedef: Any) -> Decision:
        """The program and entry of this call, as a stable wrapper finds them before calling
        JAX: it first checks whether its function changed since the last call."""
        check = wrapper.check
        rebound = None
        if check is not None:
            changed = check.changed()
            if changed is not None:
                if wrapper.key is not None:
                    key = stable_key((wrapper.fun, wrapper.options))
                    wrapper.key = None if key_uses_identity(key) else key
                wrapper.program = self._program(wrapper.key)
                wrapper.resnapshot()
                rebound = changed if wrapper.calls else None
        entry = wrapper.program.cache.lookup(leaves, treedef)
        return Decision(wrapper, wrapper.program, entry, rebound)

    def settle(self, decision: Decision, traced: bool) -> bool:
        """Notes that the call ran (`traced`: whether Equinox traced or compiled for it).
        Returns `True` when eqxstable surely hit too, without keying anything; else `miss`
        decides."""
        wrapper, program, entry, _ = decision
        wrapper.calls += 1
        pair = (program, entry)
        if wrapper.pair is None:
            wrapper.pair = pair
        elif wrapper.pair is not _MANY and wrapper.pair != pair:
            wrapper.pair = _MANY
        if traced:
            # What tracing changed in the function or its arguments (a trace counter) is part of
            # the program, not a later change: a stable wrapper looks again after its traces.
            wrapper.resnapshot()
            entry.resnapshot()
            return False
        # Equinox reused a program compiled for these array types, and every call of this
        # wrapper so far used this one entry: eqxstable compiled for them under it too.
        return entry in program.seen and wrapper.pair is not _MANY

    def miss(
        self,
        decision: Decision,
        leaves: list,
        args: tuple,
        kwargs: dict,
        sig: Signature | None,
    ) -> Miss | None:
        """The miss eqxstable's `filter_jit` would have made for this call, or `None` for a hit.

        **Arguments:**

        - `decision`: what `before` decided for this call (after `settle`).
        - `leaves`: the call's flattened arguments.
        - `args`, `kwargs`: the call's arguments (to explain a predicted miss).
        - `sig`: the call's `signature`, if already made.
        """
        _, program, entry, rebound = decision
        wrapper = decision.wrapper
        avals = tuple(map(_array_leaf, itertools.compress(leaves, entry.dyn_sel)))
        seen = program.seen.get(entry)
        if seen is None:
            seen = program.seen[entry] = set()
        if avals in seen:
            return None
        seen.add(avals)
        if sig is None:
            sig = signature(args, kwargs)
        miss = _explain(wrapper, program, entry, rebound, sig)
        program.history.append(sig)
        entry.mutated = None
        return miss


def _explain(
    wrapper: ShadowWrapper,
    program: ShadowProgram,
    entry: Entry,
    rebound: str | None,
    sig: Signature,
) -> Miss:
    # As `eqxstable._jit._program.Program._explain`, in the same order.
    name = _name(wrapper.fun)
    if rebound is not None:
        reason = (
            f"{rebound}, so `{name}` was traced again instead of reusing the program compiled "
            "before the change; pass what changes as an argument instead."
        )
        return Miss("mutated", name, reason)
    mutated = entry.mutated
    if mutated is not None:
        index, what = mutated
        path = sig.leaves[index][0] if index is not None else "(a static field)"
        reason = (
            f"{what}, so `{path}` was traced again instead of reusing the program compiled for "
            "its old contents; pass immutable values (tuples, frozen dataclasses) or arrays to "
            "avoid the retrace."
        )
        return Miss("mutated", path, reason)
    return diff(program.history[-_HISTORY_SEARCHED:], sig, name)


def _name(fun: Any) -> str:
    return fun_names(fun)[0]
