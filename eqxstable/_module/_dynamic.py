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
under `jax.enable_x64`. The kind (`"float"`, ...) and the field's name are the node's data, part
of the PyTree structure: a model built with `2` and one built with `2.0` never share a compiled
program.

The leaf is an array to `eqx.is_array`, so arithmetic over all array leaves (an EMA or Polyak
update of a target network, `optax.incremental_update`) reaches it. Such arithmetic can never
silently give a wrong number: a leaf that comes back with another dtype (`0.9 * bits` is a
float array) is refused as the node is rebuilt, with an error that names the field and the fix
(`eqx.is_inexact_array`); a `float` or `complex` leaf whose words no longer agree (integer
arithmetic that mixed two different values) is refused when the field is read. The same value on
both sides (a target network's hyperparameter) comes back unchanged from integer arithmetic.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax.core import Tracer

from .._compat import weak_convert


_INT32 = np.iinfo(np.int32)


@jtu.register_pytree_node_class
class Hyper:
    """A Python number stored by a dynamic field: `kind` (the Python type's name, static) and
    `bits` (an integer array, the one PyTree leaf). See the module's docstring."""

    __slots__ = ("kind", "bits", "name")

    def __init__(self, kind: str, bits: Any, name: str = "?"):
        self.kind = kind
        self.bits = bits
        # `Class.field`, for the errors below.
        self.name = name

    def tree_flatten(self) -> tuple[tuple[Any], tuple[str, str]]:
        return (self.bits,), (self.kind, self.name)

    @classmethod
    def tree_unflatten(cls, aux: tuple[str, str], children: Any) -> "Hyper":
        kind, name = aux
        (bits,) = children
        _check_dtype(kind, name, bits)
        return cls(kind, bits, name)

    def __repr__(self) -> str:
        return f"Hyper({self.kind}, {self.bits!r})"

    def __reduce__(self):
        return (_unpickle, (self.kind, self.bits, self.name))


MSG_ARITHMETIC = (
    "`{name}` is a dynamic field (`eqxstable.field(dynamic=True)`) holding a Python {kind}, "
    "stored as the {dtype} words of the number so that optimisers and gradients never train "
    "it. A tree operation over all array leaves gave it a {got} leaf instead, which would "
    "read back as a wrong number. Apply arithmetic only to trainable leaves: partition "
    "with `eqx.is_inexact_array` (as for `eqx.filter_grad` and optax), e.g. "
    "`params, static = eqx.partition(model, eqx.is_inexact_array)`; the dynamic field then "
    "stays as it was."
)

_DTYPES = {"bool": np.dtype(bool), "int": np.dtype(np.int32), "float": np.dtype(np.uint32)}
_DTYPES["complex"] = _DTYPES["float"]


def _check_dtype(kind: str, name: str, bits: Any) -> None:
    """Refuses a leaf of another dtype than the stored words' (the result of arithmetic on them),
    whether concrete or traced; placeholders without a dtype (`None`, `object()`) pass, as does
    `float0` (the cotangent of an integer leaf)."""
    dtype = getattr(bits, "dtype", None)
    if not isinstance(dtype, np.dtype):
        return
    expected = _DTYPES.get(kind)
    if expected is None or dtype == expected or dtype == jax.dtypes.float0:
        return
    raise ValueError(
        MSG_ARITHMETIC.format(name=name, kind=kind, dtype=expected.name, got=dtype.name)
    )


# Run when a `Hyper` is unpickled: a model unpickled in a fresh process may be the first instance
# of its class, and the field layer then installs the descriptor that reads it back.
unpickle_hooks: list[Callable[[], None]] = []


def _unpickle(kind: str, bits: Any, name: str = "?") -> Hyper:
    for hook in unpickle_hooks:
        hook()
    return Hyper(kind, bits, name)


def encode(value: Any, name: str = "?") -> Any:
    """The stored form of a dynamic field's value: a [`Hyper`][] for a Python number, the value
    itself for anything else (an array, `None`, an `int` outside int32's range). `name` is the
    field's (`Class.field`), for errors."""
    t = type(value)
    if t is bool:
        return Hyper("bool", jnp.asarray(value), name)
    if t is int:
        if _INT32.min <= value <= _INT32.max:
            return Hyper("int", jnp.asarray(value, dtype=jnp.int32), name)
        return value
    if t is float:
        return Hyper("float", _words(value, np.float32, np.float64), name)
    if t is complex:
        return Hyper("complex", _words(value, np.complex64, np.complex128), name)
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
    # the Python float does.
    return weak_convert(x, dtype)


# How many dimensions the leaf of one value has (a float's leaf holds three words).
_NDIM = {"int": 0, "float": 1, "complex": 1}


MSG_MIXED = (
    "`{name}` is a dynamic field (`eqxstable.field(dynamic=True)`) holding a Python {kind}, "
    "stored as the words of the number in both precisions, and they no longer agree: integer "
    "arithmetic over all array leaves mixed two different values. Apply arithmetic only to "
    "trainable leaves: partition with `eqx.is_inexact_array` (as for `eqx.filter_grad` and "
    "optax); the dynamic field then stays as it was."
)


def _consistent(kind: str, bits: np.ndarray) -> bool:
    """Whether the single- and double-precision words stored for one number still agree."""
    with np.errstate(over="ignore", invalid="ignore"):
        if kind == "float":
            single, double = bits[:1].view(np.float32)[0], bits[1:3].view(np.float64)[0]
        else:
            single, double = bits[:2].view(np.complex64)[0], bits[2:6].view(np.complex128)[0]
        rounded = np.asarray(double).astype(single.dtype)
    if np.isnan(single) or np.isnan(rounded):
        return bool(np.isnan(single) and np.isnan(rounded))
    return rounded.tobytes() == np.asarray(single).tobytes()


def _python_value(kind: str, bits: np.ndarray, x64: bool, name: str = "?") -> Any:
    if kind == "int":
        return int(bits)
    if not _consistent(kind, bits):
        raise ValueError(MSG_MIXED.format(name=name, kind=kind))
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
        return jnp.asarray(_python_value(kind, np.asarray(bits), x64, h.name))
    # Inside a trace, or a stack of values (`eqx.filter_vmap` over an ensemble of models).
    return _traced(kind, bits, x64)
