"""The guards hold when threads miss at the same time (attack 11b-01): a miss is decided (counted
against `max_traces`, refused by `on_recompile="raise"`, explained) atomically per wrapper, while
another thread's decided miss is still being traced. Each race is forced, not hoped for: a trace
waits on an event until the call racing it has been decided."""

import queue
import threading
import warnings

import jax.numpy as jnp
import pytest

import eqxstable as es


_TIMEOUT = 60


class _Gate:
    """What a trace with `s == 0.0` (or every trace, with `hold_all`) does: signal that it
    started (`entered`), then wait until released. `fn` is the function to jit. Only C objects
    (locks, a `SimpleQueue`) are reached from it, whose state no key reads: the function keeps
    its key while they change."""

    def __init__(self, hold_all: bool = False):
        self.entered = threading.Lock()
        self.entered.acquire()
        self.release = threading.Lock()
        self.release.acquire()
        self.queue = queue.SimpleQueue()

        def gated(x, s, entered=self.entered, release=self.release, traced=self.queue):
            traced.put(s)
            if hold_all or s == 0.0:
                entered.release()
                assert release.acquire(timeout=_TIMEOUT)
                release.release()
            return x * s

        self.fn = gated

    @property
    def traced(self) -> list:
        out = []
        while not self.queue.empty():
            out.append(self.queue.get())
        return out

    def open(self) -> None:
        if self.release.locked():
            self.release.release()


def _start(fn, *args) -> tuple[threading.Thread, dict]:
    result = {}

    def run():
        try:
            result["out"] = fn(*args)
        except BaseException as e:
            result["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


@pytest.mark.counts_traces
def test_max_traces_counts_a_miss_still_being_traced_in_another_thread():
    gate = _Gate()
    w = es.filter_jit(gate.fn, max_traces=1)
    x = jnp.ones(2)
    thread, result = _start(w, x, 0.0)
    try:
        assert gate.entered.acquire(timeout=_TIMEOUT)
        # The first trace is running: this one would be the second.
        with pytest.raises(es.RecompileError, match="max_traces=1"):
            w(x, 1.0)
    finally:
        gate.open()
        thread.join(_TIMEOUT)
    assert result["out"].tolist() == [0.0, 0.0]
    assert gate.traced == [0.0]
    assert w.cache_info().traces == 1 and len(w.misses) == 1


@pytest.mark.counts_traces
def test_of_many_concurrent_misses_only_max_traces_trace():
    gate = _Gate(hold_all=True)
    w = es.filter_jit(gate.fn, max_traces=2)
    x = jnp.ones(2)
    started = []
    try:
        for i in range(5):
            thread, result = _start(w, x, float(i + 1))
            started.append((thread, result))
            if i < 2:
                # Allowed: it is now inside its trace (and holds its place in the count).
                assert gate.entered.acquire(timeout=_TIMEOUT)
            else:
                # Refused at once, while the two allowed ones are still tracing.
                thread.join(_TIMEOUT)
                assert isinstance(result.get("error"), es.RecompileError)
    finally:
        gate.open()
        for thread, _ in started:
            thread.join(_TIMEOUT)
    outs = [r["out"].tolist() for _, r in started[:2]]
    assert outs == [[1.0, 1.0], [2.0, 2.0]]
    assert gate.traced == [1.0, 2.0]
    assert w.cache_info().traces == 2


@pytest.mark.counts_traces
def test_on_recompile_raise_refuses_a_second_concurrent_first_call():
    gate = _Gate()
    w = es.filter_jit(gate.fn, on_recompile="raise")
    x = jnp.ones(2)
    thread, result = _start(w, x, 0.0)
    try:
        assert gate.entered.acquire(timeout=_TIMEOUT)
        with pytest.raises(es.RecompileError, match="recompiled"):
            w(x, 3.0)
    finally:
        gate.open()
        thread.join(_TIMEOUT)
    assert "error" not in result
    assert [m.kind for m in w.misses] == ["first"]
    assert gate.traced == [0.0]


@pytest.mark.counts_traces
def test_a_concurrent_miss_is_explained_against_the_one_still_being_traced():
    gate = _Gate()
    w = es.filter_jit(gate.fn, on_recompile="warn")
    x = jnp.ones(2)
    thread, result = _start(w, x, 0.0)
    try:
        assert gate.entered.acquire(timeout=_TIMEOUT)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert w(x, 3.0).tolist() == [3.0, 3.0]
    finally:
        gate.open()
        thread.join(_TIMEOUT)
    assert result["out"].tolist() == [0.0, 0.0]
    # This thread's miss was recorded first, though decided second: it names what differs from
    # the call still being traced, and it warned as a recompile.
    second, first = w.misses
    assert first.kind == "first"
    assert second.kind != "first" and second.path == "args[1]"
    assert [type(c.message) for c in caught] == [es.RecompileWarning]


def test_a_hit_takes_no_lock():
    w = es.filter_jit(lambda x, s: x * s)
    x = jnp.ones(2)
    w(x, 2.0)
    # Another thread holds the lock a miss is decided under: a hit does not wait for it.
    held, done = threading.Event(), threading.Event()

    def hold():
        with w._stats.lock:
            held.set()
            done.wait(_TIMEOUT)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(_TIMEOUT)
        thread, result = _start(w, x, 2.0)
        thread.join(_TIMEOUT)
        assert not thread.is_alive()
        assert result["out"].tolist() == [2.0, 2.0]
    finally:
        done.set()
        holder.join(_TIMEOUT)
    assert w.cache_info()[:2] == (1, 1)
