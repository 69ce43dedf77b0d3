"""Every entry of a user class's own namespace is keyed as what it is, whatever its name
(`K-user-class`, attack round 10a, findings 03 to 06): an enum's `_missing_` hook, dunder data
(`__registry__ = {...}`), `__annotations__`, and dunder descriptors (`__class_getitem__`, a dunder
`@property`) were left out or held by identity, so a rebuilt jitted function reading them kept a
stale program."""

import enum
import typing

import equinox as eqx
import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es


_X = jnp.float32(1.0)


def _run(make: typing.Callable, change: typing.Callable) -> tuple[list, list, int]:
    """Calls a rebuilt reader before and after `change()` under `es.filter_jit` and eagerly;
    returns both answers and the number of traces."""
    traces = 0

    def run(fn, x):
        nonlocal traces
        traces += 1
        return fn(x)

    jitted = es.filter_jit(run)
    got, eager = [], []
    for step in range(2):
        if step:
            change()
        fn = make()
        got.append(float(jitted(fn, _X)))
        eager.append(float(fn(_X)))
    return got, eager, traces


_STRICT = True


class _Mode(enum.Enum):
    FAST = 1.0
    SAFE = 2.0

    @classmethod
    def _missing_(cls, value):
        return cls.FAST if _STRICT else cls.SAFE


@pytest.mark.counts_traces
def test_an_enum_missing_hook_reading_a_global():
    global _STRICT

    def change():
        global _STRICT
        _STRICT = False

    try:
        got, eager, traces = _run(lambda: lambda x: x * _Mode(99).value, change)
    finally:
        _STRICT = True
    assert got == eager == [1.0, 2.0]
    assert traces == 2


@pytest.mark.counts_traces
def test_an_alias_added_to_an_enum_value_map():
    # `EnumMeta`'s own tables are the class's data: an alias added in place changes `Mode(5.0)`.
    class Mode(enum.Enum):
        FAST = 1.0
        SAFE = 2.0

        @classmethod
        def _missing_(cls, value):
            return cls.FAST

    got, eager, traces = _run(
        lambda: lambda x: x * Mode(5.0).value,
        lambda: Mode._value2member_map_.__setitem__(5.0, Mode.SAFE),
    )
    assert got == eager == [1.0, 2.0]
    assert traces == 2


class _Registry:
    __registry__ = {"scale": 1.0}
    __scales__ = [1.0]

    def scale(self):
        return type(self).__registry__["scale"] * type(self).__scales__[0]


@pytest.mark.counts_traces
@pytest.mark.parametrize("which", ["dict", "list"])
def test_dunder_data_of_a_class_changed_in_place(which):
    reg = _Registry()

    def change():
        if which == "dict":
            _Registry.__registry__["scale"] = 2.0
        else:
            _Registry.__scales__[0] = 2.0

    try:
        got, eager, traces = _run(lambda: lambda x: x * reg.scale(), change)
    finally:
        _Registry.__registry__["scale"] = 1.0
        _Registry.__scales__[0] = 1.0
    assert got == eager == [1.0, 2.0]
    assert traces == 2


@pytest.mark.counts_traces
def test_class_annotations_changed_in_place():
    class Spec:
        w: typing.Annotated[float, 1.0]

    def read(x):
        return x * typing.get_type_hints(Spec, include_extras=True)["w"].__metadata__[0]

    def change():
        Spec.__annotations__["w"] = typing.Annotated[float, 2.0]

    got, eager, traces = _run(lambda: lambda x: read(x), change)
    assert got == eager == [1.0, 2.0]
    assert traces == 2


_SCALE = 1.0


class _Box:
    def __class_getitem__(cls, item):
        return _SCALE


class _Holder:
    @property
    def __scale__(self):
        return _SCALE

    @classmethod
    def __factor__(cls):
        return _SCALE

    @staticmethod
    def __static__():
        return _SCALE


_READERS = {
    "__class_getitem__": lambda: lambda x: x * _Box[int],
    "dunder property": lambda: lambda x: x * _Holder().__scale__,
    "dunder classmethod": lambda: lambda x: x * _Holder.__factor__(),
    "dunder staticmethod": lambda: lambda x: x * _Holder.__static__(),
}


@pytest.mark.counts_traces
@pytest.mark.parametrize("name", list(_READERS))
def test_dunder_descriptors_reading_a_global(name):
    global _SCALE

    def change():
        global _SCALE
        _SCALE = 2.0

    try:
        got, eager, traces = _run(_READERS[name], change)
    finally:
        _SCALE = 1.0
    assert got == eager == [1.0, 2.0]
    assert traces == 2


@pytest.mark.counts_traces
def test_a_class_referring_to_itself_shares_one_program():
    # A class holding itself, an instance of itself and a list of them: the key terminates, and
    # rebuilt readers of the unchanged class share one program.
    class Node:
        __all__ = []
        scale = 3.0

    Node.me = Node  # pyright: ignore[reportAttributeAccessIssue]
    Node.root = Node()  # pyright: ignore[reportAttributeAccessIssue]
    Node.__all__.append(Node.root)  # pyright: ignore[reportAttributeAccessIssue]
    got, eager, traces = _run(
        lambda: lambda x: x * Node.me.scale * len(Node.__all__),  # pyright: ignore
        lambda: None,
    )
    assert got == eager == [3.0, 3.0]
    assert traces == 1
    got, eager, traces = _run(
        lambda: lambda x: x * len(Node.__all__), lambda: Node.__all__.append(Node())
    )
    assert got == eager == [1.0, 2.0]


def test_a_reader_of_an_annotated_class_is_still_substituted():
    # A typing form in a class's annotations is compared by its own `==`; the class's key names
    # the class itself, so two readers of it read the very same form: still substituted.
    class Config(eqx.Module):
        k: int | None = None
        w: list[float] | None = None

    def make():
        return lambda x: x * (Config().k or 2.0)

    a, b = make(), make()
    assert es.stable_key(a) == es.stable_key(b)
    assert es.intern(b) is es.intern(a)


_KINDS = ("dict", "list", "classmethod", "staticmethod", "property")
_NAMES = ("plain", "_sunder_", "__dunder__")


def _class_with(kind: str, name: str, value: float) -> type:
    table = {"s": value}
    attrs: dict[str, typing.Any] = {
        "dict": {"s": value},
        "list": [value],
        "classmethod": classmethod(lambda cls: table["s"]),
        "staticmethod": staticmethod(lambda: table["s"]),
        "property": property(lambda self: table["s"]),
    }
    cls = type("Made", (), {name: attrs[kind]})
    cls.table = table  # pyright: ignore[reportAttributeAccessIssue]
    return cls


def _read(cls: type, kind: str, name: str) -> float:
    v = getattr(cls, name) if kind != "property" else getattr(cls(), name)
    if kind == "dict":
        return v["s"]
    if kind == "list":
        return v[0]
    return v() if kind in ("classmethod", "staticmethod") else v


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(_KINDS),
    name=st.sampled_from(_NAMES),
    values=st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=2, max_size=4),
)
def test_any_entry_of_any_name_changed_between_calls(kind, name, values):
    # Whatever the entry's name, a change of what it holds (in place for data, through the dict
    # its functions read for descriptors) is seen by a rebuilt jitted reader.
    cls = _class_with(kind, name, values[0])

    def change(v):
        if kind == "dict":
            getattr(cls, name)["s"] = v
        elif kind == "list":
            getattr(cls, name)[0] = v
        else:
            cls.table["s"] = v  # pyright: ignore[reportAttributeAccessIssue]

    jitted = es.filter_jit(lambda fn, x: fn(x))
    for v in values:
        change(v)
        fn = lambda x: x * _read(cls, kind, name)  # noqa: E731
        assert float(jitted(fn, _X)) == float(fn(_X)) == v
