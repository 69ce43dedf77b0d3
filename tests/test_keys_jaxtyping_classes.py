# pyright: reportInvalidTypeForm=false
# (Annotations made at run time, as jaxtyping users write them: `x: dtype[array_type, spec]`.)
"""The classes jaxtyping makes for its annotations (`K-jaxtyping-array`): `Float[Array, "a b"]`
is a new class per subscript, made by jaxtyping, holding only what the subscript fixed. Keyed by
what it holds, never walked as a user's class (a jaxtyped module's class key walked every
annotation's namespace, its metaclass and its registries: 0.6 -> 2.1 ms cold), and never less
exact: two annotations that jaxtyping's checks tell apart key apart, and an annotation changed
in place is a change of the class or function holding it."""

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jaxtyping import AbstractArray, Array, Bool, Float, Float32, Int, jaxtyped, Shaped

import eqxstable as es
from eqxstable._keys import _classes, compute


def _f(spec: str) -> Any:
    # `Float[Array, spec]`, a new class per call (a string in an annotation reads as a name).
    return Float[Array, spec]


def _module_class() -> type:
    # A new class per call, as a factory or a notebook cell makes one: keyed cold each time.
    class Net(eqx.Module):
        w: _f("a b")
        act: Any = eqx.field(static=True)

        def __call__(self, x: _f("b")) -> _f("a"):
            return self.act(self.w @ x)

    return Net


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list:
    """The classes whose namespace `_classes.<name>` was called for (`user_class`: each class
    walked as a user's; `entry`: each namespace entry keyed, by the class it belongs to)."""
    real = getattr(_classes, name)
    met: list = []

    def counted(c: Any, *args: Any) -> Any:
        met.append(c)
        return real(c, *args)

    monkeypatch.setattr(_classes, name, counted)
    return met


def test_a_jaxtyped_module_class_never_walks_jaxtypings_classes(monkeypatch):
    walked = _counting(monkeypatch, "user_class")
    entries = _counting(monkeypatch, "entry")
    net = _module_class()
    _, watch = compute(net)
    # The user's class alone is walked as one: not the three annotation classes (its field's,
    # its method's argument's and return's), which jaxtyping made. (On the floor row the user's
    # class is met again through what its own entries reach: still only it.)
    assert walked and set(map(id, walked)) == {id(net)}
    assert not any(isinstance(c, type) and issubclass(c, AbstractArray) for c in entries)
    assert {id(c) for c in entries} == {id(net)}
    assert watch.valid()


def _spec_function(dtype: Any, array_type: Any, spec: str) -> Any:
    # A function rebuilt with its annotations, as a factory makes it: new annotation classes.
    def f(x: dtype[array_type, spec]) -> dtype[array_type, spec]:
        return x

    return f


def test_rebuilt_annotations_share_and_differing_ones_do_not():
    a = _spec_function(Float, Array, "a b")
    b = _spec_function(Float, Array, "a b")
    assert a.__annotations__["x"] is not b.__annotations__["x"]  # jaxtyping caches no class.
    assert es.stable_key(a) == es.stable_key(b)
    for other in (
        _spec_function(Float, Array, "a c"),
        _spec_function(Float, Array, "a 3"),
        _spec_function(Float, Array, "a *b"),
        _spec_function(Float, Array, "a #b"),
        _spec_function(Float32, Array, "a b"),
        _spec_function(Int, Array, "a b"),
        _spec_function(Shaped, Array, "a b"),
        _spec_function(Float, np.ndarray, "a b"),
    ):
        assert es.stable_key(a) != es.stable_key(other)


# What jaxtyping's `isinstance` reads from an annotation class (`__instancecheck_str__`,
# `_check_shape`): equal keys must mean equal values of all of these.
_READ = ("array_type", "dtypes", "dims", "index_variadic", "dim_str", "_skip_instancecheck")

_DIMS = st.sampled_from(["a", "b", "3", "4", "_", "#a", "*b", "...", "a+1", "?c", "_d", "*#e"])
_DTYPES = st.sampled_from([Float, Float32, Int, Bool, Shaped])
_ARRAYS = st.sampled_from([Array, np.ndarray, jax.Array])


def _annotation(dtype: Any, array_type: Any, dims: list) -> Any:
    try:
        return dtype[array_type, " ".join(dims)]
    except Exception:  # noqa: BLE001 (a spec jaxtyping refuses: two variadic dims)
        return None


@settings(max_examples=150, deadline=None)
@given(
    st.tuples(_DTYPES, _ARRAYS, st.lists(_DIMS, max_size=3)),
    st.tuples(_DTYPES, _ARRAYS, st.lists(_DIMS, max_size=3)),
    st.booleans(),
)
def test_annotation_keys_are_what_jaxtyping_reads(one, two, transparent):
    a, b = _annotation(*one), _annotation(*two)
    if a is None or b is None or not (isinstance(a, type) and isinstance(b, type)):
        return
    if transparent:
        b.make_transparent()  # What jaxtyping's decorator does to a generator's return type.
    ka, kb = es.stable_key(a), es.stable_key(b)
    read_a = [getattr(a, n) for n in _READ]
    read_b = [getattr(b, n) for n in _READ]
    if ka == kb:
        assert read_a == read_b and type(a) is type(b) and a.__name__ == b.__name__
    # The same subscript twice (a rebuilt annotation): one key.
    if one[1] is not two[1] or one[0] is not two[0]:
        return
    again = _annotation(*one)
    assert es.stable_key(again) == ka
    # Changed in place after it was keyed: seen (the watch fails, the key is another).
    _, watch = compute(again)
    again.make_transparent()
    assert not watch.valid()
    assert es.stable_key(again) != ka


def test_an_annotation_changed_in_place_changes_its_class_key():
    net = _module_class()
    before, watch = compute(net)
    net.__annotations__["w"].make_transparent()
    assert not watch.valid()
    after, watch = compute(net)
    assert after != before
    # A field's annotation replaced in place: a change of the user's class.
    net.__annotations__["w"] = Float[Array, "a c"]
    assert not watch.valid()
    assert compute(net)[0] != after
    fields = net.__dataclass_fields__  # pyright: ignore[reportAttributeAccessIssue]
    again, watch = compute(net)
    fields["w"].type = Float[Array, "a d"]
    assert not watch.valid()
    assert compute(net)[0] != again


def test_a_user_class_on_jaxtypings_bases_is_the_users():
    # Its own method can run wherever it is read: walked as a user's class, by identity.
    def make() -> type:
        class Mine(AbstractArray):
            array_type = Array
            dtypes = ("float32",)  # pyright: ignore[reportAssignmentType]
            dims = ()
            index_variadic = None
            dim_str = ""

            def helper(self) -> int:
                return 1

        return Mine

    assert es.stable_key(make()) != es.stable_key(make())


def test_type_checked_rebuilt_functions_check_their_own_annotations():
    beartype = pytest.importorskip("beartype").beartype

    def make(spec: str) -> Any:
        @jaxtyped(typechecker=beartype)
        def f(x: Float[Array, spec]) -> Float[Array, spec]:
            return x * 2.0

        return f

    @es.filter_jit
    def apply(f, x):
        return f(x)

    x = jnp.ones(3)
    for _ in range(3):
        np.testing.assert_allclose(apply(make("3"), x), 2.0)
    # (beartype's wrapper of each rebuilt function is code generated into a namespace of its
    # own, keyed as the user's: each is traced again, whatever its annotations.) Another
    # annotation is another program: jaxtyping's check runs in the trace, and fails.
    with pytest.raises(Exception, match="(?i)type"):
        apply(make("4"), x)
    np.testing.assert_allclose(apply(make("n"), x), 2.0)


@dataclasses.dataclass(frozen=True)
class _Spec:
    x: _f("n")


def test_dataclass_fields_with_annotations_key_by_class():
    # A user's dataclass annotated with jaxtyping: keyed (its class too) without walking
    # jaxtyping's classes as the user's, and the class's key holds.
    k, watch = compute(_Spec)
    assert watch.valid() and compute(_Spec)[0] == k


@dataclasses.dataclass(frozen=True, init=False)
class _NoInit:
    scale: float = 1.0


def test_dataclasses_are_judged_by_where_their_generated_code_lives():
    # On Python 3.10 (no `co_qualname`) the first method with the class's qualified name
    # decided: a library dataclass's generated `__init__` ("<string>") made jaxtyping's dims the
    # user's (walked in every annotation's key), and a user's dataclass without `__init__`
    # took its `__repr__` (wrapped by `dataclasses`, library code) for its own: a constant.
    from jaxtyping import _array_types

    from eqxstable._keys._origin import library_class

    assert library_class(_array_types._NamedDim) and library_class(_array_types._FixedDim)
    assert not library_class(_NoInit)
    before, watch = compute(_NoInit)
    _NoInit.scale = 2.0  # pyright: ignore[reportAttributeAccessIssue]
    try:
        assert not watch.valid() and compute(_NoInit)[0] != before
    finally:
        _NoInit.scale = 1.0  # pyright: ignore[reportAttributeAccessIssue]


def test_a_users_array_type_is_keyed_as_the_users_class():
    # `Float[MyArray, "n"]`: jaxtyping's `isinstance` runs `isinstance(x, MyArray)` (its
    # metaclass's check, a user's), and before jaxtyping 0.3 the annotation derives from it.
    class Meta(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return hasattr(obj, "shape") and cls.strict is False  # pyright: ignore

    class MyArray(metaclass=Meta):
        strict = False

    ann = Float[MyArray, "n"]
    before, watch = compute(ann)
    if type(ann) is type(Float[Array, "n"]):
        # A rebuilt annotation is one key; not before jaxtyping 0.3, where the annotation's
        # metaclass derives from the user's (a user class then, walked, by identity).
        assert es.stable_key(Float[MyArray, "n"]) == before
    MyArray.strict = True  # pyright: ignore[reportAttributeAccessIssue]
    assert not watch.valid() and compute(ann)[0] != before
    # Its metaclass, whose `__instancecheck__` jaxtyping's check runs: watched too.
    _, watch = compute(ann)
    Meta.__instancecheck__ = lambda cls, obj: True  # pyright: ignore[reportAttributeAccessIssue]
    assert not watch.valid()


def test_a_keyed_annotation_class_is_freed():
    # Before jaxtyping 0.3 its namespace holds its own `__dict__` and `__weakref__` descriptors,
    # each holding the class: a watch state holding them kept every annotation ever keyed.
    import gc
    import weakref

    def keyed() -> weakref.ref:
        ann = _f("q r")
        es.stable_key(ann)
        es.stable_key(_spec_function(Float, Array, "q r"))
        return weakref.ref(ann)

    ref = keyed()
    gc.collect()
    assert ref() is None
