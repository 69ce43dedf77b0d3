"""`eqxstable.field`: `equinox.field` with `dynamic=True` for swept Python hyperparameters.

A dynamic field is stored by its converter (a [`Hyper`][eqxstable._module._dynamic.Hyper] node
holding the number's bits) and read back through a descriptor (`_access.FieldAccess`). The
descriptor can only be put on the class once the dataclass machinery is done with it, after the
class body, so the field notes its class when Python creates it (`__set_name__`) and the
descriptor is installed by the next module construction (or at once, by `StableModule`).
"""

import dataclasses
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any

import equinox as eqx

from ._access import install
from ._dynamic import encode, unpickle_hooks


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
        converter = self.metadata.get("converter")
        if isinstance(converter, _ToHyper) and converter.name == "?":
            # The stored numbers name their field in the errors they raise.
            converter.name = f"{owner.__qualname__}.{name}"
        with _lock:
            _pending.append((weakref.ref(owner), name))


# Dynamic fields whose class was being created when last seen (`__set_name__` runs before the
# dataclass machinery): their descriptors are installed by the next `install_pending`.
_pending: list[tuple[weakref.ref, str]] = []
_lock = threading.RLock()  # reentrant: garbage collection may run a class-creation hook inside


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


unpickle_hooks.append(install_pending)


class _ToHyper:
    """The converter of a dynamic field: the user's converter first, then a Python number is
    stored as a [`Hyper`][eqxstable._module._dynamic.Hyper] (see `eqxstable/_dynamic.py`)."""

    __slots__ = ("converter", "name", "__signature__")

    def __init__(self, converter: Callable[[Any], Any] | None):
        self.converter = converter
        self.name = "?"
        # Equinox reads the converter's signature to annotate the dataclass `__init__`.
        self.__signature__ = _signature(converter)

    def __call__(self, value: Any) -> Any:
        install_pending()
        if self.converter is not None:
            value = self.converter(value)
        return encode(value, self.name)


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

    - `dynamic`: if `True`, a Python `bool`, `int` (in int32's range), `float` or `complex`
        (one that float32 holds without making it `inf` or 0) stored in this field is traced
        but never trained. `equinox.filter_jit` traces it, so
        rebuilding the module with a new value (a learning rate, a dropout rate, a weight decay)
        does not recompile; `eqx.is_inexact_array` does not see it, so `eqx.filter_grad` and an
        optimiser set up with `eqx.filter(model, eqx.is_inexact_array)` leave it as it was. It
        reads back as the Python number assigned, exactly, outside a trace; inside one, as the
        weakly typed array `jnp.asarray(value)` gives (in the current precision), so a
        `bfloat16` model times a dynamic `0.1` stays `bfloat16`; a `bool` as the weakly
        typed integer 0 or 1 (`True + True` is 2, as in Python). Arithmetic inside a trace is
        JAX's (an int32 `n ** 2` wraps past int32's range). A reduction over all
        `eqx.is_array` leaves (a global norm, a parameter count) includes the stored words:
        reduce over `eqx.is_inexact_array` leaves. Arithmetic over all array
        leaves that changes the stored words raises a `ValueError` naming the field when it
        is next read outside a trace. Any other
        value (an array, `None`, a larger `int`, a float out of float32's range) is kept as it
        is, static. A user `converter=` runs
        first. Cannot be combined with `static=True`. How it is stored: `eqxstable/_dynamic.py`.
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

        traces = 0

        @eqx.filter_jit
        def run(model, x):
            global traces
            traces += 1
            return model(x)

        for factor in (0.1, 0.2, 0.3):
            run(Scale(factor), jnp.ones(3))
        assert traces == 1  # One compilation for the whole sweep.
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
