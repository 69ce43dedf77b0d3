"""A pytest plugin that counts the cyclic garbage collector's work over a run (issue 19, lineax's
selection under the swap): collections and seconds by generation, objects collected, and the
objects tracked at the end, written to stderr when the session ends. Collections are a count
that load does not change: a run that keeps more short-lived objects alive past a collection
(or makes many more) shows it here. Load it with `-p _gc_plugin` and `benchmarks` on
`PYTHONPATH`."""

import gc
import sys
import time


_start = [0.0]
_seconds = [0.0, 0.0, 0.0]
_collections = [0, 0, 0]
_collected = [0, 0, 0]


def _callback(phase, info):
    if phase == "start":
        _start[0] = time.perf_counter()
        return
    generation = info["generation"]
    _seconds[generation] += time.perf_counter() - _start[0]
    _collections[generation] += 1
    _collected[generation] += info["collected"]


gc.callbacks.append(_callback)


def pytest_sessionfinish(session):
    del session
    sys.stderr.write(
        f"\ngc: {sum(_seconds):.2f} s, by generation {[round(s, 2) for s in _seconds]} s, "
        f"collections {_collections}, collected {_collected}, "
        f"tracked at the end {len(gc.get_objects())}\n"
    )
