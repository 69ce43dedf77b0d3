"""Verify mode: every hit is traced again and compared with the program it reuses.

The keys take installed packages and the standard library as constants, and read a function's
globals from its bytecode. A user who monkeypatches a library function, or reads globals through
`globals()[name]`, breaks those assumptions silently. Verify mode checks them, call by call: when
a program is compiled its jaxpr is recorded (from JAX's own trace cache, so the function is not
run again), and every later call that reuses it traces the call's own objects to a jaxpr with
`jax.make_jaxpr` and compares the two. A difference raises `es.StaleProgramError`. So do the
output's non-array leaves (a `Mixed`'s, `_outputs.py`), which a hit returns from the program's
trace: each is compared with the one this trace returned (`_static_outputs`).

It is on for a wrapper made with `verify=True`, for every wrapper when `EQXSTABLE_VERIFY=1` is
in the environment, and under `pytest --eqxstable-verify`. It costs a trace per call: a check for
tests, not for production.

A wrapper made with `verify=None` (the default) follows the switch `ON` on every call, not only
when it is made: `pytest --eqxstable-verify` turns it on (`switch_on`) after the rootdir
`conftest.py` may have made wrappers already, and those are verified too. The hit path reads it
as a module attribute, so following it costs no call.
"""

import os
import threading
import warnings
from typing import Any

import jax
import jax.tree_util as jtu
import numpy as np

from .._errors import StaleProgramError
from .._keys import stable_key
from .._keys._jaxpr import jaxpr_key
from ._fingerprint import param_key, TRACE_ONLY
from ._outputs import Mixed, put_back
from ._token import Detach, real_token


MSG_STALE = (
    "`{name}` reused a compiled program that no longer matches what the call computes (verify "
    "mode): traced again with the objects of this call, its jaxpr differs from the one the "
    "program was compiled from, at `{path}`: {what}. Something the trace reads changed in a way "
    "its key does not see (a library function monkeypatched, a global read through `globals()`, "
    "an object changed through a C extension). Pass what changes as an argument, or call "
    "`es.clear_caches()` after the change."
)


MSG_STALE_OUTPUT = (
    "`{name}` reused a compiled program whose output no longer matches what the call returns "
    "(verify mode): traced again with the objects of this call, its non-array output at "
    "`{path}` is {new}, where the program returns {old} from its trace. Something the trace "
    "reads changed in a way its key does not see (library state, a global read through "
    "`globals()`). Pass what changes as an argument, or call `es.clear_caches()` after the "
    "change."
)


def _from_environment() -> bool:
    return os.environ.get("EQXSTABLE_VERIFY", "") not in ("", "0")


# Whether every wrapper made with `verify=None` verifies its hits: read from the environment when
# the jit layer is imported, and turned on by the pytest plugin (`switch_on`).
ON: bool = _from_environment()


def switch_on() -> None:
    """Verify mode for every wrapper that was not made with `verify=False`, those made already
    included (`pytest --eqxstable-verify`)."""
    global ON
    ON = True


def enabled(flag: bool | None) -> bool | None:
    """A new wrapper's `verifying`: its own `verify=` flag; else `True` where the environment
    asks for verify mode now (a wrapper made under `EQXSTABLE_VERIFY=1` stays verified); else
    `None`, which follows `ON` call by call."""
    if flag is not None:
        return flag
    return True if _from_environment() else None


def served() -> bool:
    """Whether the call just made ran a compiled program, so that there is one to check. Under
    `jax.disable_jit()` JAX runs the function as it is, every call, as Equinox's `filter_jit`
    does then: nothing was compiled or served, so nothing can be stale, and tracing it again
    (what verify mode does on a hit) would be a trace that normal mode never makes."""
    return not jax.config.jax_disable_jit  # pyright: ignore[reportAttributeAccessIssue]


def _fingerprint(closed: Any) -> tuple[Any, str, tuple]:
    """The jaxpr by value, as a miss compares it with the compiled programs
    (`_fingerprint.param_key`), with its text and constants. Where either of two jaxprs cannot be
    keyed by value, their texts and constants are compared (so the constants are read for both:
    one trace may be keyable where the other is not)."""
    consts = []
    for c in closed.consts:
        try:
            consts.append((str(c.dtype), tuple(c.shape), bytes(jax.device_get(c).tobytes())))
        except Exception:
            consts.append((type(c).__name__, id(c)))
    return jaxpr_key(closed, param_key, TRACE_ONLY), str(closed.jaxpr), tuple(consts)


def _same(expected: tuple, actual: tuple) -> bool:
    if expected[0] is not None and actual[0] is not None:
        return expected[0] == actual[0]
    return expected[1:] == actual[1:]


def _avals(donated: list, kept: list, fun_dynamic: list) -> tuple:
    """What JAX keys a jitted function's programs by: the arguments' types and shardings, and
    its trace context (x64, matmul precision, ...: one entry holds a program for each)."""
    avals = tuple(
        (jax.typeof(x), getattr(x, "sharding", None)) if hasattr(jax, "typeof") else repr(x)
        for x in (*donated, *kept, *fun_dynamic)
    )
    return avals, _trace_context()


def _trace_context() -> Any:
    try:
        from jax._src.config import trace_context
    except ImportError:  # pragma: no cover - moved: the entry's last trace is compared.
        return None
    return trace_context()


# Where a JAX gives no output tree: the non-array outputs are not compared.
_UNKNOWN = object()


def record(
    program: Any,
    entry: Any,
    donated: list,
    kept: list,
    fun_dynamic: list,
    served_out: Any = _UNKNOWN,
    fun_template: Any = (),
) -> None:
    """After a miss: the jaxpr the program was compiled from, for these argument types, and the
    non-array output the call was served (`served_out`, where given: JAX's cached trace may be
    another function's whose program this one reuses, with outputs of its own; attack 14b-04)."""
    if not served():
        return
    token = real_token(entry.token, donated, kept, fun_dynamic)
    try:
        traced = token.jitted.trace(donated, kept, fun_dynamic, token)
    except Detach:
        # A guest whose target's trace JAX no longer caches: nothing recorded to compare with.
        return
    jaxprs = getattr(entry, "jaxprs", None)
    if jaxprs is None:
        jaxprs = entry.jaxprs = {}
    # `out_tree` is `_out_tree` on JAX 0.5.
    out_tree = getattr(traced, "out_tree", None) or getattr(traced, "_out_tree", None)
    if served_out is not _UNKNOWN:
        out = program.split_output(served_out, entry.template, fun_template)
        outputs = _static_outputs((Mixed, _flatten(out)) if type(out) is Mixed else None)
    else:
        outputs = _UNKNOWN if out_tree is None else _static_outputs(out_tree.node_data())
    jaxprs[_avals(donated, kept, fun_dynamic)] = (_fingerprint(traced.jaxpr), outputs)


def check(
    program: Any,
    wrapper: Any,
    entry: Any,
    donated: list,
    kept: list,
    fun_dynamic: list,
    served_out: Any = _UNKNOWN,
) -> None:
    """After a hit: trace the call's own objects and compare with the recorded jaxpr (and the
    output the call was served, where none was recorded yet)."""
    if not served():
        return
    jaxprs = getattr(entry, "jaxprs", None)
    if jaxprs is None:
        jaxprs = entry.jaxprs = {}
    avals = _avals(donated, kept, fun_dynamic)
    expected = jaxprs.get(avals)
    if expected is None:
        # Compiled before verify mode was on: what it was compiled from is the cached trace.
        record(program, entry, donated, kept, fun_dynamic, served_out, wrapper._fun_template)
        expected = jaxprs.get(avals)
        if expected is None:
            return

    returned = []

    def replay(donated: list, kept: list, fun_dynamic: list) -> Any:
        fun = program.rebuild_fun(wrapper._fun_template, fun_dynamic)
        args, kwargs = entry.rebuild(donated, kept)
        # As the program's body splits it, so that the same leaves are the call's own objects.
        out = program.split_output(fun(*args, **kwargs), entry.template, wrapper._fun_template)
        returned.append(out)
        return out

    actual = _retrace(replay, donated, kept, fun_dynamic)
    expected, outputs = expected
    if not _same(expected, actual):
        raise StaleProgramError(
            MSG_STALE.format(
                name=program.qualname, path=_path(wrapper, entry), what=_what(expected, actual)
            )
        )
    if outputs is _UNKNOWN:
        return
    out = returned[-1] if returned else None
    now = _static_outputs((Mixed, _flatten(out)) if type(out) is Mixed else None)
    stale = _stale_output(outputs, now)
    if stale is not None:
        raise StaleProgramError(MSG_STALE_OUTPUT.format(name=program.qualname, **stale))


def _retrace(replay: Any, donated: list, kept: list, fun_dynamic: list) -> tuple:
    """The fingerprint of the call traced again, without the trace's warnings: a hit runs no
    Python, so a warning the function gives while it traces (shown once, on its first call, as
    by `equinox.filter_jit`) is recorded and dropped, not shown again, nor raised by a
    `filterwarnings = error` the first trace did not run under. The filters stay as they are, so
    a trace that branches on them traces as it would now. Only where the trace raises a warning
    (an `"error"` filter) or NumPy's `FloatingPointError` (`np.errstate(...="raise")`) out of the
    function, so that traced afresh now it would compile nothing, is it traced once more with
    both only recorded, and that trace compared: the program computes what a trace does, and a
    raise is no computation to compare (a trace that catches the raise and computes something
    else is compared as it is, and a difference raises `StaleProgramError`).

    `warnings.catch_warnings` sets process-wide state, which two threads entering and leaving
    it out of order would leave wrong (warnings swallowed for good): one thread at a time does
    it, and a retrace while another thread's runs is made as it is (its warnings shown); never
    waited for, since a trace can wait on another thread's trace."""
    if not _quiet.acquire(blocking=False):
        return _fingerprint(jax.make_jaxpr(replay)(donated, kept, fun_dynamic))
    try:
        with warnings.catch_warnings(record=True):
            try:
                return _fingerprint(jax.make_jaxpr(replay)(donated, kept, fun_dynamic))
            except (Warning, FloatingPointError):
                pass
        quiet: dict[str, Any] = {
            k: "warn" if v in ("raise", "call") else v for k, v in np.geterr().items()
        }
        with warnings.catch_warnings(record=True), np.errstate(**quiet):
            warnings.simplefilter("always")
            return _fingerprint(jax.make_jaxpr(replay)(donated, kept, fun_dynamic))
    finally:
        _quiet.release()


# Held by the thread whose retrace records the warnings (`_retrace`); reentrant, for a wrapper
# verified inside another's retrace.
_quiet = threading.RLock()


def _flatten(out: Mixed) -> tuple:
    return (out.treedef, out.template, out.dyn_pos, out.sources, out.made)


def _static_outputs(node: Any) -> Any:
    """The non-array part of an output (from the root node of its tree: a `Mixed`'s node data),
    or `None` for an output of arrays only."""
    if node is None or node[0] is not Mixed:
        return None
    treedef, template, dyn_pos, sources = node[1][:4]
    return treedef, template, dyn_pos, sources


def _stale_output(old: Any, new: Any) -> dict | None:
    """Where the non-array output of the retrace (`new`) differs from the program's (`old`),
    with both values in words; `None` where none does. A leaf is the same when it is the same
    object, has the same `stable_key`, or is `==` with the same type (an object a trace makes
    afresh, which identity alone would key)."""
    if old is None and new is None:
        return None
    if old is None or new is None or old[0] != new[0] or old[2] != new[2]:
        what = "another structure"
        return {"path": "the output", "new": what, "old": "the traced one"}
    # Each with the leaves it takes from the inputs put back as the current call's objects (as
    # the program's output is served): a leaf one trace took from an input, and the other holds
    # as that very object, is the same output.
    treedef, old_leaves, new_leaves = old[0], _resolved(old), _resolved(new)
    for i, (a, b) in enumerate(zip(old_leaves, new_leaves)):
        if not _same_leaf(a, b):
            return {"path": _output_path(treedef, i), "new": _show(b), "old": _show(a)}
    return None


def _resolved(outputs: tuple) -> list:
    """The non-array output leaves, those taken from the inputs as the current call's objects."""
    leaves = list(outputs[1])
    if outputs[3]:
        try:
            put_back(leaves, outputs[3])
        except RuntimeError:  # No call to take them from: compared as recorded.
            pass
    return leaves


def _same_leaf(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        if stable_key(a) == stable_key(b):
            return True
    except Exception:
        pass
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _output_path(treedef: Any, i: int) -> str:
    try:
        paths = jtu.tree_flatten_with_path(treedef.unflatten(range(treedef.num_leaves)))[0]
        return "output" + jtu.keystr(paths[i][0])
    except Exception:
        return f"output leaf {i}"


def _show(x: Any) -> str:
    text = repr(x)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"`{text}` ({type(x).__name__})"


def _path(wrapper: Any, entry: Any) -> str:
    statics = [i for i, s in enumerate(entry.static_sel) if s]
    if not statics:
        return wrapper.name
    # The statics are what a key could have missed; name them all, the function first.
    return ", ".join([wrapper.name, *(f"leaf {i}" for i in statics)][:4])


def _what(expected: tuple, actual: tuple) -> str:
    if expected[1] != actual[1]:
        old = expected[1].splitlines()
        new = actual[1].splitlines()
        for a, b in zip(old, new):
            if a != b:
                return f"`{a.strip()}` became `{b.strip()}`"
        return f"{len(old)} lines became {len(new)}"
    if expected[2] == actual[2]:
        # The same text and constants: what differs is a value the text does not show exactly.
        return MSG_UNPRINTED
    return "the constants it captured have other values"


MSG_UNPRINTED = (
    "it prints the same, but a value it does not print exactly differs (a literal's bits, as a "
    "NaN's payload, or an equation's parameter)"
)
