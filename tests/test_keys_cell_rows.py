"""Row tests of the keys table (`eqxstable/_keys/README.md`, ids in `ROW_TESTS` of
`tests/test_keys_rows.py`) for closure cells (`K-cell`, `K-counter-cell`): sealed cells by
contents, rebindable and empty ones, cells proven alone by reference counts, and cells that count
their function's runs (by identity alone) against those that do not."""

import numpy as np
import pytest

from .helpers import rebindable as make_rebindable
from .keys_support import closure_over, key, same


# Closure cells: contents; a rebindable cell also by its identity; an empty cell by identity.
def test_closure_cells():
    f1, _ = make_rebindable(1.0)
    f2, _ = make_rebindable(1.0)
    # Rebindable cells: never shared, whatever they hold.
    assert key(f1) != key(f2)
    # Sealed cells: by contents.
    assert same(closure_over(1.0), closure_over(1.0))

    def late():
        f = lambda: later  # noqa: E731  # pyright: ignore[reportUndefinedVariable]
        if False:
            later = 1
        return f

    empty1, empty2 = late(), late()
    assert empty1.__closure__ is not None
    with pytest.raises(ValueError, match="empty"):
        empty1.__closure__[0].cell_contents
    # Empty for good (the frame returned, nothing else holds the cell): no state, one key.
    assert key(empty1) == key(empty2)


_GONE = """
def make(v):
    return lambda x: x * v

def make_doubling(v):
    def f(x):
        nonlocal v
        v = v * 2
        return x * v
    return f

def make_pair(v):
    f = lambda x: x * v

    def rebind(new):
        nonlocal v
        v = new

    return f, rebind
"""


def _factories_that_are_gone() -> dict:
    # Their enclosing code can no longer be found by name (taken out of the namespace the
    # closures' globals are), so only the reference counts can prove a cell alone.
    ns: dict = {}
    exec(_GONE, ns)
    return {name: ns.pop(name) for name in ("make", "make_doubling", "make_pair")}


# A cell whose enclosing code is not found: sealed when nothing but its function holds it and its
# own code never writes it; otherwise keyed by its identity too.
def test_cells_alone_by_reference_counts():
    gone = _factories_that_are_gone()
    assert same(gone["make"](1.0), gone["make"](1.0))
    assert key(gone["make"](1.0)) != key(gone["make"](2.0))
    # Its own code rebinds it.
    assert key(gone["make_doubling"](1.0)) != key(gone["make_doubling"](1.0))
    # A setter shares it.
    (f1, _), (f2, _) = gone["make_pair"](1.0), gone["make_pair"](1.0)
    assert key(f1) != key(f2)


def make_counter(start):
    n = start

    def f(x):
        nonlocal n
        n += 1
        return x

    def read():
        return n

    return f, read


# A cell only its own function writes, and only as `n += k`: a count of its runs, by identity.
def test_counter_cells_by_identity_alone():
    f, read = make_counter(0)
    before = key(f)
    f(1.0)
    f(1.0)
    assert read() == 2 and key(f) == before
    # Another closure's counter is another cell.
    g, _ = make_counter(0)
    assert key(g) != key(f)
    # A float counter too; anything else is keyed by contents.
    h, _ = make_counter(0.5)
    before = key(h)
    h(1.0)
    assert key(h) == before
    # Other spellings of a count, beside other reads (a sealed cell, an attribute of the same
    # name, a nested function that does not use the count).
    for make in (_count_spelled_out, _count_down_beside_other_reads):
        f = make()
        before = key(f)
        f(1.0)
        assert key(f) == before
    # An array bumped in place (its `__iadd__` could be anything): by contents.
    a, _ = make_counter(np.zeros(()))
    before = key(a)
    a(1.0)
    assert key(a) != before


def _count_spelled_out():
    n = 0

    def f(x):
        nonlocal n
        n = n + 1
        return x

    return f


def _count_down_beside_other_reads():
    real = 10
    scale = 2.0

    def f(x):
        nonlocal real
        real -= 1
        helper = lambda y: y * scale  # noqa: E731
        return helper(x).real

    return f


def _count_read_by_a_nested_function():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return (lambda: x * n)()

    return f


def _count_multiplied():
    n = 1

    def f(x):
        nonlocal n
        n *= 2
        return x

    return f


def _reads_its_count():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x * n

    return f


def _count_set_from_outside():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x

    def reset():
        nonlocal n
        n = 0

    return f, reset


def _count_by_a_float():
    n = 0

    def f(x):
        nonlocal n
        n += 0.5
        return x

    return f


def _count_in_a_nested_function():
    n = 0

    def f(x):
        def bump():
            nonlocal n
            n += 1

        bump()
        return x

    return f


def _owner_counts_too():
    n = 0

    def f(x):
        nonlocal n
        n += 1
        return x

    n += 1
    return f


# Anything else that changes a cell written by its function is a change.
@pytest.mark.parametrize(
    "make",
    [
        _reads_its_count,
        lambda: _count_set_from_outside()[0],
        _count_by_a_float,
        _count_in_a_nested_function,
        _owner_counts_too,
        _count_read_by_a_nested_function,
        _count_multiplied,
    ],
    ids=[
        "read",
        "reset from outside",
        "float step",
        "nested",
        "owner writes twice",
        "read by a nested function",
        "multiplied",
    ],
)
def test_cells_that_are_not_counters_by_contents(make):
    f = make()
    before = key(f)
    f(1.0)
    assert key(f) != before
