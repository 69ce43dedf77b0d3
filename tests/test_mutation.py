"""The keys' `Watch`: what can change in place under a static's key is noticed, and the change is
described by the jit layer in words."""

import jax
import numpy as np
import pytest

from eqxstable._jit._describe import describe_change
from eqxstable._keys import compute

from .helpers import rebindable


class Config:
    def __init__(self, lr):
        self.lr = lr


class _Snapshot:
    """A key with its watch, as a jit cache entry holds them: `changed()` says what changed."""

    def __init__(self, obj):
        self.obj = obj
        self.key, self.watch = compute(obj)

    def __len__(self):
        return len(self.watch)

    def changed(self):
        if self.watch.valid():
            return None
        key, _ = compute(self.obj)
        return None if key == self.key else describe_change(self.key, key)


def snapshot_mutables(obj):
    snap = _Snapshot(obj)
    return snap if len(snap) else None


GLOBAL_SCALE = 1.0
GLOBAL_TABLE = [1.0, 2.0]


def reads_globals(x):
    return x * GLOBAL_SCALE + GLOBAL_TABLE[0]


@pytest.mark.parametrize("value", [1, 2.5, "s", (1, (2.0, None)), frozenset({1})])
def test_immutable_values_need_no_snapshot(value):
    assert snapshot_mutables(value) is None


def test_pure_lambda_snapshot_is_cheap_and_unchanged():
    snap = snapshot_mutables(lambda x: x + 1)
    assert snap is not None and len(snap) == 1
    assert snap.changed() is None


def test_rebound_cell_is_noticed():
    f, rebind = rebindable(1.0)
    snap = snapshot_mutables(f)
    assert snap is not None and snap.changed() is None
    rebind(2.0)
    assert "was rebound: 1.0 -> 2.0" in (snap.changed() or "")


@pytest.mark.parametrize(
    "make, mutate",
    [
        (lambda: [1.0], lambda obj: obj.__setitem__(0, 2.0)),
        (lambda: [1.0], lambda obj: obj.__setitem__(0, 1)),  # type-exact: 1.0 -> 1
        (lambda: {"a": 1}, lambda obj: obj.update(a=2)),
        (lambda: {1}, lambda obj: obj.add(2)),
        (lambda: np.ones(3), lambda obj: obj.__setitem__(0, 5.0)),
        (lambda: Config(0.1), lambda obj: setattr(obj, "lr", 0.2)),
        (lambda: [[1.0]], lambda obj: obj[0].__setitem__(0, 3.0)),
    ],
)
def test_mutation_of_captured_object_is_noticed(make, mutate):
    captured = make()
    f = (lambda v: lambda x: (x, v))(captured)
    snap = snapshot_mutables(f)
    assert snap is not None and snap.changed() is None
    mutate(captured)
    assert "changed in place" in (snap.changed() or "")


def test_static_object_itself_mutated():
    cfg = Config(0.1)
    snap = snapshot_mutables(cfg)
    assert snap is not None and snap.changed() is None
    cfg.lr = 0.3
    assert "Config" in (snap.changed() or "")


def test_globals_read_by_a_function_are_watched():
    global GLOBAL_SCALE
    snap = snapshot_mutables(reads_globals)
    assert snap is not None and snap.changed() is None
    GLOBAL_TABLE[0] = 5.0
    try:
        assert "changed in place" in (snap.changed() or "")
    finally:
        GLOBAL_TABLE[0] = 1.0
    assert snap.changed() is None
    old = GLOBAL_SCALE
    GLOBAL_SCALE = 2.0
    try:
        assert "global `GLOBAL_SCALE`" in (snap.changed() or "")
    finally:
        GLOBAL_SCALE = old


def test_library_callables_are_not_watched():
    # `jax.nn.relu` is a `custom_jvp` object: keyed by identity, but checking its attributes on
    # every call of a jitted function would cost more than the call.
    assert snapshot_mutables(jax.nn.relu) is None
    snap = snapshot_mutables(lambda x: jax.nn.relu(x))
    # The lambda's own state and the global `jax` it loads; nothing inside JAX.
    assert snap is not None and len(snap) == 2


def test_objects_of_modules_named_like_libraries_are_watched():
    fake = type("Fake", (), {"__module__": "jaxtyping_lookalike"})()
    snap = snapshot_mutables(fake)
    assert snap is not None and snap.changed() is None
    setattr(fake, "x", 1)
    assert snap.changed() is not None


weight = 1.0


def _uses_attribute_named_like_a_global(model):
    return model.weight


def test_attribute_names_are_not_globals_read():
    global weight
    snap = snapshot_mutables(_uses_attribute_named_like_a_global)
    assert snap is not None
    old = weight
    weight = 2.0
    try:
        assert snap.changed() is None
    finally:
        weight = old
