"""What the observer keeps: a `Frame` per `equinox.filter_jit` call running now (per thread), and
a `CacheState` per Equinox wrapper (found by `anchor_of`), with its row and its shadow."""

import threading
from typing import Any

from ._predict import ShadowWrapper
from ._record import Record


class Frame:
    """One `equinox.filter_jit` call that is running now in this thread."""

    __slots__ = (
        "traced",
        "compiled",
        "compile_seconds",
        "trace_seconds",
        "lowering",
        "probe",
        "inputs",
        "out",
    )

    def __init__(self, lowering: bool = False, probe: bool = False):
        self.traced = False
        self.compiled = False
        self.compile_seconds = 0.0
        self.trace_seconds = 0.0
        self.lowering = lowering
        # A frame of `_reuse.probe`: a trace now would run the script's function again.
        self.probe = probe
        # For a call that may be its entry's first trace: the fingerprint's input part, and
        # what the call returned.
        self.inputs: Any = None
        self.out: Any = None


class Stack(threading.local):
    frames: list[Frame]

    def __init__(self):
        self.frames = []


class CacheState:
    """Per Equinox wrapper (one `equinox.filter_jit(fun)`, and its copies as a pytree): its
    record, and the stable wrapper that `--stabilize` would put in its place, as the prediction
    sees it."""

    __slots__ = ("anchor", "record", "shadow", "replaced", "fresh")

    def __init__(self, anchor: Any, record: Record, shadow: ShadowWrapper | None, replaced: bool):
        # Held so that the `id` this state is filed under stays this wrapper's.
        self.anchor = anchor
        self.record = record
        self.shadow = shadow
        self.replaced = replaced
        self.fresh = True


def anchor_of(jit_wrapper: Any) -> Any:
    """What identifies one `equinox.filter_jit(fun)` and its copies: the static part of the
    function it made (a static field, kept by every copy). Not its `jax.jit` object (`_cached`):
    Equinox shares that between every callable that is not a plain function and has the same
    name (all `Linear` modules, all partials of one function)."""
    anchor = getattr(jit_wrapper, "_static_fun", None)
    return anchor if anchor is not None else getattr(jit_wrapper, "_cached", jit_wrapper)
