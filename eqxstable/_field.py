"""`eqxstable.field`: `equinox.field` with `dynamic=True` for swept Python hyperparameters."""

import inspect
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp


MSG_DYNAMIC_AND_STATIC = (
    "`eqxstable.field(dynamic=True, static=True)`: a field cannot be both. `dynamic=True` stores "
    "a Python number as an array so that changing it does not recompile; `static=True` makes it "
    "part of the PyTree structure so that every new value recompiles. Keep `dynamic=True` for a "
    "hyperparameter you sweep, or `static=True` for a value Python code branches on (a size, a "
    "flag), not both."
)

# `bool` is listed for completeness: JAX has no weak booleans, so a dynamic `True` is a `bool`
# array, which is what `jnp.asarray(True)` gives anyway.
_PYTHON_SCALARS = (bool, int, float, complex)


class _ToArray:
    """The converter of a dynamic field: the user's converter first, then a Python scalar
    becomes a weakly typed 0-d array (`jnp.asarray(0.1)`), so that a `float32` model times a
    dynamic `0.1` stays `float32`, exactly as with the Python float."""

    __slots__ = ("converter", "__signature__")

    def __init__(self, converter: Callable[[Any], Any] | None):
        self.converter = converter
        # Equinox reads the converter's signature to annotate the dataclass `__init__`.
        self.__signature__ = _signature(converter)

    def __call__(self, value: Any) -> Any:
        if self.converter is not None:
            value = self.converter(value)
        if type(value) in _PYTHON_SCALARS:
            return jnp.asarray(value)
        return value


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
        kwargs["converter"] = _ToArray(kwargs.get("converter"))
    return eqx.field(**kwargs)
