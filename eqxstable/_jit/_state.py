"""What a wrapper is besides its arrays: `_State`, which it shares with its copies (the program it
calls, its counters, the function's watch), and `_Aux`, its pytree node data (the function's
static part and the options), which carries the state in a slot that is no part of its `==`.

The state follows the function: a function changed after its wrapper was made (a closure cell
rebound, a global it reads reassigned, a module changed by force) gets the program of its new
key (`refresh`), and its next miss says what changed.
"""

import dataclasses
import functools as ft
from typing import Any, ClassVar, TYPE_CHECKING

import equinox as eqx

from .._keys import compute, stable_key, too_many_objects
from .._keys._fallbacks import TOO_MANY
from . import _verify
from ._accounting import Stats
from ._advice import rebound_advice
from ._describe import describe_change
from ._fun import FunParts, split_fun
from ._program import Program
from ._runtime_error import new_jit_id
from ._sharing import alias_program, get_program, unuse, use


class _State:
    """What a wrapper shares with its copies (made by unflattening it as a pytree, or by
    `copy.copy`): they are one jitted function, so they count, and recompile, together."""

    __slots__ = (
        "fun",
        "parts",
        "donated_args",
        "filter_warning",
        "jitkwargs",
        "verifying",
        "program",
        "fun_key",
        "fun_watch",
        "watching",
        "rebound",
        "stats",
        "jit_id",
        "aux",
        "names",
        "keys",
        "__weakref__",
    )

    def __init__(
        self, fun: Any, parts: FunParts, donated_args: str, filter_warning: bool, jitkwargs
    ):
        self.fun = fun
        self.parts = parts
        self.donated_args = donated_args
        self.filter_warning = filter_warning
        self.jitkwargs = jitkwargs
        self.stats = Stats()
        # The `__equinox_jit_id__` of this function's frames (see `_runtime_error.py`).
        self.jit_id = new_jit_id()
        # The key of each leaf (its path in the function), made when first asked for.
        self.keys: list | None = None
        # The function keyed first and its watch held while its program is looked up: a large
        # array it reads (`K-array-reached`) is then copied and hashed once, and the lookup's
        # key (and `resnapshot`) reuse that copy, checked in place; looked up first, the lookup
        # kept the copy nowhere, and the wrapper's own watch copied and hashed it again.
        self.fun_key, self.fun_watch = compute(fun)
        self.use(get_program(fun, parts, donated_args, jitkwargs), None)

    def use(self, program: Program, rebound: tuple[str, Any] | None) -> None:
        """Calls `program` from now on, with the function as it is now."""
        old = getattr(self, "program", None)
        if old is not program:
            use(program)
            if old is not None:
                unuse(old)
        self.program = program
        # What changed in the function, for the next miss: it is of kind "mutated".
        self.rebound = rebound
        self.resnapshot()

    def __del__(self) -> None:
        program = getattr(self, "program", None)
        if program is not None:
            unuse(program)

    def resnapshot(self) -> None:
        self.fun_key, self.fun_watch = compute(self.fun)
        # Whether a call must look at the function at all (the hit path reads only this).
        self.watching = bool(self.fun_watch) or self.rebound is not None

    def refresh(self) -> Program:
        """The program to call: the function itself may have changed since the last call (a
        closure cell rebound, a global it reads reassigned). An equal key keeps the program; a
        changed function gets the program of its new key, and its next miss says what changed."""
        if not self.fun_watch.valid():
            old = self.fun_key
            key, self.fun_watch = compute(self.fun)
            if key != old:
                self.resplit()
                program = get_program(self.fun, self.parts, self.donated_args, self.jitkwargs)
                rebound = None
                if self.stats.calls and too_many_objects(key):
                    # Nothing was rebound: its key equals nothing (`K-too-deep`), a miss of its
                    # own kind that names what it reaches.
                    rebound = (TOO_MANY, key)
                elif self.stats.calls:
                    # Before its first call, a wrapper has nothing stale to explain.
                    what = describe_change(old, key)
                    name = self.program.qualname
                    rebound = (
                        f"`{name}` had a value it reads rebound after it was used ({what})",
                        rebound_advice(old, key),
                    )
                self.use(program, rebound)
            else:
                # Something it reads was rebound to an equal value: a program that calls Python
                # objects while it runs may call the old ones (`_pinned.py`).
                self.program.cache.drop_pinned()
        elif self.rebound is not None:
            self.rebound = None
            self.watching = bool(self.fun_watch)
        return self.program

    def resplit(self) -> None:
        """After the function changed: a module changed by force (`object.__setattr__`) has
        other arrays or static fields than the wrapper took when it was made, and every call
        must run the function as it is now (a new `aux` tells the wrappers to take them)."""
        parts = split_fun(self.fun)
        if not _same_split(parts, self.parts):
            self.parts = parts
            self.keys = None
            aux = dataclasses.replace(self.aux, treedef=parts.treedef, template=parts.template)
            object.__setattr__(aux, "state", self)
            self.aux = aux

    def traced(self, program: Program) -> None:
        """After a call that traced `program`: what the function changed in itself while traced
        (a `nonlocal` trace counter) is not a change after the program was made.

        While the function's watch holds, nothing its key reads changed while it was traced:
        its key, and the key of its static part, are those it had when it was given `program`,
        so there is nothing new to file (keying a library's function again after every miss,
        and all it reaches, was a fifth of the keys' time on a client's test suite)."""
        if self.fun_watch.valid():
            return
        self.resnapshot()
        alias_program(program, self.fun, self.parts)


def _same_split(a: FunParts, b: FunParts) -> bool:
    return (
        a.treedef == b.treedef
        and len(a.template) == len(b.template)
        and all(x is y for x, y in zip(a.template, b.template))
        and len(a.dynamic) == len(b.dynamic)
        and all(x is y for x, y in zip(a.dynamic, b.dynamic))
    )


@dataclasses.dataclass(frozen=True, eq=False)
class _Aux:
    """A wrapper's pytree node data: the function's static part and the options.

    Two wrappers of equivalent functions with the same options have equal node data: `==` is
    `stable_key` equality (so `jax.jit` and the stable cache both see the same structure), and
    the counters are in `state`, a slot that is no dataclass field, so part of neither.
    """

    __slots__ = (
        "treedef",
        "template",
        "donate",
        "max_traces",
        "on_recompile",
        "jitkwargs",
        "verify",
        "state",
    )
    treedef: Any
    template: tuple
    donate: str
    max_traces: int | None
    on_recompile: str
    jitkwargs: tuple
    verify: bool | None

    if TYPE_CHECKING:
        # Set once, after `__init__`; a class variable to the type checker, so that it is no
        # dataclass field.
        state: ClassVar[_State]

    def __hash__(self) -> int:
        # Only what cannot change: the key of the function's static part can (a closure cell
        # rebound), and a hash must not.
        options = (self.donate, self.max_traces, self.on_recompile, self.jitkwargs, self.verify)
        return hash((self.treedef, *options))

    def __eq__(self, other: object) -> bool:
        # The key is computed afresh (it is memoised for functions while they are unchanged),
        # never cached here, so that a function changed in place is compared as it is now.
        return self is other or (type(other) is _Aux and stable_key(self) == stable_key(other))


# The user's donation mode (`donate=`) -> (`donated_args`: whose leaves a program donates, "all",
# "all-except-first" or "none"; whether "donated buffers were not usable" is hidden).
DONATE_MODES: dict[str, tuple[str, bool]] = {
    "all": ("all", True),
    "all-except-first": ("all-except-first", True),
    "warn": ("all", False),
    "warn-except-first": ("all-except-first", False),
    "none": ("none", False),
}


def new_state(
    fun: Any,
    donate: str,
    max_traces: int | None,
    on_recompile: str,
    jitkwargs: dict[str, Any],
    verify: bool | None = None,
) -> _State:
    """The state of a new wrapper of `fun` with these (already checked) options: its program,
    its node data (`_Aux`) and the names it copies from `fun`."""
    parts = split_fun(fun)
    donated_args, filter_warning = DONATE_MODES[donate]
    state = _State(fun, parts, donated_args, filter_warning, jitkwargs)
    # `True` or `False` decided now; `None` follows `_verify.ON`, which the hit path reads (a
    # module attribute, where reading the environment on every call would cost the hit path).
    state.verifying = _verify.enabled(verify)
    program = state.program
    options = tuple(sorted(jitkwargs.items()))
    aux = _Aux(parts.treedef, parts.template, donate, max_traces, on_recompile, options, verify)
    object.__setattr__(aux, "state", state)
    state.aux = aux
    # As `functools.update_wrapper`, but like `equinox.module_update_wrapper` without the
    # `__dict__` of a module, which holds its fields.
    names: dict[str, Any] = {}
    for name in ft.WRAPPER_ASSIGNMENTS:
        try:
            names[name] = getattr(fun, name)
        except AttributeError:
            pass
    if not isinstance(fun, eqx.Module):
        for name, value in getattr(fun, "__dict__", {}).items():
            names.setdefault(name, value)
    for name in ("_aux", "_dynamic", "__wrapped__"):
        names.pop(name, None)
    # A callable object (a module) has no names of its own: use those of its class.
    if "__name__" not in names:
        names["__name__"] = program.name
        names["__qualname__"] = program.qualname
    state.names = names
    return state
