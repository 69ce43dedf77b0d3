"""How `eqxstable.field(dynamic=True)` stores a Python number: traced, but never trained.

The field must be an array to `equinox.filter_jit` (so that a new value does not recompile) and
must not be one to the filters that users hand to gradients and optimisers
(`equinox.is_inexact_array`, which `eqx.filter_grad`, `eqx.filter_value_and_grad` and the usual
`optim.init(eqx.filter(model, eqx.is_inexact_array))` use). Both hold for an array of an integer
dtype. So the number is stored in a [`Hyper`][] PyTree node whose one leaf is a `uint32` array
holding the number's bits (an `int32` array for an `int`, a `bool` array for a `bool`), and the
field reads back, through a descriptor, as the weakly typed array that `jnp.asarray(number)`
gives *at the time of reading*:

| assigned            | leaf (what JAX traces)           | read back (x64: 64 bits)   |
|---------------------|----------------------------------|----------------------------|
| `bool`              | `bool[]`                         | `bool[]`                   |
| `int` (int32 range) | `int32[]`                        | weak `int32[]`             |
| `float`             | `uint32[3]`: f32 and f64 bits    | weak `float32[]`           |
| `complex`           | `uint32[6]`: c64 and c128 bits   | weak `complex64[]`         |
| a larger `int`      | kept as the Python `int`: static | the `int`                  |
| anything else       | kept as it is                    | as it is                   |

Both precisions are stored, so a value built with x64 off reads back with float64 precision
under `jax.enable_x64`. The kind (`"float"`, ...) is the node's data, part of the PyTree
structure: a model built with `2` and one built with `2.0` never share a compiled program.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax.core import Tracer


_INT32 = np.iinfo(np.int32)


@jtu.register_pytree_node_class
class Hyper:
    """A Python number stored by a dynamic field: `kind` (the Python type's name, static) and
    `bits` (an integer array, the one PyTree leaf). See the module's docstring."""

    __slots__ = ("kind", "bits")

    def __init__(self, kind: str, bits: Any):
        self.kind = kind
        self.bits = bits

    def tree_flatten(self) -> tuple[tuple[Any], str]:
        return (self.bits,), self.kind

    @classmethod
    def tree_unflatten(cls, kind: str, children: Any) -> "Hyper":
        return cls(kind, *children)

    def __repr__(self) -> str:
        return f"Hyper({self.kind}, {self.bits!r})"

    def __reduce__(self):
        return (_unpickle, (self.kind, self.bits))


# Run when a `Hyper` is unpickled: a model unpickled in a fresh process may be the first instance
# of its class, and the field layer then installs the descriptor that reads it back.
unpickle_hooks: list[Callable[[], None]] = []


def _unpickle(kind: str, bits: Any) -> Hyper:
    for hook in unpickle_hooks:
        hook()
    return Hyper(kind, bits)


def encode(value: Any) -> Any:
    """The stored form of a dynamic field's value: a [`Hyper`][] for a Python number, the value
    itself for anything else (an array, `None`, an `int` outside int32's range)."""
    t = type(value)
    if t is bool:
        return Hyper("bool", jnp.asarray(value))
    if t is int:
        if _INT32.min <= value <= _INT32.max:
            return Hyper("int", jnp.asarray(value, dtype=jnp.int32))
        return value
    if t is float:
        return Hyper("float", _words(value, np.float32, np.float64))
    if t is complex:
        return Hyper("complex", _words(value, np.complex64, np.complex128))
    return value


def _words(value: Any, single: type, double: type) -> jax.Array:
    # A float beyond float32's range is `inf` there, as `jnp.asarray` makes it without x64.
    with np.errstate(over="ignore"):
        parts = [np.array([value], dtype=t).view(np.uint32) for t in (single, double)]
    return jnp.asarray(np.concatenate(parts))


def _x64() -> bool:
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def _weak(x: Any, dtype: Any) -> Any:
    # Weak typing is what makes a dynamic `0.1` times a bfloat16 array stay bfloat16, exactly as
    # the Python float does. JAX has no public way to mark an array weakly typed; this is the
    # function `jnp.asarray(0.1)` itself ends in.
    from jax._src.lax.lax import _convert_element_type

    return _convert_element_type(x, np.dtype(dtype), weak_type=True)


# How many dimensions the leaf of one value has (a float's leaf holds three words).
_NDIM = {"int": 0, "float": 1, "complex": 1}


def _python_value(kind: str, bits: np.ndarray, x64: bool) -> Any:
    if kind == "int":
        return int(bits)
    if kind == "float":
        return float(bits[1:3].view(np.float64)[0] if x64 else bits[:1].view(np.float32)[0])
    return complex(bits[2:6].view(np.complex128)[0] if x64 else bits[:2].view(np.complex64)[0])


def _traced(kind: str, bits: Any, x64: bool) -> Any:
    bitcast = jax.lax.bitcast_convert_type
    if kind == "int":
        return _weak(bits, jnp.int64 if x64 else jnp.int32)
    if kind == "float":
        value = bitcast(bits[..., 1:3], jnp.float64) if x64 else bitcast(bits[..., 0], jnp.float32)
        return _weak(value, value.dtype)
    if x64:
        parts = bitcast(bits[..., 2:6].reshape(*bits.shape[:-1], 2, 2), jnp.float64)
    else:
        parts = bitcast(bits[..., 0:2], jnp.float32)
    value = jax.lax.complex(parts[..., 0], parts[..., 1])
    return _weak(value, value.dtype)


def decode(h: Hyper) -> Any:
    """The value a dynamic field reads back as: the weakly typed array that `jnp.asarray` of the
    stored Python number gives now (with or without x64). A `Hyper` whose leaf is not an array
    (`None` after `eqx.filter`, a placeholder of a JAX transformation) is returned as it is."""
    bits, kind = h.bits, h.kind
    if not isinstance(bits, (jax.Array, np.ndarray)):
        return h
    if kind == "bool":
        return bits
    x64 = _x64()
    if not isinstance(bits, Tracer) and bits.ndim == _NDIM[kind]:
        # One value, outside a trace: the Python number, given to `jnp.asarray` as it was.
        return jnp.asarray(_python_value(kind, np.asarray(bits), x64))
    # Inside a trace, or a stack of values (`eqx.filter_vmap` over an ensemble of models).
    return _traced(kind, bits, x64)
