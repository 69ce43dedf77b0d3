"""Answers of the differential harness: how two answers are compared (structure, shape, dtype,
values), how an answer or a crash is described, and how long a call may take."""

import contextlib
import signal
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import jax.tree_util as jtu
import numpy as np


# A hang (a cyclic `__wrapped__`, a deep structure) must fail the test, not stall the suite.
CALL_SECONDS = 6.0


class CallTimeout(BaseException):
    """A `BaseException`, so that no `except Exception` fallback on the way swallows it."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raises `CallTimeout` in the block after `seconds` (main thread only: `SIGALRM`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise CallTimeout(f"no answer after {seconds} s (a hang)")

    old = signal.signal(signal.SIGALRM, _raise)
    # Fires again every second, in case a bare `except:` on the way swallows the first one.
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def describe(tree: Any) -> str:
    """An answer as values and dtypes, for a failure message."""
    try:
        return repr(
            jtu.tree_map(lambda a: (np.asarray(a).tolist(), str(np.asarray(a).dtype)), tree)
        )
    except Exception as e:  # noqa: BLE001
        return f"<unprintable: {type(e).__name__}>"


def same(a: Any, b: Any) -> bool:
    """Same pytree structure, and leaf by leaf the same shape, dtype and (close) values."""
    leaves_a, tree_a = jtu.tree_flatten(a)
    leaves_b, tree_b = jtu.tree_flatten(b)
    if tree_a != tree_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.dtype.kind in "fc":
            if not np.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def where(e: BaseException) -> str:
    """The deepest frame of the traceback in eqxstable or Equinox: whose crash it is."""
    where = "?"
    for frame in traceback.extract_tb(e.__traceback__):
        for package in ("eqxstable", "equinox"):
            if f"/{package}/" in frame.filename:
                where = f"{package}/{frame.filename.split(f'/{package}/')[-1]}:{frame.lineno}"
    return where
