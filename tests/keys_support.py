"""What the row tests of the keys table (`tests/test_keys_*_rows.py`) share: the key of an
object, a check that two distinct objects share a key, a closure over a value, and a plain
function to wrap in partials and jits."""

from typing import Any

import eqxstable as es
from eqxstable._keys import Key


def key(obj: Any) -> Key:
    return es.stable_key(obj)


def same(a: Any, b: Any) -> bool:
    """Whether `a` and `b` share a key; they must be two objects, or the check proves nothing."""
    assert a is not b
    return key(a) == key(b)


def closure_over(value):
    return lambda x: (x, value)


def body(x, y=0):
    """`x + y`: the function the row tests wrap in partials and `jax.jit`."""
    return x + y
