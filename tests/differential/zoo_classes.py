"""The zoo's user classes holding attributes of every kind under every kind of name (attack round
10a, findings 03 to 06): dunder and `_sunder_` data changed in place, `__annotations__`, dunder
descriptors and an enum's `_missing_` hook reading a global of their module that is rebound, and a
class referring to itself. Fresh classes per case, defined in a namespace of their own (a user's
script), so that a change never outlives its case."""

import textwrap
import typing
from typing import Any

from .zoo_values import kind


def _namespace(source: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "__main__", "typing": typing}
    exec(compile(textwrap.dedent(source), "<zoo class>", "exec"), ns)
    return ns


_DATA = """
class Cfg:
    __registry__ = {"s": VALUE}
    _scales_ = [VALUE]
    __annotations__ = {"w": typing.Annotated[float, VALUE]}
"""


def _data_factory(h):
    # Two instances of one class, and one of an equal class: `==` never joins them.
    one = _namespace(_DATA.replace("VALUE", "1.0"))["Cfg"]
    two = _namespace(_DATA.replace("VALUE", "1.0"))["Cfg"]
    return lambda i: [one(), one(), two()][i]


def _dunder_dict_mutate(o, i):
    type(o).__registry__["s"] = float(i + 2)


@kind("class_dunder_dict", factory=_data_factory, n=3, mutate=_dunder_dict_mutate)
def _read_dunder_dict(o):
    return type(o).__registry__["s"]


def _sunder_list_mutate(o, i):
    type(o)._scales_[0] = float(i + 2)


@kind("class_sunder_list", factory=_data_factory, n=3, mutate=_sunder_list_mutate)
def _read_sunder_list(o):
    return type(o)._scales_[0]


def _annotations_mutate(o, i):
    type(o).__annotations__["w"] = typing.Annotated[float, float(i + 2)]


@kind("class_annotations", factory=_data_factory, n=3, mutate=_annotations_mutate)
def _read_annotations(o):
    return typing.get_type_hints(type(o), include_extras=True)["w"].__metadata__[0]


_DESCRIPTORS = """
import enum

SCALE = 1.0
STRICT = True

class Box:
    def __class_getitem__(cls, item):
        return SCALE

    @property
    def __scale__(self):
        return SCALE * 10

    @classmethod
    def __factor__(cls):
        return SCALE * 100

class Mode(enum.Enum):
    FAST = 1.0
    SAFE = 2.0

    @classmethod
    def _missing_(cls, value):
        return cls.FAST if STRICT else cls.SAFE
"""


def _descriptor_factory(h):
    one = _namespace(_DESCRIPTORS)
    two = _namespace(_DESCRIPTORS)
    return lambda i: [one["Box"](), one["Box"](), two["Box"]()][i]


def _globals_of(o) -> dict[str, Any]:
    return type(o).__dict__["__factor__"].__func__.__globals__


def _descriptor_mutate(o, i):
    # A global of the class's own module, read by its dunder descriptors.
    _globals_of(o)["SCALE"] = float(i + 2)


@kind("class_dunder_descriptors", factory=_descriptor_factory, n=3, mutate=_descriptor_mutate)
def _read_descriptors(o):
    return type(o)[int] + o.__scale__ + type(o).__factor__()  # pyright: ignore


def _missing_factory(h):
    one = _namespace(_DESCRIPTORS)
    two = _namespace(_DESCRIPTORS)
    return lambda i: [one["Mode"].FAST, one["Mode"].SAFE, two["Mode"].FAST][i]


def _missing_mutate(o, i):
    type(o).__dict__["_missing_"].__func__.__globals__["STRICT"] = i % 2 == 0


@kind("enum_missing_hook_global", factory=_missing_factory, n=3, mutate=_missing_mutate)
def _read_missing(o):
    return type(o)(99).value + o.value * 10


_SELF = """
class Node:
    __all__ = []
    scale = 2.0

Node.me = Node
Node.__all__.append(Node())
"""


def _self_factory(h):
    one = _namespace(_SELF)["Node"]
    two = _namespace(_SELF)["Node"]
    return lambda i: [one, one, two][i]


def _self_mutate(o, i):
    o.__all__.append(o())
    o.me.scale = float(i + 2)


@kind("class_referring_to_itself", factory=_self_factory, n=3, mutate=_self_mutate)
def _read_self(o):
    return o.me.scale * len(o.__all__)
