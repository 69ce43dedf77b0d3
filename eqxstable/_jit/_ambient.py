"""The ambient Python state that library code reads while a function is traced, and that neither
JAX nor the keys of the function's objects see: NumPy's error state (`np.errstate`,
`np.seterr`), NumPy's print options (`np.set_printoptions`: the text of `repr(array)`), and
Python's warning filters (`warnings.simplefilter("error")`, as `pytest -W error` sets them; a
NumPy `RuntimeWarning` or JAX's own trace-time warnings then raise).

A constant folded while tracing (`np.log(np.float64(-1.0))`) depends on it: traced under
`np.errstate(invalid="raise")` it raises, under the default it is NaN. `equinox.filter_jit` keys
functions by identity, so an equivalent rebuilt function is traced again under the state of its
call; the stable cache shares one program between equivalent functions, so the state is part of
the key wherever a function or a call's static objects are keyed anew (`_fun.static_key`, the
slow path of `Cache.lookup`), never of the hit path: the same objects called again under another
state are served the program they traced, as `equinox.filter_jit` serves its own cache.

What is keyed: the values of `np.geterr()` (and the `np.geterrcall()` object where some mode is
`"call"`), of `np.get_printoptions()` (an option that is no plain value, a `formatter` dict, by
its `stable_key`), and the contents of `warnings.filters` (equal filters installed afresh, as by
each test's `warnings.catch_warnings`, are one state). Not keyed: which warnings were already
shown once (`__warningregistry__`) and `warnings.showwarning` (a `catch_warnings(record=True)`
block's list): a trace that only warns is served without warning again.

A miss keyed anew under another state than an earlier equal call says which state changed
(`ambient_reason`, for `_explain.diff`): nothing else differs from that call.
"""

import warnings
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .._keys import stable_key
from .._keys._per_class import type_ids


_PLAIN = type_ids((int, float, str, bool, type(None)))


def _value(x: Any) -> Hashable:
    if id(type(x)) in _PLAIN:
        return (type(x), x)
    return stable_key(x)


def ambient() -> Hashable:
    """The state now (a few microseconds: only where objects are keyed anew, never on a hit)."""
    err = np.geterr()
    errors = tuple(err.items())
    if "call" in err.values():
        errors += (stable_key(np.geterrcall()),)
    printing = tuple((k, _value(v)) for k, v in np.get_printoptions().items())
    return (errors, printing, tuple(warnings.filters))


# The parts of `ambient()`, in its order, by what a user sets them with.
_PARTS = (
    "NumPy's error state (`np.errstate`, `np.seterr`)",
    "NumPy's print options (`np.set_printoptions`)",
    "the warning filters (`warnings.simplefilter`, `catch_warnings`, `pytest -W` or "
    "`filterwarnings`)",
)


_MSG_AMBIENT = (
    "first call of `{name}` under this ambient state ({changed}): the function or a static "
    "argument is a new object, equivalent to one an earlier call passed, and a new object is "
    "keyed with the state a trace reads (a constant NumPy folds, a warning that raises), which "
    "differs from that call's, so it was traced again; pass the same objects every call (build "
    "them once, outside the loop), which are served their program under any state as by "
    "`equinox.filter_jit`, or set the state once around all the calls."
)


def ambient_reason(equal: Sequence[Any], new: Any, name: str) -> str:
    """Why a call of `name` with signature `new` traced, where it differs from the earlier
    signatures `equal` (latest first: `_signature.Signature`s nothing differs from) only in the
    ambient state: the reason, naming what changed from the closest of them under the same JAX
    configuration; `""` if none, or if one has the same state too (then it is not the cause)."""
    best = ""
    for old in equal:
        if not _same(old.config, new.config):
            continue
        if old.ambient == new.ambient:
            return ""
        changed = describe_ambient(old.ambient, new.ambient)
        if changed and (not best or changed.count(";") < best.count(";")):
            best = changed
    return _MSG_AMBIENT.format(name=name, changed=best) if best else ""


def _same(a: tuple, b: tuple) -> bool:
    try:
        return bool(a == b)
    except Exception:  # A configuration value whose `==` is no bool.
        return False


def describe_ambient(old: Hashable, new: Hashable) -> str:
    """What differs between two `ambient()` states, in words (`""` where nothing does): each
    changed part with its first changes, as `invalid 'warn' -> 'raise'`."""
    if not (isinstance(old, tuple) and isinstance(new, tuple)) or len(old) != len(new):
        return ""
    changed = []
    for part, a, b in zip(_PARTS, old, new):
        if a == b:
            continue
        what = _filters_change(a, b) if part is _PARTS[2] else _values_change(a, b)
        changed.append(f"{part}{': ' + what if what else ''}")
    return "; ".join(changed)


def _values_change(old: tuple, new: tuple) -> str:
    pairs = [x for x in zip(old, new) if isinstance(x[0], tuple) and isinstance(x[1], tuple)]
    shown = [
        f"{a[0]} {_shown(a[1])} -> {_shown(b[1])}"
        for a, b in pairs
        if len(a) == len(b) == 2 and a[0] == b[0] and a[1] != b[1]
    ]
    return ", ".join(shown[:3]) + (", ..." if len(shown) > 3 else "")


def _shown(value: Any) -> str:
    # A print option is `(type, value)` for a plain value (`_value`), else a key: not shown.
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], type):
        return repr(value[1])
    return repr(value) if isinstance(value, str) else "another value"


def _filters_change(old: tuple, new: tuple) -> str:
    added = [f for f in new if f not in old]
    removed = [f for f in old if f not in new]
    words = [f"{_filter(f)} added" for f in added[:2]]
    words += [f"{_filter(f)} removed" for f in removed[:2]]
    if len(added) + len(removed) > len(words):
        words.append("...")
    return ", ".join(words) if words else "reordered"


def _filter(f: Any) -> str:
    try:
        action, message, category, module, _ = f
    except (TypeError, ValueError):
        return repr(f)
    text = f"{action!r} for {getattr(category, '__name__', category)}"
    if message is not None:
        text += f" matching {getattr(message, 'pattern', message)!r}"
    if module is not None:
        text += f" in {getattr(module, 'pattern', module)!r}"
    return text
