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
"""

import warnings
from collections.abc import Hashable
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
