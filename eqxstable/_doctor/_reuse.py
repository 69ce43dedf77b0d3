"""Which predicted misses would compile: the fingerprint of what Equinox's trace produced.

Under eqxstable's `filter_jit` a new cache entry traces, fingerprints the trace and runs a
program already compiled for an equal one (`eqxstable._jit._reuse`): a miss, but no compile.
The doctor cannot trace the script's function a second time (that would run the script's code
again: a trace counter would count it), so it fingerprints the trace Equinox just made of the
same call, with the jit layer's own pieces (`_jit._fingerprint`): the closed jaxpr by value, the
input arrays, JAX's trace context, the backend, and the output's structure with its non-array
parts. Equinox's jitted body asks JAX for its trace again (`Traced.jaxpr`), which JAX serves
from its trace cache; should it trace after all, the doctor's trace hook raises `Retraced`
before the script's function runs, and the miss is predicted to compile.

Equinox's trace differs from eqxstable's only in the order of its inputs (Equinox groups them by
first argument, function and other arguments) and in a constant output; the fingerprint holds
where each of eqxstable's inputs is among Equinox's, so two calls with equal fingerprints here
have equal ones there.
Where the fingerprint cannot be made (the call ran under a transformation, Equinox did not trace
it, a JAX without `Traced.out_tree`), the miss is predicted to compile, which is what eqxstable
does where it finds no program to reuse.
"""

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.tree_util as jtu

from .._jit import (
    FINGERPRINT_AVAILABLE,
    fingerprint_key_of,
    fingerprint_param_key,
    input_key,
    leaves_of_first_arg,
    Mixed,
    reusable,
    split_output,
    trace_context,
    TRACE_ONLY,
    tree_key,
)
from .._keys._jaxpr import jaxpr_key


class Retraced(Exception):
    """Raised by the doctor's trace hook while `probe` runs: JAX was about to trace the
    script's function again."""


def _equinox_order(jit_wrapper: Any, entry: Any, n_fun: int) -> list:
    # Equinox's jitted body takes two dicts, the donated one first, each flattened in the
    # order of its keys: "first" (the first argument's arrays), "fun", "rest".
    n_first = leaves_of_first_arg(entry.treedef)
    dynamic = [i for i, m in enumerate(entry.dyn_sel) if m]
    groups = {
        "first": [i for i in dynamic if i < n_first],
        "fun": [("fun", j) for j in range(n_fun)],
        "rest": [i for i in dynamic if i >= n_first],
    }
    donate_first = bool(getattr(jit_wrapper, "donate_first"))
    donate_rest = bool(getattr(jit_wrapper, "donate_rest"))
    donates = {"first": donate_first, "fun": donate_rest, "rest": donate_rest}
    return [x for d in (True, False) for g in sorted(groups) if donates[g] is d for x in groups[g]]


def inputs(
    jit_wrapper: Any, which: str, entry: Any, leaves: list, fun_arrays: list
) -> Hashable | None:
    """The input part of the fingerprint, taken before the call runs (a donated array loses
    its layout once the call ran); `None` where eqxstable would not look for a program to reuse.

    It holds the inputs as eqxstable's program takes them (`Entry.split`: donated, kept, then
    the function's arrays) and where each one is among the inputs of Equinox's jitted body, so
    that equal Equinox traces with equal fingerprints are equal eqxstable traces.

    **Arguments:**

    - `jit_wrapper`: Equinox's wrapper (its options decide how its inputs are ordered).
    - `which`: what eqxstable's program donates (`_predict.donated`), part of its fingerprint.
    - `entry`: the shadow cache entry of the call (`_predict.Decision.entry`).
    - `leaves`: the call's bound arguments, flattened (`Decision.leaves`).
    - `fun_arrays`: the function's own arrays.
    """
    donated, kept = entry.split(list(leaves))
    if not FINGERPRINT_AVAILABLE or not reusable(donated, kept, fun_arrays):
        return None
    try:
        stable = [*entry.donate_pos, *entry.keep_pos, *(("fun", j) for j in range(len(fun_arrays)))]
        position = {x: i for i, x in enumerate(_equinox_order(jit_wrapper, entry, len(fun_arrays)))}
        order = tuple(position[x] for x in stable)
        sizes = (len(donated), len(kept), len(fun_arrays))
        return (which, sizes, order, tuple(map(input_key, (*donated, *kept, *fun_arrays))))
    except Exception:
        return None


def probe(jit_wrapper: Any, args: tuple, kwargs: dict) -> Any:
    """The closed jaxpr of Equinox's trace of this call, from JAX's trace cache, or `None`.
    Run it only with the doctor's trace hook set to raise `Retraced`."""
    try:
        from equinox._jit import _preprocess  # pyright: ignore[reportPrivateUsage]

        info = (
            jit_wrapper._signature,
            jit_wrapper._dynamic_fun,
            jit_wrapper._static_fun,
            jit_wrapper.donate_first,
            jit_wrapper.donate_rest,
        )
        donated, kept, static = _preprocess(info, args, kwargs, return_static=True)  # pyright: ignore
        return jit_wrapper._cached.trace(donated, kept, static).jaxpr
    except (Exception, Retraced):
        return None


class OutputSpec(NamedTuple):
    """A call's output as the jit layer splits it (`split_output`): the positions of the leaves
    its trace made (`Mixed.made`: a `Log()`, a `set`), and `(output leaf, 0 or 1, input leaf)`
    for each leaf that is one of the call's static inputs (`Mixed.sources`)."""

    made: tuple = ()
    sources: tuple = ()


def output_spec(out: Any, call_template: Any, fun_template: Any) -> OutputSpec:
    """How eqxstable's program would split this output of Equinox's trace of the call (its
    non-array leaves are that trace's objects): `call_template` and `fun_template` are the
    call's and the function's static leaves (`Entry.template`, `FunParts.template`). An entry
    whose trace made objects is pinned to the objects that traced it (`Cache.pin`, "output"),
    as `_jit/_reuse.py` pins it."""
    try:
        split = split_output(out, call_template, fun_template)
    except Exception:  # pragma: no cover - taken to hold no objects of its trace's.
        return OutputSpec()
    if type(split) is not Mixed:
        return OutputSpec()
    return OutputSpec(split.made, split.sources)


def fingerprint(
    trace: Callable[[], Any], frame: Any, spec: OutputSpec = OutputSpec()
) -> Hashable | None:
    """The fingerprint of a call: `trace` gives the closed jaxpr (`probe`), `frame.inputs` is
    from `inputs`, `frame.out` what the call returned (its non-array parts are those of the
    trace), `spec` its `output_spec`. As the jit layer's (`shape_of`), the output's made
    objects are keyed by their place alone, and a static input returned by where it comes from.
    `None` where it cannot be made."""
    closed = trace()
    if closed is None:
        return None
    try:
        jaxpr = jaxpr_key(closed, fingerprint_param_key, TRACE_ONLY, {})
        if jaxpr is None:
            return None
        leaves, treedef = jtu.tree_flatten(frame.out)
        at: dict[int, Hashable] = {i: ("made",) for i in spec.made}
        at.update((i, ("input", kind, j)) for i, kind, j in spec.sources)
        parts = tuple(
            ("array",) if eqx.is_array(x) else at[i] if i in at else fingerprint_key_of(x)
            for i, x in enumerate(leaves)
        )
        return (
            jaxpr,
            frame.inputs,
            tree_key(treedef),
            parts,
            trace_context(),
            jax.default_backend(),
        )
    except Exception:
        return None


class ShadowToken:
    """As `eqxstable._jit._token.Token` (or a `Guest` of one, `target`): how many traces an
    entry's own program had, and how many other entries run (or ran) it."""

    __slots__ = ("traces", "guests", "target")

    def __init__(self, target: "ShadowToken | None" = None):
        self.traces = 1
        self.guests = 0
        self.target = target


def compiles(
    fingerprints: dict[Hashable, ShadowToken],
    tokens: dict[Any, ShadowToken],
    entry: Any,
    fingerprint: Callable[[], Hashable | None] | None,
    pinned: bool,
) -> bool:
    """Whether a predicted miss of `entry` compiles, as `eqxstable._jit._reuse` decides, and
    notes its token.

    Only an entry's first trace looks for a program compiled for an equal trace (`fingerprints`,
    as `_jit._reuse._by_fingerprint`) under a token that had that one trace; a later trace of a
    guest, or of a token with guests, detaches to a token of its own (`_jit._token.Split`). The
    entry keeps running the shared program for the types it ran it for (the shadow's `seen`
    keeps them), and a guest still counts as one: the shared token, traced once, stays the
    target of later equal traces. A `pinned` trace (one whose program calls Python while it
    runs, `_jit._pinned.runs_python`) neither runs another's program nor is offered to a later
    one, as `_jit._reuse.first_call` decides.

    **Arguments:**

    - `fingerprints`: the tokens by the fingerprint of their one trace, across every program.
    - `tokens`: the tokens of the program's entries (`_predict.ShadowProgram.tokens`).
    - `entry`: the entry of the miss.
    - `fingerprint`: makes the fingerprint of the call's trace (`fingerprint` above), or `None`.
    - `pinned`: whether the call's trace is pinned.
    """
    token = tokens.get(entry)
    if token is None:
        fp = fingerprint() if fingerprint is not None and not pinned else None
        target = fingerprints.get(fp) if fp is not None else None
        if target is not None and target.traces == 1:
            target.guests += 1
            tokens[entry] = ShadowToken(target)
            return False
        tokens[entry] = token = ShadowToken()
        if fp is not None:
            fingerprints.setdefault(fp, token)
    elif token.target is not None or token.guests:
        tokens[entry] = ShadowToken()
    else:
        token.traces += 1
    return True
