"""Threads (issue 9, item 4): eight threads, each interning `lambda z: z - c` over its own loop
variable `c`, must never receive another thread's closure. A wrong result is counted, never
tolerated."""

import threading

import equinox as eqx
import jax.numpy as jnp
import numpy as np

import eqxstable as es

from ..helpers import run_racing


_THREADS = 8


def _run_threads(target) -> list[str]:
    errors: list[str] = []
    barrier = threading.Barrier(_THREADS)

    def body(t):
        try:
            barrier.wait()
            target(t, errors)
        except Exception as e:  # noqa: BLE001
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    run_racing([threading.Thread(target=body, args=(t,)) for t in range(_THREADS)])
    return errors


def test_interned_closures_over_each_threads_own_cell():
    es.clear_caches()
    calls = 1000

    def target(t, errors):
        for i in range(calls):
            c = float(i % 3)  # Every thread goes through the same few values, at its own pace.
            f = es.intern(lambda z: z - c)  # noqa: B023
            got = f(10.0)
            if got != 10.0 - c:
                errors.append(f"thread {t}, call {i}: {got} instead of {10.0 - c}")

    errors = _run_threads(target)
    assert not errors, f"{len(errors)} wrong of {_THREADS * calls}: {errors[:5]}"


def test_stable_modules_over_each_threads_own_cell_under_plain_filter_jit():
    """The same under plain `eqx.filter_jit`, with the lambda inside a `StableModule`."""
    es.clear_caches()

    class Net(es.StableModule):
        fn: object

    @eqx.filter_jit
    def run(net, x):
        return net.fn(x)

    x = jnp.array([10.0])

    def target(t, errors):
        for i in range(40):
            c = float(i % 2)
            net = Net(lambda z: z - c)  # noqa: B023
            got = float(run(net, x)[0])
            if got != 10.0 - c:
                errors.append(f"thread {t}, call {i}: {got} instead of {10.0 - c}")

    errors = _run_threads(target)
    assert not errors, f"{len(errors)} wrong: {errors[:5]}"


def test_one_stable_filter_jit_shared_by_threads():
    """One `es.filter_jit` wrapper called from eight threads with their own closures."""
    es.clear_caches()

    @es.filter_jit
    def run(fn, x):
        return fn(x)

    x = jnp.array([10.0])

    def target(t, errors):
        for i in range(40):
            c = float(i % 2)
            got = float(np.asarray(run(lambda z: z - c, x))[0])  # noqa: B023
            if got != 10.0 - c:
                errors.append(f"thread {t}, call {i}: {got} instead of {10.0 - c}")

    errors = _run_threads(target)
    assert not errors, f"{len(errors)} wrong: {errors[:5]}"
