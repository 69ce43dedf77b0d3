"""`StableModule`: an `equinox.Module` whose non-array leaves are canonical after construction.

Equinox builds a module in its metaclass `__call__`: `__init__` (or the dataclass `__init__` and
`__post_init__`), then each field's converter, then its check that no JAX array is static, then
`__check_init__`. `StableModule` joins in at two points:

- every static field gets a converter (after the user's own) that freezes the value into a
  hashable canonical form, so lists, dicts, sets and NumPy arrays work as static values, and a
  JAX array is rejected with a clear error *before* Equinox's own warning;
- after Equinox's `__call__` has returned, the dynamic fields are stabilized in place: the
  instance is brand new and nobody else has seen it yet.
"""

import copy
import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

import equinox as eqx
from typing_extensions import dataclass_transform

from ._field import field
from ._stabilize import stabilize_fields, stabilize_static, type_name


if TYPE_CHECKING:
    from equinox._module._module import _ModuleMeta
else:
    _ModuleMeta = type(eqx.Module)


class _Freeze:
    """The converter that `StableModule` gives each static field: the user's converter (if
    any), then the canonical hashable form of the value (see `stabilize_static`)."""

    __slots__ = ("owner", "name", "converter", "__signature__")

    def __init__(self, owner: str, name: str, converter: Callable[[Any], Any] | None, ann: Any):
        self.owner = owner
        self.name = name
        self.converter = converter
        # Equinox reads a converter's signature to annotate the dataclass `__init__` of a
        # subclass; it should still show the user's type, not `Any`.
        try:
            self.__signature__ = inspect.signature(converter) if converter else None
        except (TypeError, ValueError):
            self.__signature__ = None
        if self.__signature__ is None:
            param = inspect.Parameter("value", inspect.Parameter.POSITIONAL_ONLY, annotation=ann)
            self.__signature__ = inspect.Signature([param])

    def __call__(self, value: Any) -> Any:
        if self.converter is not None:
            value = self.converter(value)
        return stabilize_static(value, self.owner, self.name)


def _freeze_static_fields(cls: type) -> None:
    # Each dataclass has its own `__dataclass_fields__` dict, but an inherited entry is the
    # parent's very `Field` object, so it is replaced by a copy, never changed: a plain
    # `eqx.Module` base keeps its fields as they were.
    own = cls.__dict__["__dataclass_fields__"]
    for f in dataclasses.fields(cls):  # pyright: ignore[reportArgumentType]
        if not f.metadata.get("static", False):
            continue
        converter = f.metadata.get("converter")
        if isinstance(converter, _Freeze):
            converter = converter.converter
        new = copy.copy(f)
        freeze = _Freeze(type_name(cls), f.name, converter, f.type)
        new.metadata = types.MappingProxyType({**f.metadata, "converter": freeze})
        own[f.name] = new


@dataclass_transform(field_specifiers=(dataclasses.field, eqx.field, field))
class _StableModuleMeta(_ModuleMeta):
    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs):
        cls = super().__new__(mcs, name, bases, namespace, **kwargs)
        _freeze_static_fields(cls)
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        self = super().__call__(*args, **kwargs)
        stabilize_fields(self, f"{type_name(cls)}(...)")
        return self


class StableModule(eqx.Module, metaclass=_StableModuleMeta):
    """An [`equinox.Module`](https://docs.kidger.site/equinox/api/module/module/) that is the
    same static structure every time it is rebuilt from equivalent parts.

    Write it exactly as an `eqx.Module` (custom `__init__` or dataclass fields,
    `__post_init__`, `__check_init__`, `eqx.field(converter=...)`, abstract bases). After
    construction:

    - every non-array leaf reachable from its fields, including inside nested Equinox modules
        (an `eqx.nn.MLP`'s activation), lists, tuples, NamedTuples (an optax optimizer) and
        dicts, is replaced by [`eqxstable.intern`][]`(leaf)`, so that a lambda, a
        `functools.partial` or a `jax.jit`-wrapped function built afresh in `__init__` is the
        very same object as last time, and **plain** `equinox.filter_jit` hits its cache;
    - a static field (`eqx.field(static=True)`) holding a list, dict, set or NumPy array holds
        a tuple, `FrozenDict`, frozenset or read-only array holder instead, which can be hashed;
        a JAX array in a static field is an error that says to make it a regular field.

    Nested modules that you pass in are never changed: one whose leaves change is rebuilt.
    A module edited afterwards with `eqx.tree_at` bypasses `__init__`, so its new leaves are
    not canonical: call [`eqxstable.stabilize`][] on the result.

    !!! example

        ```python
        import equinox as eqx
        import eqxstable as es
        import jax, jax.numpy as jnp

        class Net(es.StableModule):
            mlp: eqx.nn.MLP

            def __init__(self, key):
                self.mlp = eqx.nn.MLP(2, 2, 8, 2, activation=lambda x: x * 0.5, key=key)

        traces = 0

        @eqx.filter_jit
        def run(net, x):
            global traces
            traces += 1
            return net.mlp(x)

        for seed in range(5):  # The lambda is the same object every time: one compile.
            run(Net(jax.random.key(seed)), jnp.ones(2))
        assert traces == 1
        ```
    """
