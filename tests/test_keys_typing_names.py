"""`typing.get_type_hints` evaluates string annotations (every one under `from __future__ import
annotations`) by looking names up in a module's globals when it is called, by names no bytecode
shows (attack 12a, finding 07): it is not on the pure allowlist, so a rebuilt function calling it
traces again (`K-impure-library`), as under `equinox.filter_jit`, and follows a class redefined
since (a notebook cell run again)."""

import sys
import types
import typing

import jax.numpy as jnp
import pytest

import eqxstable as es


_SOURCE = """
from __future__ import annotations
import typing

class Scale:
    VALUE = 1.0

class Cfg:
    scale: Scale

def make():
    def f(x):
        return x * typing.get_type_hints(Cfg)["scale"].VALUE
    return f
"""


@pytest.fixture
def cell():
    m = types.ModuleType("notebook_cell")
    sys.modules[m.__name__] = m
    exec(compile(_SOURCE, "<notebook cell>", "exec"), m.__dict__)
    yield m
    del sys.modules[m.__name__]


@pytest.mark.parametrize("value", [3.0, 1.0])
def test_a_redefined_annotation_class_is_followed(cell, value):
    run = es.filter_jit(lambda f, x: f(x))
    x = jnp.float32(2.0)
    assert float(run(cell.make(), x)) == 2.0
    exec(f"class Scale:\n    VALUE = {value!r}\n", cell.__dict__)  # The cell run again.
    assert float(run(cell.make(), x)) == float(cell.make()(x)) == 2.0 * value


def test_get_type_hints_is_not_pure():
    from eqxstable._keys._pure import pure_library

    assert not pure_library(typing.get_type_hints)
    assert pure_library(typing.get_args)
