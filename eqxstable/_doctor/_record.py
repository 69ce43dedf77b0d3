"""`Record`: one row of the report, every Equinox wrapper of one function, and the name and place
of that function."""

from typing import Any

from .._jit import fun_names, Miss
from ._explain import AddedMiss, ObservedMiss, StaticHistory


class Record:
    """One row of the report: every Equinox wrapper of one function (several when equivalent
    functions were wrapped again, e.g. `eqx.filter_jit(lambda ...)` inside a loop)."""

    def __init__(self, name: str, location: str):
        self.name = name
        self.location = location
        self.caches = 0
        self.calls = 0
        self.misses: list[ObservedMiss] = []
        # Hits of Equinox's cache where eqxstable's `filter_jit` would have compiled.
        self.added: list[AddedMiss] = []
        # The misses eqxstable's `filter_jit` would have made, and the calls whose prediction
        # failed (then the prediction is incomplete, and the report says so).
        self.predicted: list[Miss] = []
        self.unpredicted = 0
        # Of the compiles they would make, those with no miss of their own (`Predictor.late`).
        self.late = 0
        # Of the misses it would make, those that run a program compiled for an equal trace.
        self.reused = 0
        # Of the misses it would make, the `.lower()`s that trace (no call of Equinox's row).
        self.lowered = 0
        # How many of its cache entries would be dropped for holding more programs than the
        # bound (`Cache.bound`): their calls trace again where Equinox serves them.
        self.dropped = 0
        self.compile_seconds = 0.0
        self.trace_seconds = 0.0
        self.history = StaticHistory()


def location(fun: Any) -> str:
    while True:
        inner = getattr(fun, "__wrapped__", None) or getattr(fun, "func", None)
        if inner is None or inner is fun:
            break
        fun = inner
    code = getattr(fun, "__code__", None)
    if code is None:
        return ""
    return f"{code.co_filename}:{code.co_firstlineno}"


def fun_name(fun: Any) -> str:
    return fun_names(fun)[1]
