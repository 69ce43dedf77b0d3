"""Row tests of the keys table (`eqxstable/_keys/README.md`, ids in `ROW_TESTS` of
`tests/test_keys_rows.py`) for objects keyed by identity or as constants: mutable containers and
plain objects, NumPy and JAX arrays, user classes and modules, library objects, and what is too
deep or unreadable. Each checks its row's promise on equal but distinct objects."""

import importlib
import sys
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxstable as es

from .keys_support import closure_over, key, same


class Plain:
    def __init__(self, v):
        self.v = v


class Slotted:
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


# list, dict, set, bytearray, plain object: identity and contents; a change is a new key.
@pytest.mark.parametrize(
    "make, change",
    [
        (lambda: [1.0], lambda o: o.append(2.0)),
        (lambda: [1.0], lambda o: o.__setitem__(0, 1)),
        (lambda: [1.0, 2.0], lambda o: o.pop()),
        (lambda: {"a": 1}, lambda o: o.update(b=2)),
        (lambda: {"a": 1}, lambda o: o.update(a=1.0)),
        (lambda: {1}, lambda o: o.add(2)),
        (lambda: bytearray(b"a"), lambda o: o.extend(b"b")),
        (lambda: Plain(1), lambda o: setattr(o, "v", 2)),
        (lambda: Plain(1), lambda o: setattr(o, "w", 2)),
        (lambda: Slotted(1), lambda o: setattr(o, "v", 2)),
    ],
)
def test_mutables_by_identity_and_contents(make, change):
    a, b = make(), make()
    assert key(a) != key(b)
    assert key(a) == key(a) is not None and key(a).identity
    before = key(a)
    assert key(a) == before
    change(a)
    assert key(a) != before
    # Through a function that captures it, too.
    f = closure_over(b)
    before = key(f)
    change(b)
    assert key(f) != before


# NumPy array at the top level: dtype, shape, bytes; `intern` hands out a read-only copy.
def test_top_level_arrays_by_contents():
    assert same(np.arange(3.0), np.arange(3.0))
    assert key(np.arange(3.0)) != key(np.arange(3))
    assert key(np.zeros(4)) != key(np.zeros((2, 2)))
    a = np.arange(3.0)
    canonical = es.intern(a)
    assert canonical is not a and not canonical.flags.writeable


# NumPy array reached through a function: identity and bytes, watched.
def test_captured_arrays_by_identity_and_bytes():
    a, b = np.ones(2), np.ones(2)
    assert key(closure_over(a)).identity
    assert key(closure_over(a)) != key(closure_over(b))
    f = closure_over(a)
    before = key(f)
    a[0] = 3.0
    assert key(f) != before


# `jax.Array`: identity.
def test_jax_arrays_by_identity():
    a = jnp.ones(2)
    assert key(a) != key(jnp.ones(2))
    assert key(a) == key(a) and key(a).identity


# User class: identity and every entry of its namespace; assigning a class attribute is seen.
def test_user_classes_watched():
    class Config:
        lr = 0.1

        def scaled(self, x):
            return x * self.lr

    class Other:
        lr = 0.1

    assert key(Config) != key(Other)
    f = closure_over(Config)
    before = key(f)
    Config.lr = 0.2
    assert key(f) != before


# User module read whole: identity and every public name.
def test_user_modules_read_whole(tmp_path, monkeypatch):
    (tmp_path / "rows_user_module.py").write_text("VALUE = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "rows_twin_module.py").write_text("VALUE = 1.0\n")
    module = importlib.import_module("rows_user_module")
    twin = importlib.import_module("rows_twin_module")
    try:
        f = closure_over(module)
        before = key(f)
        assert same(closure_over(module), f)
        # Another module with the same contents is another module.
        assert key(closure_over(twin)) != before
        module.VALUE = 2.0  # pyright: ignore[reportAttributeAccessIssue]
        assert key(f) != before
        module.VALUE = 1.0  # pyright: ignore[reportAttributeAccessIssue]
        assert key(f) == before
        # Reloaded from the same file, it holds the same: the same key.
        assert importlib.reload(module) is module
        assert key(f) == before
        module.T = (1, 2)  # pyright: ignore[reportAttributeAccessIssue]
        with_tuple = key(f)
        module.T = (1, 3)  # pyright: ignore[reportAttributeAccessIssue]
        assert key(f) != with_tuple
        module.A = np.ones(1)  # pyright: ignore[reportAttributeAccessIssue]
        assert key(f).identity
    finally:
        sys.modules.pop("rows_user_module", None)
        sys.modules.pop("rows_twin_module", None)


# Library function, module, class, builtin: constants.
def test_library_objects_are_constants():
    assert not key(jax.nn.relu).identity
    assert not key(np).identity and not key(np.ndarray).identity
    assert not key(len).identity and key(len) != key(abs)
    assert key(jnp.sin) != key(jnp.cos)
    assert same(closure_over(jnp.sin), closure_over(jnp.sin))


# An object of a library class holding user functions (`jax.custom_vjp`): identity and
# attributes, watched (`defvjp` changes a rule in place).
def test_library_objects_holding_user_functions():
    def make():
        @jax.custom_vjp
        def f(x):
            return x

        f.defvjp(lambda x: (x, None), lambda _, g: (g,))
        return f

    f = make()
    assert key(f) != key(make())
    before = key(f)
    f.defvjp(lambda x: (x, None), lambda _, g: (2 * g,))
    assert key(f) != before


# Deeper than `MAX_DEPTH`: walked in cuts from the top, keyed as a shallow object is (a chain
# of tuples by value, a chain of lists by identity and contents). Unreadable: a key equal to
# nothing, not even the same object's next key.
def test_too_deep_and_unreadable():
    def chain(leaf: Any, box: Any = lambda x: (x,)) -> Any:
        for _ in range(500):
            leaf = box(leaf)
        return leaf

    deep = chain(0)
    assert key(deep) == key(deep) == key(chain(0))
    assert key(deep) != key(chain(1)) and key(deep) != key(chain(0.0))
    lists = chain(0, lambda x: [x])
    assert key(lists) == key(lists) != key(chain(0, lambda x: [x]))

    class Broken:
        def __eq__(self, other):
            raise RuntimeError

        def __hash__(self):
            raise RuntimeError

    a = Broken()
    assert key(a) != key(Broken())
    assert key(a).identity


def test_modules_are_keyed_by_what_they_are():
    user = types.ModuleType("made_by_hand")
    user.X = 1  # pyright: ignore[reportAttributeAccessIssue]
    f = closure_over(user)
    before = key(f)
    user.X = 2  # pyright: ignore[reportAttributeAccessIssue]
    assert key(f) != before
