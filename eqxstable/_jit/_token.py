"""What `jax.jit` sees as its static argument: an entry's `Token`, or the token of an entry that
runs a program traced for another (`Guest`), or for some input types only (`Split`).

A `Token` hashes by identity, so JAX's C++ cache compares it at C speed and keys the programs it
compiled under it by the input types (shapes, dtypes, weak types, shardings) and its trace
context. A token with guests stands for one trace only, the one every guest matched
(`Token.check`, `_reuse.py`).
"""

import itertools
import weakref
from typing import Any

import jax

from ._accounting import Call
from ._fingerprint import context, top_level


class Detach(Exception):
    """Raised when a call may not run, or trace, under a token shared with other entries.

    `keeps`: whether the token still holds the trace the calling entry ran (the call was refused
    for its new input types or configuration, or because a transformation runs), so that the
    entry may keep running it for the input types it was traced for (`Split`). `False` where that
    trace is gone (JAX traced it again, or dropped it)."""

    def __init__(self, keeps: bool):
        super().__init__(keeps)
        self.keeps = keeps


class Token:
    """JAX's static argument for the programs of one entry (and of its guests).

    Hashes by identity, so JAX's C++ cache compares it at C speed."""

    __slots__ = (
        "_program",
        "owner",
        "sig",
        "route",
        "traces",
        "guests",
        "compile_seconds",
        "__weakref__",
    )

    def __init__(self, program: Any, entry: Any):
        # Weak: JAX's caches hold the token (as a static argument, inside a treedef) for as
        # long as they hold the jitted body, and the body holds its program; a strong reference
        # here would keep every program, and what its key holds, alive for good.
        self._program = weakref.ref(program)
        # Weak: JAX's trace cache may keep a token alive after its entry is gone.
        self.owner = weakref.ref(entry)
        # The input types and configuration of the first trace under this token, and how many
        # traces it has had: a guest may join only a token with that one trace.
        self.sig: Any = None
        # The same, as a call's arrays give them before it runs (`route`): set for a token
        # offered to guests, so that an entry that ran it keeps running it for these types
        # once it needs a token of its own for others (`Split`).
        self.route: Any = None
        self.traces = 0
        self.guests = 0
        self.compile_seconds = 0.0

    @property
    def program(self) -> Any:
        return self._program()

    @property
    def jitted(self) -> Any:
        return self._program().jitted  # pyright: ignore[reportOptionalMemberAccess]

    def check(self, program: Any, call: Call | None, sig: Any) -> None:
        """Inside the body, before the user's function is traced under this token.

        A token with guests accepts only the trace its guests matched: its owner entry's own
        objects, with the same input types and configuration. A guest's call that JAX traces
        again (its caches were cleared) would trace the guest's objects, which the fingerprint
        matched only up to what lowering reads (a `custom_jvp`'s rule is left out), and file
        them as the owner's trace: it detaches instead."""
        if self.guests and (
            call is None
            or call.program is not program
            or call.entry is not self.owner()
            or sig != self.sig
        ):
            # For other input types the token still holds the trace every guest matched; for
            # the same ones JAX is tracing it again: it no longer held it.
            raise Detach(sig != self.sig)

    def traced(self, sig: Any) -> None:
        if not self.traces:
            self.sig = sig
        self.traces += 1


class Guest:
    """The token of an entry whose program is another entry's (`target`): outside every
    transformation its calls are the target's; under one (a gradient, `vmap`, an outer
    `jax.jit`) JAX would transform the target's jaxpr, whose rules for transformations (a
    `custom_jvp`'s) the fingerprint leaves out, so the entry detaches and traces its own.

    A guest runs only the program compiled from the one trace it matched: once the target's
    owner was traced again under the token (JAX dropped its trace, `jax.clear_caches()`, and
    the owner's call traced its own objects anew, which may read other state now), the guest
    detaches too, and its next call traces its own objects.

    `own` is the token of the entry's own first trace (the one whose fingerprint matched): the
    token it detaches to (`_reuse.detached_token`), so that JAX finds that trace in its trace
    cache and the user's function is not traced a second time for a gradient of a call it
    already traced (as under `equinox.filter_jit`, whose gradient reuses the jaxpr)."""

    __slots__ = ("target", "own", "program", "jitted")

    def __init__(self, target: Token, own: Token | None, matched: int):
        # `matched`: the target's trace count when its trace was compared, read once by the
        # caller (a count read again here could take in a trace the owner made since).
        self.target = target
        self.own = own
        self.program = target.program
        real = target.jitted

        def jitted(donated: list, kept: list, dyn: Any, _: Any) -> Any:
            if target.traces != matched:
                raise Detach(False)
            if not top_level():
                raise Detach(True)
            return real(donated, kept, dyn, target)

        self.jitted = jitted


class Split:
    """The token of an entry that ran a shared token's program (`target`: as a guest, or as its
    owner once guests joined) and then needed a token of its own (`own`) for other input types,
    or under a transformation.

    Calls with the input types and configuration of the shared trace, outside every
    transformation, still run the target's program: JAX's cache hits, no trace, no compile,
    where a token of its own alone would trace and compile them again. Every other call (and
    all of them, for a guest, once the target was traced again: `Guest`) runs `own`. Choosing is
    only a shortcut: a call of the target that JAX would trace is refused inside the trace
    (`Token.check`), and the entry then keeps `own` alone (`_reuse.detached`), so this never
    serves what `Guest` would not. Cost on each call: the input types read, one tuple compare.
    """

    __slots__ = ("target", "own", "guest", "program", "jitted", "token_for")

    def __init__(self, target: Token, own: Token, guest: bool):
        self.target = target
        self.own = own
        # Whether the entry counts among the target's guests (it is not its owner).
        self.guest = guest
        self.program = own.program
        real, mine, types = target.jitted, own.jitted, target.route
        # The owner's objects made every trace under the target: it may run them all.
        matched = target.traces if guest else None

        def to_target(donated: list, kept: list, dyn: Any) -> bool:
            return (
                (matched is None or target.traces == matched)
                and top_level()
                and route(donated, kept, dyn) == types
            )

        def jitted(donated: list, kept: list, dyn: Any, _: Any) -> Any:
            if to_target(donated, kept, dyn):
                return real(donated, kept, dyn, target)
            return mine(donated, kept, dyn, own)

        def token_for(donated: list, kept: list, dyn: Any) -> Token:
            return target if to_target(donated, kept, dyn) else own

        self.jitted = jitted
        self.token_for = token_for


def real_token(token: Any, donated: list, kept: list, dyn: Any) -> Token:
    """The token `jax.jit` sees for an entry's token, for a call with these arrays."""
    kind = type(token)
    if kind is Guest:
        return token.target
    if kind is Split:
        return token.token_for(donated, kept, dyn)
    return token


def trace_sig(donated: list, kept: list, fun_dynamic: list) -> tuple:
    """The input types of a trace (tracers inside the body) and JAX's configuration."""
    try:
        avals = tuple(x.aval for x in (*donated, *kept, *fun_dynamic))
        return (avals, context())
    except Exception:
        return (object(),)  # Equal to nothing: a token with guests detaches.


def route(donated: list, kept: list, fun_dynamic: list) -> tuple:
    """The input types of a call, read from its arrays before it runs (a JAX array holds its
    abstract value; a NumPy array's is made), and JAX's configuration: what `Split` chooses by."""
    try:
        return (tuple(map(_aval, itertools.chain(donated, kept, fun_dynamic))), context())
    except Exception:
        return (object(),)  # Equal to nothing: the entry's own token runs it.


def _aval(x: Any) -> Any:
    try:
        return x.aval
    except AttributeError:
        return jax.typeof(x)
