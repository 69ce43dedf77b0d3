"""The documented assumption of `docs/assumptions.md` ("a function's own slots and cells are part
of its program"): writing a function's closure cell through `fn.__closure__[i].cell_contents`,
or its `__code__`, `__defaults__`, `__kwdefaults__` or `__dict__`, after `es.intern` (or a
`StableModule`) handed out another equivalent function for it, is not followed by what was
handed out (attack10a finding 07). Substituting equal closures is the feature that lets a
rebuilt lambda share one program under plain `equinox.filter_jit`; what the code itself can do
(a `nonlocal` setter) is followed, and `es.filter_jit`'s keys see the write."""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import pytest

import eqxstable as es


def _make(scale):
    def act(x):
        return x * scale

    return act


def _make_with_setter(scale):
    def act(x):
        return x * scale

    def set_scale(value):
        nonlocal scale
        scale = value

    return act, set_scale


class Net(es.StableModule):
    act: Any

    def __call__(self, x):
        return self.act(x)


def test_a_nonlocal_setter_is_followed():
    # Caught: the program's own code can rebind the cell, so the closure is never substituted.
    a, set_a = _make_with_setter(2.0)
    b, set_b = _make_with_setter(2.0)
    na, nb = Net(a), Net(b)
    assert nb.act is b
    set_b(9.0)
    x = jnp.float32(1.0)
    assert float(nb(x)) == 9.0 and float(na(x)) == 2.0


def test_es_filter_jit_keys_see_a_cell_write():
    a, b = _make(2.0), _make(2.0)
    run = es.filter_jit(lambda x, fn: fn(x))
    x = jnp.float32(1.0)
    assert float(run(x, a)) == float(run(x, b)) == 2.0
    b.__closure__[0].cell_contents = 9.0  # pyright: ignore[reportOptionalSubscript]
    assert float(run(x, b)) == 9.0 and float(run(x, a)) == 2.0
    # `intern` of the written function no longer finds the other: it is its own now.
    assert es.intern(b) is b


def test_the_substituted_copy_does_not_follow_an_introspective_write():
    # Not caught, by assumption: the module built from `b` holds the canonical `a`, whose cell
    # was not written. The same holds for `__code__`, `__defaults__`, `__kwdefaults__` and
    # `__dict__` written after interning.
    a, b = _make(2.0), _make(2.0)
    Net(a)
    nb = Net(b)
    assert nb.act is a
    b.__closure__[0].cell_contents = 9.0  # pyright: ignore[reportOptionalSubscript]
    assert float(nb(jnp.float32(1.0))) == 2.0  # An eqx.Module holding `b` would give 9.0.


@pytest.mark.counts_traces
def test_rebuilt_closures_share_one_program_under_plain_filter_jit():
    # What substituting equal closures is for (CONTRACT section 2).
    traces = 0

    @eqx.filter_jit
    def run(net, x):
        nonlocal traces
        traces += 1
        return net(x)

    for _ in range(3):
        assert float(run(Net(_make(2.0)), jnp.float32(1.0))) == 2.0
    assert traces == 1
