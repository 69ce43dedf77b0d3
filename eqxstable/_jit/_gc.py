"""Python's cyclic garbage collector, paused while the jit layer does bounded bookkeeping that
makes many small objects (the keys and the description of a call with 100,000 static leaves)."""

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector for the block, and resumes it after if it ran before.

    The keys and the description of a call make a few small objects per static leaf, none of
    them garbage in a cycle, and each of them counts towards the next collection: a call with
    100,000 static leaves set off six full collections, each going through every object of the
    process (JAX's own included), which took most of its time. Nothing is lost: what is garbage
    is collected at the next collection after the block. Another thread pausing it at the same
    time only shortens the pause."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
