"""Differential situations: closure cells rebound through `nonlocal` setters, loop-variable cells
(loops, generators, comprehensions), mutable things reached through cells, and what can be
rebound on a function object (`__defaults__`, `__kwdefaults__`, `__code__`)."""

import dataclasses

import jax.numpy as jnp
import pytest

from ..helpers import rebindable
from .harness import check, MODES, Situations


SITUATIONS = Situations()


# `f(x) = x * c` over its own cell `c`, and a setter that rebinds `c` (`nonlocal`).
_make = rebindable


def _make_reader(container):
    return lambda x: x * container[0]


@SITUATIONS.add
def cell_rebound_same_function(h):
    f, set_c = _make(2.0)
    h.call(f, jnp.ones(2))
    set_c(3.0)
    h.call(f, jnp.ones(2))
    h.call(lambda x: f(x), jnp.ones(2))


@SITUATIONS.add
def two_make_closures_then_first_rebound(h):
    """Issue item 3: an entry made for `f1` and adopted by `f2`; `f1`'s cell is rebound; `f2`
    called with a new shape must retrace with `f2`'s own cell."""
    f1, set1 = _make(2.0)
    f2, _ = _make(2.0)
    h.call(f1, jnp.ones(2))
    h.call(f2, jnp.ones(2))
    set1(5.0)
    h.call(f2, jnp.ones(3))
    h.call(f1, jnp.ones(3))
    h.call(f2, jnp.ones(2))


@SITUATIONS.add
def two_make_closures_second_rebound(h):
    f1, _ = _make(2.0)
    f2, set2 = _make(2.0)
    h.call(f1, jnp.ones(2))
    h.call(f2, jnp.ones(2))
    set2(7.0)
    h.call(f2, jnp.ones(2))
    h.call(f1, jnp.ones(2))


@SITUATIONS.add
def loop_variable_cell_in_a_function(h):
    """A new lambda per iteration, all sharing the loop's one cell `k`."""
    for k in (1.0, 2.0, 3.0):
        h.call(lambda x: x * k, jnp.ones(2))  # noqa: B023


@SITUATIONS.add
def loop_variable_cell_old_lambda_called_again(h):
    fs = []
    for k in (1.0, 2.0):
        fs.append(lambda x: x * k)  # noqa: B023
        h.call(fs[-1], jnp.ones(2))
    h.call(fs[0], jnp.ones(2))  # Reads the cell now: 2.0.


@SITUATIONS.add
def generator_advances_the_cell(h):
    """A generator yields closures over its loop variable; advancing it rebinds the cell that
    the earlier closure reads."""

    def gen():
        for k in (1.0, 2.0, 3.0):
            yield lambda x: x * k  # noqa: B023

    g = gen()
    first = next(g)
    h.call(first, jnp.ones(2))
    h.call(next(g), jnp.ones(2))
    h.call(first, jnp.ones(2))
    h.call(next(g), jnp.ones(2))


@SITUATIONS.add
def two_generators_interleaved(h):
    """Two generators, each over its own loop cell, yield equal closures; advancing the first
    rebinds only the first one's cell (issue item 4 without threads)."""

    def gen(values):
        for k in values:
            yield lambda x: x * k  # noqa: B023

    ga, gb = gen((1.0, 5.0)), gen((1.0, 7.0))
    fa, fb = next(ga), next(gb)
    h.call(fa, jnp.ones(2))
    h.call(fb, jnp.ones(2))
    next(ga)
    h.call(fb, jnp.ones(3))
    h.call(fa, jnp.ones(3))


@SITUATIONS.add
def comprehension_over_factories(h):
    fs = [(lambda k: lambda x: x * k)(k) for k in (1.0, 2.0, 3.0)]
    for f in fs:
        h.call(f, jnp.ones(2))


@SITUATIONS.add
def comprehension_calls_with_its_own_cell(h):
    """The lambdas are made and called inside one comprehension: its variable is one cell."""
    [h.call(lambda x: x * k, jnp.ones(2)) for k in (1.0, 2.0, 3.0)]  # noqa: B023


@SITUATIONS.add
def module_level_loop_in_a_function_body(h):
    """Module-level code that defines a function per iteration with a default argument."""
    h.module("""
    for k in (1.0, 2.0):
        def f(x, k=k):
            return x * k
        h.call(f, jnp.ones(2))
    """)


@SITUATIONS.add
def nested_closure_outer_cell_rebound(h):
    def outer():
        a = 2.0

        def mid():
            def inner(x):
                return x * a

            return inner

        def set_a(v):
            nonlocal a
            a = v

        return mid, set_a

    mid, set_a = outer()
    inner = mid()
    h.call(inner, jnp.ones(2))
    set_a(4.0)
    h.call(inner, jnp.ones(2))
    h.call(mid(), jnp.ones(2))


@SITUATIONS.add
def cell_holds_a_function_rebound(h):
    act = jnp.tanh

    def f(x):
        return act(x) * 2.0

    def set_act(new):
        nonlocal act
        act = new

    h.call(f, jnp.array([0.5, 1.0]))
    set_act(jnp.sin)
    h.call(f, jnp.array([0.5, 1.0]))
    h.call(lambda x: f(x), jnp.array([0.5, 1.0]))


@SITUATIONS.add
def cell_holds_a_jax_array_rebound(h):
    w = jnp.array([1.0, 2.0])

    def f(x):
        return x * w

    def set_w(new):
        nonlocal w
        w = new

    h.call(f, jnp.ones(2))
    set_w(jnp.array([3.0, 4.0]))
    h.call(f, jnp.ones(2))
    h.call(lambda x: f(x), jnp.ones(2))


@SITUATIONS.add
def closure_over_list_mutated(h):
    c = [2.0]
    f = _make_reader(c)
    h.call(f, jnp.ones(2))
    c[0] = 3.0
    h.call(f, jnp.ones(2))
    h.call(_make_reader(c), jnp.ones(2))


@SITUATIONS.add
def two_closures_over_equal_lists_one_mutated(h):
    """Equal lists now, but two different mutable objects: never interchangeable."""
    l1, l2 = [2.0], [2.0]
    f1, f2 = _make_reader(l1), _make_reader(l2)
    h.call(f1, jnp.ones(2))
    h.call(f2, jnp.ones(2))
    l1[0] = 5.0
    h.call(f2, jnp.ones(3))
    h.call(f1, jnp.ones(3))


@SITUATIONS.add
def closure_over_dict_mutated(h):
    d = {"k": 2.0}
    f = lambda x: x * d["k"]  # noqa: E731
    h.call(f, jnp.ones(2))
    d["k"] = 3.0
    d["new"] = 1
    h.call(f, jnp.ones(2))


@SITUATIONS.add
def closure_over_set_grown(h):
    s = {1.0}
    f = lambda x: x * len(s)  # noqa: E731
    h.call(f, jnp.ones(2))
    s.add(2.0)
    h.call(f, jnp.ones(2))


@SITUATIONS.add
def closure_over_object_attribute(h):
    class Box:
        def __init__(self, k):
            self.k = k

    b = Box(2.0)
    f = lambda x: x * b.k  # noqa: E731
    h.call(f, jnp.ones(2))
    b.k = 3.0
    h.call(f, jnp.ones(2))


@SITUATIONS.add
def closure_over_numpy_array_mutated(h):
    import numpy as np

    w = np.array([1.0, 2.0], dtype=np.float32)
    f = lambda x: x * w  # noqa: E731
    h.call(f, jnp.ones(2))
    w[:] = [3.0, 4.0]
    h.call(f, jnp.ones(2))
    h.call(lambda x: x * w, jnp.ones(2))


@SITUATIONS.add
def defaults_rebound(h):
    def f(x, s=2.0):
        return x * s

    h.call(f, jnp.ones(2))
    f.__defaults__ = (3.0,)
    h.call(f, jnp.ones(2))
    h.call(lambda x: f(x), jnp.ones(2))


@SITUATIONS.add
def mutable_default_changed_in_place(h):
    def f(x, s=[2.0]):  # noqa: B006
        return x * s[0]

    h.call(f, jnp.ones(2))
    f.__defaults__[0][0] = 3.0  # pyright: ignore[reportOptionalSubscript]
    h.call(f, jnp.ones(2))
    h.call(lambda x: f(x), jnp.ones(2))


@SITUATIONS.add
def kwdefaults_rebound(h):
    def f(x, *, s=2.0):
        return x * s

    h.call(f, jnp.ones(2))
    f.__kwdefaults__ = {"s": 3.0}
    h.call(f, jnp.ones(2))
    assert f.__kwdefaults__ is not None
    f.__kwdefaults__["s"] = 4.0  # In place this time.
    h.call(f, jnp.ones(2))


@SITUATIONS.add
def code_replaced(h):
    def f(x):
        return x * 2.0

    def g(x):
        return x - 2.0

    h.call(f, jnp.ones(2))
    f.__code__ = g.__code__
    h.call(f, jnp.ones(2))
    h.call(lambda x: f(x), jnp.ones(2))


@SITUATIONS.add
def recursive_closure_cell_rebound(h):
    c = 2.0

    def power(x, n):
        return x if n == 0 else power(x * c, n - 1)

    def set_c(new):
        nonlocal c
        c = new

    f = lambda x: power(x, 2)  # noqa: E731
    h.call(f, jnp.ones(2))
    set_c(3.0)
    h.call(f, jnp.ones(2))
    h.call(lambda x: power(x, 2), jnp.ones(2))


@SITUATIONS.add
def deep_chain_of_closures(h):
    """200 closures, each calling the one before; the innermost cell is rebound."""
    f, set_c = _make(2.0)
    chain = f
    for _ in range(200):
        chain = (lambda g: lambda x: g(x) + 0.0)(chain)
    h.call(chain, jnp.ones(2))
    set_c(3.0)
    h.call(chain, jnp.ones(2))


@dataclasses.dataclass(frozen=True)
class _Rec:
    a: int
    b: float


def _records(n: int, at: int = -1, b: float = 0.0):
    return tuple(_Rec(i, b if i == at else float(i)) for i in range(n))


def _table_reader(table):
    # `K-const-subscript`: only `table[1]` read.
    def read(x):
        return x * table[1].b + table[-1].a

    def set_table(t):
        nonlocal table
        table = t

    return read, set_table


@SITUATIONS.add
def tables_read_at_a_constant_index(h):
    """Closures over tables equal at the items read, different elsewhere: one program; a table
    differing at an item read, longer, or rebound by a setter: the eager answer."""
    h.call(_table_reader(_records(5))[0], jnp.ones(2))
    h.call(_table_reader(_records(5, 3, 9.0))[0], jnp.ones(2))
    h.call(_table_reader(_records(5, 1, 9.0))[0], jnp.ones(2))
    h.call(_table_reader(_records(6))[0], jnp.ones(2))
    read, set_table = _table_reader(_records(5))
    h.call(read, jnp.ones(2))
    set_table(_records(5, 1, 4.0))
    h.call(read, jnp.ones(2))
    # (A record written past frozen, `object.__setattr__`, is seen by the jit,
    # `tests/test_keys_const_subscript.py`; not after `intern` handed out an equal record's
    # reader, as for any frozen record: `K-frozen-dataclass` trusts its fields.)


@SITUATIONS.add
def table_read_whole_and_at_a_constant_index(h):
    """`table[1]` and `len(table)`, or iteration: the whole table keyed."""
    for table in (_records(5), _records(5, 3, 9.0), _records(6)):
        h.call(lambda x, t=table: x * t[1].b * len(t), jnp.ones(2))
        h.call((lambda t: lambda x: x * t[1].b + sum(r.b for r in t))(table), jnp.ones(2))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_closure(situation, mode):
    check(situation, mode)
