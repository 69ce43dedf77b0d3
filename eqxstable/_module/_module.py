"""`StableModule`: an `equinox.Module` whose non-array leaves are canonical after construction.

Equinox builds a module in its metaclass `__call__`: `__init__` (or the dataclass `__init__` and
`__post_init__`), then each field's converter, then its check that no array is static, then
`__check_init__`. `StableModule` joins in at three points, none of which changes a field's
metadata:

- at class creation, each static field gets a descriptor (`_access.FieldAccess`): the instance
  holds the canonical form (`_static.Static`), which is what JAX and Equinox hash and compare,
  and the module's code reads the value as it was assigned;
- right after `__init__` (a metaclass between Equinox's and `type`), static fields without a
  converter are made canonical, before Equinox's check looks at them (a converter's result is
  made canonical as Equinox stores it, see `_access.py`);
- after Equinox's `__call__` has returned, the dynamic fields are stabilized in place: the
  instance is brand new and nobody else has seen it yet.
"""

import dataclasses
from typing import Any, TYPE_CHECKING

import equinox as eqx
from typing_extensions import dataclass_transform

from ._access import install
from ._field import field, install_pending
from ._given import remember
from ._paths import type_name
from ._stabilize import field_names, stabilize_fields, stabilize_static, static_fields


if TYPE_CHECKING:
    from equinox._module._module import _ModuleMeta
else:
    _ModuleMeta = type(eqx.Module)


def _freeze(value: Any, owner: type, name: str) -> Any:
    return stabilize_static(value, type_name(owner), name)


class _FreezeAfterInit(_ModuleMeta.__mro__[1]):  # pyright: ignore
    """Sits after Equinox's metaclass in the method resolution order, so its `__call__` runs
    inside Equinox's, between `__init__` and Equinox's checks of the fields."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:  # pyright: ignore[reportSelfClsParameterName]
        __tracebackhide__ = True
        self = super().__call__(*args, **kwargs)
        d = self.__dict__
        for f in static_fields(cls):
            # A field with a converter is made canonical when Equinox stores the converted value:
            # the converter gets the value as it was assigned, as in an `eqx.Module`.
            if f.name in d and f.metadata.get("converter") is None:
                given = d[f.name]
                d[f.name] = static = _freeze(given, cls, f.name)
                # The module keeps its lists, dicts, sets and arrays frozen: it watches the
                # ones it was given, so that a later change to them raises (`_given.py`).
                remember(self, f.name, given, static)
        return self


@dataclass_transform(field_specifiers=(dataclasses.field, eqx.field, field))
class _StableModuleMeta(_ModuleMeta, _FreezeAfterInit):
    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs):
        cls = super().__new__(mcs, name, bases, namespace, **kwargs)
        for f in static_fields(cls):
            install(cls, f.name, _freeze)
        install_pending()
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
    - a static field (`eqx.field(static=True)`) is held in a hashable canonical form that
        compares type-exactly (`2`, `2.0` and `True` are three static values, so they never
        share a compiled program, under plain `equinox.filter_jit` too), and lists, dicts, sets
        and NumPy arrays work there; the module's code reads the value as it was assigned
        (`self.cfg` is a `dict`, `self.perm` a NumPy array), read-only where the original was
        mutable. A JAX array in a static field is an error that says to make it a regular field.

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

    def __hash__(self) -> int:
        # Equinox hashes `getattr(self, name)`: here that is the value as assigned (a `dict` is
        # not hashable), so the canonical forms that `__dict__` holds are hashed instead.
        d = self.__dict__
        return hash(tuple((name, d.get(name)) for name in field_names(type(self))))  # pyright: ignore
