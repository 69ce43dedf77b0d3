"""How `eqxstable.field(dynamic=True)` stores a Python number: traced, but never trained.

The field must be an array to `equinox.filter_jit` (so that a new value does not recompile) and
must not be one to the filters that users hand to gradients and optimisers
(`equinox.is_inexact_array`, which `eqx.filter_grad`, `eqx.filter_value_and_grad` and the usual
`optim.init(eqx.filter(model, eqx.is_inexact_array))` use). Both hold for an array of an integer
dtype. So the number is stored in a [`Hyper`][] PyTree node whose one leaf is an integer array
holding the number's words and a checksum of them, and the field reads back, through a
descriptor, as what was assigned:

| assigned            | leaf (what JAX traces)            | outside a trace | in a trace (x64)  |
|---------------------|-----------------------------------|-----------------|-------------------|
| `bool`              | `int32[3]`: 0 or 1, seal          | the `bool`      | weak int32: 0, 1  |
| `int` (int32 range) | `int32[3]`: the int, seal         | the `int`       | weak int32 (64)   |
| `float` (in range)  | `int32[5]`: f32, f64, seal        | the `float`     | weak float32 (64) |
| `complex` (same)    | `int32[8]`: c64, c128, seal       | the `complex`   | weak complex64    |
| a larger `int`      | kept as the Python `int`: static  | the `int`       | the `int`         |
| a `float` out of range | kept as the Python `float`: static | the `float` | the `float`       |
| anything else       | kept as it is                     | as it is        | as it is          |

A `bool` is read in a trace as the weakly typed integer 0 or 1, not as a JAX `bool`: Python's
`bool` is an `int`, so `flag_a + flag_b` is 2 and `~flag` is -2 as in eager Python (a JAX bool
would give a logical OR and NOT). `*`, `-`, `&`, `|`, `^`, comparisons, `jnp.where(flag, ...)`
and `jax.lax.cond(flag, ...)` agree with Python too. What still differs from a Python `bool`,
as for any traced number: `if flag:` and `not flag` need a concrete value (make the field
static to branch in Python), `x[flag]` indexes with 1 where NumPy's `x[True]` adds an axis,
`flag * bool_array` is an integer array where Python's `True * bool_array` stays `bool`.

A float is dynamic only where float32 holds it: zero, `inf`, NaN, or a magnitude between
float32's smallest normal number and its largest (about 1.2e-38 to 3.4e38). Any other finite
float (`1e200`, `1e-200`) would become `inf` or 0 in a trace without x64 (`1e200 * 1e-200`
would be NaN where Python gives 1.0), so it is kept as the Python float, static, as a larger
`int` is: a new such value recompiles, and Python arithmetic between such fields is exact. A
complex is dynamic when both its parts are. Mixing such a static float with a traced value
converts it as JAX converts any Python float (`x * 1e200` is `inf` in float32).

Arithmetic *inside* a trace is JAX's, not Python's: a dynamic `int` is a 32-bit integer without
x64, so `n ** 2` for `n = 70000` wraps around (Python gives 4_900_000_000), and `0.1 + 0.2` is
rounded to float32, exactly as with `jnp.asarray(n)`. Only the value read is exact; keep a
field that such arithmetic overflows static, or enable x64.

Outside a trace the read is the Python number itself, exactly as assigned (a float from its
double-precision words), so Python arithmetic between hyperparameters (`n * n // n`,
`eps * eps / eps`) is exact, as with a plain field. Inside a trace it is the weakly typed array
that `jnp.asarray(number)` gives *at the time of reading*, a JAX scalar like any other: 32-bit
arithmetic unless x64 is on. Both precisions are stored, so a value built with x64 off is traced
with float64 precision under `jax.enable_x64`. The kind (`"float"`, ...) and the field's name are
the node's data, part of the PyTree structure: a model built with `2` and one built with `2.0`
never share a compiled program.

The leaf is an array to `eqx.is_array`, so arithmetic over all array leaves (an EMA or Polyak
update of a target network, `optax.incremental_update`, the sum of two models) reaches it.
**A reduction over all `eqx.is_array` leaves also reaches it, and is not refused**: a global
norm or a parameter count over `eqx.filter(model, eqx.is_array)` includes the stored words (a
dynamic `2.0` adds 5 int32 words of size ~1e9 to a norm, and 5 to a count). Reduce over
`eqx.is_inexact_array` (the trainable leaves, as `eqx.filter_grad` and optax do) instead. Such
arithmetic can never silently give a wrong number when the field is read outside a trace: a
leaf that comes back with another dtype (`0.9 * bits` is a float array) is refused as the node
is rebuilt, with an error that names the field and the fix (`eqx.is_inexact_array`); a leaf of
the right dtype whose words no longer match their checksum (integer arithmetic: `3 + 3` is not
a stored 6) is refused when the field is read. The check runs once per node: the value checked
is kept on the node (not in the PyTree), so later reads cost an attribute load. Selecting whole
leaves (`jnp.where` with a scalar condition, the maximum of two equal values, a copy,
`eqx.tree_at` on other fields) keeps the words and their seal, and reads back the value.

The seal is two words: a checksum `c` of the number's words and its complement `~c`. One of the
two is negative and the other not, and `~` reverses their order, so elementwise arithmetic that
picks or clips words by their integer value instead of the number's (`jnp.maximum` or
`jnp.minimum` of two models, `jnp.where(p > 0, p, 0)`, `p * (p > 0)`, a ReLU, `jnp.abs`) never
leaves words that hold one number: the maximum of two seals is `c` of one and `~c` of the
other, and zeroing the negative words breaks the pair. Such a leaf is refused when read. A read
inside a trace is not checked (that would cost every call).

`eqx.tree_at` names what it replaces by the object its `where` returns, which must be a node of
the tree: a read made by `where` (found by its frame, see `_read_by_tree_at_where`) gets the
`Hyper` node itself, so `eqx.tree_at(lambda m: m.rate, model, 0.3)` and `eqx.nn.inference_mode`
work; the value put there is stored as given (a plain, static value).
"""

import inspect
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx
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
    `bits` (an integer array, the one PyTree leaf). See the module's docstring.

    `value` is the Python number the leaf was checked to hold (set when it is stored, else on the
    first read outside a trace). It is not part of the PyTree: a node rebuilt from new leaves (tree
    arithmetic, a jitted function's output) checks its leaf again when first read."""

    __slots__ = ("kind", "bits", "name", "value")

    def __init__(self, kind: str, bits: Any, name: str = "?", value: Any = None):
        self.kind = kind
        self.bits = bits
        # `Class.field`, for the errors below.
        self.name = name
        self.value = _UNCHECKED if value is None else value

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


# What `Hyper.value` holds before the leaf has been checked.
_UNCHECKED: Any = object()


MSG_ARITHMETIC = (
    "`{name}` is a dynamic field (`eqxstable.field(dynamic=True)`) holding a Python {kind}, "
    "stored as the {dtype} words of the number so that optimisers and gradients never train "
    "it. A tree operation over all array leaves gave it a {got} leaf instead, which would "
    "read back as a wrong number. Apply arithmetic only to trainable leaves: partition "
    "with `eqx.is_inexact_array` (as for `eqx.filter_grad` and optax), e.g. "
    "`params, static = eqx.partition(model, eqx.is_inexact_array)`; the dynamic field then "
    "stays as it was."
)

# Signed, so that one word of the seal is negative (see the module's docstring).
_DTYPES = {kind: np.dtype(np.int32) for kind in ("bool", "int", "float", "complex")}


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
    return Hyper(kind, _resealed(kind, bits), name)


def _resealed(kind: str, bits: Any) -> Any:
    """The leaf of a model pickled before the seal had two words (one checksum word, and
    `uint32` for a float or complex), in today's layout if its checksum matched; else as it is
    (refused when read)."""
    if not isinstance(bits, (np.ndarray, jax.Array)) or bits.shape != (_WORDS[kind] - 1,):
        return bits
    words = np.asarray(bits)
    if words.dtype.itemsize != 4 or words.dtype.kind not in "iu":
        return bits
    if int(words[-1:].view(np.uint32)[0]) != _checksum(kind, words[:-1]):
        return bits
    return jnp.asarray(_seal(kind, words[:-1]))


def encode(value: Any, name: str = "?") -> Any:
    """The stored form of a dynamic field's value: a [`Hyper`][] for a Python number, the value
    itself for anything else (an array, `None`, an `int` outside int32's range). `name` is the
    field's (`Class.field`), for errors."""
    t = type(value)
    if t is bool or (t is int and _INT32.min <= value <= _INT32.max):
        kind = t.__name__
        words = np.array([value], dtype=np.int32)
    elif t is float and _fits_float32(value):
        kind = "float"
        words = _words(value, np.float32, np.float64)
    elif t is complex and _fits_float32(value.real) and _fits_float32(value.imag):
        kind = "complex"
        words = _words(value, np.complex64, np.complex128)
    else:
        return value
    return Hyper(kind, jnp.asarray(_seal(kind, words)), name, value)


def _seal(kind: str, words: np.ndarray) -> np.ndarray:
    """`words` (int32, or uint32 of the same bits) followed by the seal: their checksum `c` and
    `~c` (see the module's docstring)."""
    c = _checksum(kind, words)
    seal = np.array([c, c ^ _MASK], np.uint32)
    return np.concatenate([words.view(np.uint32), seal]).view(np.int32)


_FLOAT32 = np.finfo(np.float32)


def _fits_float32(x: float) -> bool:
    """Whether float32 holds `x` without making it `inf` or 0 (it may round it): zero, `inf`,
    NaN, or a normal float32 magnitude."""
    if x == 0.0 or x != x or abs(x) == float("inf"):
        return True
    return float(_FLOAT32.tiny) <= abs(x) <= float(_FLOAT32.max)


def _words(value: Any, single: type, double: type) -> np.ndarray:
    # A float beyond float32's range is `inf` there, as `jnp.asarray` makes it without x64.
    with np.errstate(over="ignore"):
        parts = [np.array([value], dtype=t).view(np.uint32) for t in (single, double)]
    return np.concatenate(parts)


_MASK = 0xFFFFFFFF
# One seed a kind, so that the words of one kind never pass as another's.
_SEEDS = {"bool": 0x9E3779B9, "int": 0x7F4A7C15, "float": 0x165667B1, "complex": 0x27D4EB2F}


def _checksum(kind: str, words: np.ndarray) -> int:
    """A 32-bit hash of a number's words (MurmurHash3's finaliser, chained). Elementwise integer
    arithmetic over the words (`a + b`, `a * 2`, `a // 2`, `zeros_like`) gives words whose hash
    is not the last word, except by a 1-in-2**32 chance; selecting whole leaves (`jnp.where`,
    `jnp.maximum` of equal values) keeps it."""
    h = _SEEDS[kind]
    for w in words.view(np.uint32).tolist():
        h ^= w
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & _MASK
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & _MASK
        h ^= h >> 16
    return h


def _x64() -> bool:
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def _weak(x: Any, dtype: Any) -> Any:
    # Weak typing is what makes a dynamic `0.1` times a bfloat16 array stay bfloat16, exactly as
    # the Python float does.
    return weak_convert(x, dtype)


# How many words the leaf of one value has: the number's, then its seal.
_WORDS = {"bool": 3, "int": 3, "float": 5, "complex": 8}


MSG_MIXED = (
    "`{name}` is a dynamic field (`eqxstable.field(dynamic=True)`) holding a Python {kind}, "
    "stored as the words of the number and a checksum, and they no longer agree: arithmetic "
    "over all array leaves (a sum, mean, maximum or minimum of models, a scaling, a ReLU or "
    "`jnp.where(p > 0, p, 0)`) changed the stored words. Apply "
    "arithmetic only to trainable leaves: partition with `eqx.is_inexact_array` (as for "
    "`eqx.filter_grad` and optax); the dynamic field then stays as it was."
)


def _consistent(kind: str, words: np.ndarray) -> bool:
    """Whether the stored words still hold one number: the checksum matches, and (for a float or
    complex) the single-precision words are the double-precision value rounded."""
    seal = words[-2:].view(np.uint32).tolist()
    if seal[0] != _checksum(kind, words[:-2]) or seal[1] != seal[0] ^ _MASK:
        return False
    if kind in ("bool", "int"):
        return kind == "int" or int(words[0]) in (0, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        if kind == "float":
            single, double = words[:1].view(np.float32)[0], words[1:3].view(np.float64)[0]
        else:
            single, double = words[:2].view(np.complex64)[0], words[2:6].view(np.complex128)[0]
        rounded = np.asarray(double).astype(single.dtype)
    if np.isnan(single) or np.isnan(rounded):
        return bool(np.isnan(single) and np.isnan(rounded))
    return rounded.tobytes() == np.asarray(single).tobytes()


def _python_value(kind: str, words: np.ndarray, name: str = "?") -> Any:
    """The Python number that the words of one value hold, exactly as it was assigned (a float
    from its double-precision words); a `ValueError` naming the field if they were changed."""
    if not _consistent(kind, words):
        raise ValueError(MSG_MIXED.format(name=name, kind=kind))
    if kind == "bool":
        return bool(words[0])
    if kind == "int":
        return int(words[0])
    if kind == "float":
        return float(words[1:3].view(np.float64)[0])
    return complex(words[2:6].view(np.complex128)[0])


def _traced(kind: str, bits: Any, x64: bool) -> Any:
    bitcast = jax.lax.bitcast_convert_type
    if kind == "bool" or kind == "int":
        # A `bool` too: Python's `bool` is an `int`, so `True + True` is 2 (see the table).
        return _weak(bits[..., 0], jnp.int64 if x64 else jnp.int32)
    if kind == "float":
        value = bitcast(bits[..., 1:3], jnp.float64) if x64 else bitcast(bits[..., 0], jnp.float32)
        return _weak(value, value.dtype)
    if x64:
        parts = bitcast(bits[..., 2:6].reshape(*bits.shape[:-1], 2, 2), jnp.float64)
    else:
        parts = bitcast(bits[..., 0:2], jnp.float32)
    value = jax.lax.complex(parts[..., 0], parts[..., 1])
    return _weak(value, value.dtype)


def _tree_at_code() -> Any:
    try:
        return inspect.unwrap(eqx.tree_at).__code__
    except (AttributeError, ValueError):
        return None


# `eqx.tree_at`'s code, to know a read made by its `where` (see `_read_by_tree_at_where`).
_TREE_AT = _tree_at_code()
# How far up a read looks for it: `where` may recurse (`eqx.nn.inference_mode`'s does, once per
# level of modules with an `inference` flag).
_WHERE_DEPTH = 32


def _read_by_tree_at_where() -> bool:
    """Whether the field is being read by the `where` function of an `eqx.tree_at` call (not by
    its `replace_fn`, nor by anything else it runs): the frame `tree_at` called is `where`'s."""
    if _TREE_AT is None:
        return False
    frame = sys._getframe(2)
    callee = None
    for _ in range(_WHERE_DEPTH):
        if frame is None:
            return False
        if frame.f_code is _TREE_AT:
            where = frame.f_locals.get("where")
            return callee is not None and getattr(where, "__code__", None) is callee.f_code
        callee, frame = frame, frame.f_back
    return False


def decode(h: Hyper) -> Any:
    """The value a dynamic field reads back as. Outside a trace: the Python number assigned,
    exactly (its type, its value, `-0.0` and NaN payloads included), once its words are checked.
    Inside a trace (or for a stack of values, from `eqx.filter_vmap` over an ensemble): the
    weakly typed array that `jnp.asarray` of the number gives now (with or without x64). A
    `Hyper` whose leaf is not an array (`None` after `eqx.filter`, a placeholder of a JAX
    transformation) is returned as it is."""
    value = h.value
    if value is not _UNCHECKED:
        return value
    if _read_by_tree_at_where():
        # `eqx.tree_at` (and `eqx.nn.inference_mode`, which is one) names what it replaces by
        # the object `where` returns, which must be a node of the tree: the node, then. It reads
        # through a copy of the tree, whose nodes are new (so `value` is unchecked there).
        return h
    bits, kind = h.bits, h.kind
    if not isinstance(bits, (jax.Array, np.ndarray)):
        return h
    if isinstance(bits, Tracer):
        return _traced(kind, bits, _x64())
    words = np.asarray(bits)
    if words.dtype == jax.dtypes.float0:
        return h
    if words.shape == (_WORDS[kind],):
        h.value = value = _python_value(kind, words, h.name)
        return value
    if words.ndim == 0 or words.shape[-1] != _WORDS[kind]:
        raise ValueError(MSG_MIXED.format(name=h.name, kind=kind))
    # A stack of values outside a trace: each checked, read back as an array.
    for row in words.reshape(-1, words.shape[-1]):
        _python_value(kind, row, h.name)
    return _traced(kind, bits, _x64())
