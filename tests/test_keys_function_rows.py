"""Row tests of the keys table (`eqxstable/_keys/README.md`, ids in `ROW_TESTS` of
`tests/test_keys_rows.py`) for callables: functions (code, cells, defaults, attributes, globals),
partials, bound methods and `jax.jit` functions. Closure cells have their own file,
`tests/test_keys_cell_rows.py`."""

import dataclasses
import functools as ft
from typing import Any

import jax
import jax.tree_util as jtu

from .keys_support import body as _body, closure_over, key, same


SCALE = 2.0


def reads_scale(x):
    return x * SCALE


def test_functions_by_code_cells_defaults_attributes_and_globals():
    global SCALE
    assert same(closure_over(2.0), closure_over(2.0))
    assert key(closure_over(2.0)) != key(closure_over(2))
    # A function attribute set after the function was keyed is seen.
    g = closure_over(1.0)
    before = key(g)
    g.extra = 5  # pyright: ignore[reportFunctionMemberAccess]
    assert key(g) != before
    # Defaults and keyword defaults.
    f = closure_over(1.0)
    before = key(f)
    f.__defaults__ = (1,)
    assert key(f) != before
    # A global it reads, rebound.
    before = key(reads_scale)
    old = SCALE
    SCALE = 3.0
    try:
        assert key(reads_scale) != before
    finally:
        SCALE = old
    assert key(reads_scale) == before


# Partials: type, function, arguments, keywords (watched).
def test_partials():
    assert same(ft.partial(_body, 1, y=2), ft.partial(_body, 1, y=2))
    assert key(ft.partial(_body, 1)) != key(ft.partial(_body, 2))
    assert key(ft.partial(_body, y=1)) != key(ft.partial(_body, y=2))
    assert key(ft.partial(_body, 1)) != key(jtu.Partial(_body, 1))
    p = ft.partial(_body, y=1)
    before = key(p)
    p.keywords["y"] = 3
    assert key(p) != before
    # Its attributes too.
    q1, q2 = ft.partial(_body, 1), ft.partial(_body, 1)
    q1.tag, q2.tag = (1, 2), (1, 2)  # pyright: ignore[reportAttributeAccessIssue]
    assert key(q1) == key(q2)
    q2.tag = (1, 3)  # pyright: ignore[reportAttributeAccessIssue]
    assert key(q1) != key(q2)


@dataclasses.dataclass(frozen=True)
class Scaler:
    factor: Any

    def apply(self, x):
        return x * self.factor


# Bound method: function and `__self__`.
def test_bound_methods():
    assert same(Scaler(2).apply, Scaler(2).apply)
    assert key(Scaler(2).apply) != key(Scaler(3).apply)


# `jax.jit` function: the wrapped function and every option.
def test_jax_jit_functions():
    assert same(jax.jit(_body), jax.jit(_body))
    assert key(jax.jit(_body)) != key(jax.jit(_body, donate_argnums=0))
    assert key(jax.jit(_body)) != key(jax.jit(closure_over(1)))
