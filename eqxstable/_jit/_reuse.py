"""A miss costs a trace, not a compile: a new cache entry whose trace produced a program that
is already compiled (the same fingerprint, `_fingerprint.py`) runs that program.

What `jax.jit` sees as its static argument is a `Token`, not the entry itself. Each entry gets a
token of its own at its first call, unless its trace's fingerprint finds a token whose program
was compiled from an equal trace: the entry then becomes a *guest* of that token, and its calls
are JAX's own cache hits for it (the C++ fast path, as every hit), with no lowering and no XLA
compile.

Sound by construction: a token with guests stands for one trace only, the one every guest
matched. JAX compiles under a token only what the token's traces produced, and a trace under a
token with guests that is not the matched one (a new shape, dtype, weak type or configuration;
a call from another wrapper's program, whose body this is not; or a guest's own call, which JAX
traces again once its caches were cleared) raises `Detach` before the
user's function runs: the calling entry then takes a token of its own and traces there. Only
calls outside every transformation look for a program to reuse (`_fingerprint.reusable`); a
transformation of a guest's call (a gradient) transforms the one jaxpr every guest matched,
rules included.
"""

import time
import warnings
import weakref
from typing import Any, TYPE_CHECKING

from ._accounting import Call, not_compiled, notify, settle_loaded
from ._fingerprint import fingerprint, reusable
from ._outputs import made_template, Mixed, shape_of
from ._pinned import runs_python
from ._runtime_error import _has_callback  # pyright: ignore[reportPrivateUsage]
from ._token import Detach, Guest, route, Split, Token


if TYPE_CHECKING:
    # Only for the annotations: both import this module.
    from ._program import Program
    from ._state import _State


# Tokens by the fingerprint of their one trace, across every program. Weak values: a token lives
# as long as an entry (or JAX's trace cache) holds it.
_by_fingerprint: "weakref.WeakValueDictionary[Any, Token]" = weakref.WeakValueDictionary()


# Seconds spent in the first calls that looked for a program to reuse, by stage (what
# `benchmarks/miss_cost.py` reports; lowering and XLA compile are JAX's own events).
timings = {"trace": 0.0, "fingerprint": 0.0, "compile": 0.0}


def clear() -> None:
    _by_fingerprint.clear()


def forget(program: Any) -> None:
    """After `program.cache_clear()`: no later miss finds the programs it compiled."""
    for fp, token in list(_by_fingerprint.items()):
        if token.program is program:
            _by_fingerprint.pop(fp, None)


def first_call(program: Any, call: Call, entry: Any, donated: list, kept: list, dyn: Any) -> Any:
    """The first call of a new entry: trace, fingerprint, and run the program compiled for an
    equal trace if there is one; else compile."""
    own = Token(program, entry)
    if not reusable(donated, kept, dyn):
        entry.token = own
        out = own.jitted(donated, kept, dyn, own)
        if call.committed:
            traced_program(program, entry, own, call.wrapper._state.parts, donated, kept, dyn)
        return out
    start = time.perf_counter()
    call.notify = False
    try:
        traced = own.jitted.trace(donated, kept, dyn, own)
    finally:
        call.notify = True
    traced_at = time.perf_counter()
    # An output object the trace made is each trace's own (`_outputs.py`): the fingerprint
    # reads its position, and the entry serves only the objects that traced it.
    made = made_template(traced.out_tree)
    fp = fingerprint(
        traced.jaxpr,
        shape_of(traced.out_tree),
        program.donated_args,
        program.options,
        donated,
        kept,
        dyn,
    )
    fingerprinted_at = time.perf_counter()
    stats = call.stats
    miss = call.miss if call.committed else None
    # A program that calls Python objects while it runs serves only those (`_pinned.py`): it is
    # neither reused for this trace nor offered to a later one.
    pinned = runs_python(traced.jaxpr)
    if pinned:
        fp = None
    # A wrapper that shows JAX's "donated buffers were not usable" (`donate="warn"`) compiles
    # its own: the warning is made while compiling, which a reused program skips (attack 15-03).
    shows = donated and not call.wrapper._state.filter_warning
    target = _by_fingerprint.get(fp) if fp is not None and not shows else None
    if target is not None and target.program is None:
        # Its program was collected while JAX's trace cache kept the token alive: nothing to
        # run (its `jitted` raised AttributeError); this entry's own token takes its place.
        _by_fingerprint.pop(fp, None)
        target = None
    if target is not None and target.traces == 1:
        entry.token = Guest(target, own, 1)
        target.guests += 1
        if miss is not None:
            call.amend(not_compiled(miss, target.compile_seconds, "reused"))
            stats.reused += 1
            program.cache.reused(entry)
        try:
            out = target.jitted(donated, kept, dyn, target)
        except Detach:
            # JAX traced again after all (its caches dropped the trace): compile our own.
            target.guests -= 1
            if miss is not None:
                call.amend(miss)
                stats.reused -= 1
                program.cache.reused(entry, False)
        else:
            if made is not None:
                program.cache.pin(entry, call.wrapper._state.parts, "output")
                if type(out) is Mixed:
                    # The target's program returns the target's objects: this entry's are its
                    # own trace's (`rebuilt`).
                    entry.remap = (out.template, made)
            _finish(program, call, entry, traced, start, traced_at, fingerprinted_at)
            return out
    entry.token = own
    offered = fp is not None and fp not in _by_fingerprint
    if offered:
        # Read before the call donates its buffers.
        own.route = route(donated, kept, dyn)
    before = stats.compile_seconds
    compile_start = time.perf_counter()
    out = own.jitted(donated, kept, dyn, own)
    timings["compile"] += time.perf_counter() - compile_start
    own.compile_seconds = stats.compile_seconds - before
    # JAX may have loaded the executable from its persistent compilation cache: no compile.
    settle_loaded(call)
    if offered:
        _by_fingerprint[fp] = own
    if pinned or made is not None:
        program.cache.pin(entry, call.wrapper._state.parts, "callback" if pinned else "output")
    _finish(program, call, entry, traced, start, traced_at, fingerprinted_at)
    return out


def _finish(program, call, entry, traced, start, traced_at, fingerprinted_at) -> None:
    if call.committed and call.miss is not None:
        notify(call.wrapper, call.miss)
    timings["trace"] += traced_at - start
    timings["fingerprint"] += fingerprinted_at - traced_at
    if _has_callback(traced.jaxpr.jaxpr):
        program.waits.add(entry)


def traced_program(
    program: Any, entry: Any, token: Token, parts: Any, donated: list, kept: list, dyn: Any
) -> None:
    """After a call traced `entry`'s program under `token` (its own): a program that can raise
    while it runs is waited for, and one that calls Python objects while it runs, or whose
    output holds objects its trace made (`_outputs.py`), is pinned to the objects this call
    traced (`_pinned.py`). Neither runs the function again: the jaxpr comes from JAX's trace
    cache. One it cannot give is taken to call Python."""
    traced = traced_of(token.program, token, donated, kept, dyn)
    jaxpr = None if traced is None else traced.jaxpr
    if traced is None or runs_python(jaxpr):
        program.cache.pin(entry, parts)
    elif made_template(out_tree(traced)) is not None:
        program.cache.pin(entry, parts, "output")
    if jaxpr is not None and _has_callback(jaxpr.jaxpr):
        program.waits.add(entry)


def out_tree(traced: Any) -> Any:
    """A `jax.stages.Traced`'s output tree: `out_tree`, or `_out_tree` on older JAX (0.5)."""
    tree = getattr(traced, "out_tree", None)
    return getattr(traced, "_out_tree", None) if tree is None else tree


def traced_of(program: Any, token: Any, donated: list, kept: list, dyn: Any) -> Any:
    """What the program just traced for `token` (from JAX's trace cache: the function is not
    run again), or `None` when it cannot be had."""
    try:
        return program.jitted.trace(donated, kept, dyn, token)
    except Exception:
        return None


def detached_token(program: Any, entry: Any, keeps: bool = False) -> Token:
    """A token of the entry's own, in place of a shared one (or none), and the entry's token
    from now on: that one alone, or, where `keeps` (the shared token still holds the trace the
    entry ran, `Detach.keeps`), a `Split` that still runs the shared trace for its input types.
    An entry that is a `Split` already keeps its own token alone: the shared one refused it."""
    token = entry.token
    kind = type(token)
    if kind is Split:
        if token.guest:
            token.target.guests -= 1
        entry.token = own = token.own
        return own
    if kind is Guest and token.own is not None:
        # The token of the entry's own first trace: JAX's trace cache may still hold that trace
        # (its objects, its rules), so a gradient of it is no second trace of the function.
        own = token.own
    else:
        own = Token(program, entry)
    if kind is Guest:
        target, guest = token.target, True
    elif kind is Token and token.guests:
        target, guest = token, False
    else:
        target = guest = None
    if keeps and target is not None and target.route is not None:
        entry.token = Split(target, own, bool(guest))
    else:
        if guest:
            target.guests -= 1  # pyright: ignore[reportOptionalMemberAccess]
        entry.token = own
    return own


def detached(
    program: Any, call: Call, entry: Any, donated: list, kept: list, dyn: Any, refused: Detach
) -> Any:
    """A call whose trace under a shared token was refused (`refused`): it runs under the
    entry's own token, and so do the entry's later calls, but for those that the shared token
    still serves (`detached_token`)."""
    own = detached_token(program, entry, refused.keeps)
    return own.jitted(donated, kept, dyn, own)


def slow_call(
    program: "Program", call: Call, entry: Any, donated: list, kept: list, dyn: Any, state: "_State"
) -> Any:
    """A call that is not a plain hit: the first call of an entry (which looks for a program
    compiled for an equal trace), or one whose donated buffers JAX may warn about."""
    if state.filter_warning:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable*")
            return _dispatch(program, call, entry, donated, kept, dyn)
    return _dispatch(program, call, entry, donated, kept, dyn)


def _dispatch(program: "Program", call: Call, entry: Any, donated: list, kept: list, dyn: Any):
    token = entry.token
    if token is None:
        return first_call(program, call, entry, donated, kept, dyn)
    try:
        return token.jitted(donated, kept, dyn, token)
    except Detach as refused:
        return detached(program, call, entry, donated, kept, dyn, refused)
