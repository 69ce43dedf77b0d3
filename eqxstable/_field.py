"""`eqxstable.field`: `equinox.field` with `dynamic=True` for swept Python hyperparameters."""

import dataclasses
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any

import equinox as eqx

from ._access import install
from ._dynamic import encode


MSG_DYNAMIC_AND_STATIC = (
    "`eqxstable.field(dynamic=True, static=True)`: a field cannot be both. `dynamic=True` stores "
    "a Python number as an array so that changing it does not recompile; `static=True` makes it "
    "part of the PyTree structure so that every new value recompiles. Keep `dynamic=True` for a "
    "hyperparameter you sweep, or `static=True` for a value Python code branches on (a size, a "
    "flag), not both."
)

class _DynamicField(dataclasses.Field):
    """The `dataclasses.Field` of a dynamic field: it notes its class when Python creates it, so
    that the read-back descriptor can be installed once the dataclass is complete."""

    __slots__ = ()

    def __set_name__(self, owner: type, name: str) -> None:
        super().__set_name__(owner, name)
        with _lock:
            _pending.append((weakref.ref(owner), name))


# Dynamic fields whose class was being created when last seen (`__set_name__` runs before the
# dataclass machinery): their descriptors are installed by the next `install_pending`.
_pending: list[tuple[weakref.ref, str]] = []
_lock = threading.Lock()


def install_pending() -> None:
    """Installs the read-back descriptor of every dynamic field whose class is complete."""
    if not _pending:
        return
    with _lock:
        waiting = []
        for ref, name in _pending:
            owner = ref()
            if owner is None:
                continue
            if "__dataclass_fields__" in owner.__dict__:
                install(owner, name)
            else:
                waiting.append((ref, name))
        _pending[:] = waiting


class _ToHyper:
    """The converter of a dynamic field: the user's converter first, then a Python number is
    stored as a [`Hyper`][eqxstable._dynamic.Hyper] (see `eqxstable/_dynamic.py`)."""

    __slots__ = ("converter", "__signature__")

    def __init__(self, converter: Callable[[Any], Any] | None):
        self.converter = converter
        # Equinox reads the converter's signature to annotate the dataclass `__init__`.
        self.__signature__ = _signature(converter)

    def __call__(self, value: Any) -> Any:
        install_pending()
        if self.converter is not None:
            value = self.converter(value)
        return encode(value)


def _signature(converter: Callable[[Any], Any] | None) -> inspect.Signature:
    annotation: Any = bool | int | float | complex
    if converter is not None:
        try:
            params = list(inspect.signature(converter).parameters.values())
        except (TypeError, ValueError):
            params = []
        annotation = Any
        if params and params[0].annotation is not inspect.Parameter.empty:
            annotation = params[0].annotation
    param = inspect.Parameter("value", inspect.Parameter.POSITIONAL_ONLY, annotation=annotation)
    return inspect.Signature([param])


def field(*, dynamic: bool = False, **kwargs: Any) -> Any:
    """[`equinox.field`](https://docs.kidger.site/equinox/api/module/advanced_fields/) with one
    more option, `dynamic`.

    **Arguments:**

    - `dynamic`: if `True`, a Python `bool`, `int`, `float` or `complex` stored in this field is
        converted to a 0-d JAX array that keeps Python's weak typing (`jnp.asarray(0.1)`). It is
        then a PyTree leaf that `equinox.filter_jit` traces, so rebuilding the module with a new
        value (a learning rate, a dropout rate, a temperature) does not recompile, and a
        `float32` model times a dynamic `0.1` stays `float32`. Read the value back with
        `float(m.scale)`. Any other value (an array, `None`) is kept as it is. A user
        `converter=` runs first. Cannot be combined with `static=True`.
    - `**kwargs`: everything else is passed to `equinox.field` (`static`, `converter`,
        `default`, `init`, ...).

    **Returns:**

    A dataclass field, for use in an `equinox.Module` or [`eqxstable.StableModule`][].

    **Raises:**

    `ValueError` for `dynamic=True` together with `static=True`.

    !!! example

        ```python
        import equinox as eqx
        import eqxstable as es
        import jax.numpy as jnp

        class Scale(es.StableModule):
            factor: float = es.field(dynamic=True)

            def __call__(self, x):
                return self.factor * x

        @eqx.filter_jit
        def run(model, x):
            return model(x)

        for factor in (0.1, 0.2, 0.3):  # One compilation for the whole sweep.
            run(Scale(factor), jnp.ones(3))
        ```
    """
    if dynamic:
        if kwargs.get("static", False):
            raise ValueError(MSG_DYNAMIC_AND_STATIC)
        kwargs["converter"] = _ToHyper(kwargs.get("converter"))
        f = eqx.field(**kwargs)
        f.__class__ = _DynamicField
        return f
    return eqx.field(**kwargs)
