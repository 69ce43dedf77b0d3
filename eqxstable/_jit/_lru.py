"""The bounds on every cache the jit layer holds, and the least-recently-used dict that keeps to
them.

A service that runs for days, or a sweep that builds thousands of functions, must not grow
without bound. The sizes follow JAX's own jit caches (`jax._src.pjit` keeps 8192 compiled
functions; a jitted function's own cache holds 4096 entries by default) and can be changed
before `eqxstable` is imported, with environment variables, or at any time by assigning to
`eqxstable._jit._lru.sizes`:

- `EQXSTABLE_MAX_PROGRAMS` (`sizes.programs`, default 8192): the programs kept for reuse by
  key across wrappers (a program a live wrapper calls is never dropped with them).
- `EQXSTABLE_MAX_RELEASED` (`sizes.released`, default 64): of those, the programs that no live
  wrapper calls any more, kept so that `es.filter_jit(f)(x)` written inline finds its program
  again; beyond it the least recently released go, with everything their keys hold (a dropped
  closure's captured array) and their compiled programs.
- `EQXSTABLE_MAX_ENTRIES` (`sizes.entries`, default 4096): per wrapper, the compiled programs
  held (`cache_info().maxsize`: entries weighted by their programs, one per input types; an
  entry whose programs alone exceed it is dropped with them, `Cache.bound`), the signatures its
  misses are explained against, and the misses kept for `.misses`.

Eviction never changes a count (`hits` and `misses` are counters of their own) and never serves
a stale program: an evicted entry is traced again when it is next needed.
"""

import dataclasses
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar


_K = TypeVar("_K")
_V = TypeVar("_V")


def _env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        size = int(value)
    except ValueError:
        raise ValueError(f"`{name}={value}` must be a positive integer.") from None
    if size < 1:
        raise ValueError(f"`{name}={value}` must be a positive integer.")
    return size


@dataclasses.dataclass
class Sizes:
    """The bounds in force; read by each cache whenever it grows, so an assignment takes effect
    at the next insertion."""

    programs: int = dataclasses.field(default_factory=lambda: _env("EQXSTABLE_MAX_PROGRAMS", 8192))
    entries: int = dataclasses.field(default_factory=lambda: _env("EQXSTABLE_MAX_ENTRIES", 4096))
    released: int = dataclasses.field(default_factory=lambda: _env("EQXSTABLE_MAX_RELEASED", 64))


sizes = Sizes()


class LRU(Generic[_K, _V]):
    """A dict (of values that are never `None`) of at most `bound()` items (or of total
    `weight` at most `bound()`), the least recently used dropped first; `on_evict(key, value)`
    runs for each dropped item.

    `get` counts as a use; `peek` does not. Only the caller decides when a lookup is a use, so
    the hit path, which never comes here, stays as cheap as it was.

    Thread-safe: every change (a use moves an item too) and every copy (`values`, `items`,
    iteration) holds the LRU's lock, since the wrappers' lookups are not serialised and an
    `OrderedDict` copied while another thread moves an item raises "mutated during iteration" (or
    a `KeyError`, where it drops one).
    `peek`, `len` and `in` change nothing and copy nothing, so they take no lock. `on_evict` runs
    after the lock is let go, so that it may use this or another LRU."""

    __slots__ = ("_items", "_bound", "_on_evict", "_weight", "_lock", "total", "__weakref__")

    def __init__(
        self,
        bound: Callable[[], int],
        on_evict: Callable[[Any, Any], None] | None = None,
        weight: Callable[[Any], int] | None = None,
    ):
        self._items: OrderedDict[_K, _V] = OrderedDict()
        self._bound = bound
        self._on_evict = on_evict
        self._weight = weight
        # Re-entrant: a key's `__eq__` or a finaliser run by the garbage collector while the lock
        # is held may come back to this LRU in the same thread.
        self._lock = threading.RLock()
        # The sum of the weights of the items held (their number when unweighted).
        self.total = 0

    @property
    def maxsize(self) -> int:
        return self._bound()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[_K]:
        with self._lock:
            return iter(list(self._items))

    def values(self) -> list[_V]:
        with self._lock:
            return list(self._items.values())

    def items(self) -> list[tuple[_K, _V]]:
        with self._lock:
            return list(self._items.items())

    def peek(self, key: _K) -> _V | None:
        return self._items.get(key)

    def get(self, key: _K) -> _V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def _w(self, value: Any) -> int:
        return 1 if self._weight is None else self._weight(value)

    def set(self, key: _K, value: _V) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.total -= self._w(old)
            self._items[key] = value
            self.total += self._w(value)
            evicted = self._shrink()
        self._evicted(evicted)

    def setdefault(self, key: _K, value: _V) -> _V:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
            self._items[key] = value
            self.total += self._w(value)
            evicted = self._shrink()
        self._evicted(evicted)
        return value

    def pop(self, key: _K) -> _V | None:
        with self._lock:
            value = self._items.pop(key, None)
            if value is not None:
                self.total -= self._w(value)
            return value

    def reweigh(self, old_weight: int, value: _V) -> None:
        """After `value` (held) changed its weight from `old_weight`."""
        with self._lock:
            self.total += self._w(value) - old_weight
            evicted = self._shrink()
        self._evicted(evicted)

    def shrink(self) -> None:
        """Drops the least recently used items until the bound holds (one item is always kept:
        the one just used)."""
        with self._lock:
            evicted = self._shrink()
        self._evicted(evicted)

    def _shrink(self) -> list[tuple[_K, _V]]:
        # Under the lock: the items dropped, for `_evicted` once it is let go.
        bound = self._bound()
        evicted = []
        while self.total > bound and len(self._items) > 1:
            key, value = self._items.popitem(last=False)
            self.total -= self._w(value)
            evicted.append((key, value))
        return evicted

    def _evicted(self, evicted: list[tuple[_K, _V]]) -> None:
        if self._on_evict is not None:
            for key, value in evicted:
                self._on_evict(key, value)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.total = 0
