"""The fingerprint of what a trace produced, by value: two calls whose fingerprints are equal
would make JAX compile the same executable, so the second may run the first's.

It holds everything the executable depends on:

- the closed jaxpr by value (`eqxstable._keys._jaxpr`): equations, parameters, sub-jaxprs,
  literals and constants by their bytes, effects, each equation's context. Parameters are keyed
  strictly (`key_of`): Python values by exact type and value (floats by their bits); JAX's own
  objects that are no functions (abstract values, shardings, meshes, a `custom_jvp`'s rule as a
  `WrappedFun`) by JAX's own `==`, which JAX's caches rely on; containers by their contents;
  every other object (a callback's function, a lineax operator's lambda) by `stable_key`, the rule
  of a static argument (`param_key`). So a jaxpr is equal only where every transformation of it
  is too (a gradient reads a `custom_jvp`'s rule from the jaxpr);
- the input arrays' types, abstract values (shape, dtype, weak type), shardings, layouts and
  whether they are committed to a device;
- which inputs are donated, and the jit options (compiler options among them);
- JAX's trace-context configuration (`jax_enable_x64`, matmul precision, dtype promotion, the
  default device...: what JAX keys its own caches by), what it keys its compiled programs by
  besides (the concrete mesh of `jax.set_mesh`, the optimisation levels: `_config.py`), and
  the backend;
- the output's structure, with its non-array parts by the same strict keys (the reused program's
  output tree rebuilds the result).

Reading the trace context needs one JAX internal (`jax._src.config.trace_context`); where it is
missing, `fingerprint` returns `None` and every miss compiles, as before (`tests/test_compat.py`
notices).
"""

import enum
import struct
from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np

from .._keys import stable_key
from .._keys._jaxpr import jaxpr_key
from .._keys._per_class import PerClass, type_ids
from .._keys._primitives import library_primitive, PRIMITIVE, rule_tables
from ._config import compile_only, untraced


try:
    from jax._src.config import trace_context as _trace_context
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - a JAX that moved them: no reuse, every miss compiles.
    _trace_context = None
    _trace_state_clean = None

try:
    from jax._src.stages import Traced as _Traced
except ImportError:  # pragma: no cover
    _Traced = None

try:
    # Equinox's `filter_primitive`s (lineax's `linear_solve`) take a fresh `Flatten` every bind,
    # filled by the rule with the output's structure: keyed by what it holds (`param_key`).
    from equinox.internal._primitive import Flatten as _Flatten
except ImportError:  # pragma: no cover - moved: keyed by identity, such traces never match.
    _Flatten = None

# Older JAX (0.5) has no `Traced.out_tree`: there every miss compiles, as before.
AVAILABLE = (
    _trace_context is not None
    and _trace_state_clean is not None
    and hasattr(_Traced, "out_tree")
    and hasattr(_Traced, "jaxpr")
)
_ARRAYS = (jax.Array, np.ndarray)
# By identity (`type_ids`): a user's metaclass may call its class `int`.
_VALUES = type_ids((int, str, bool, bytes, type(None)))
_TreeDef = type(jax.tree_util.tree_structure(0))
# Parameters that only transformations read (a `custom_jvp`'s or `custom_vjp`'s rules, made
# afresh by every trace), never lowering: left out, so that `jax.nn.relu` does not keep two
# traces apart. A program is therefore reused only outside transformations (`reusable`, and a
# guest's calls, `_reuse.Guest`). If JAX renames them they are keyed by identity: no reuse.
TRACE_ONLY = frozenset(
    {
        ("custom_jvp_call", "jvp_jaxpr_fun"),
        ("custom_jvp_call", "jvp_jaxpr_thunk"),
        ("custom_vjp_call", "fwd_jaxpr_thunk"),
        ("custom_vjp_call", "bwd"),
        ("custom_vjp_call", "out_trees"),
        ("custom_vjp_call_jaxpr", "fwd_jaxpr_thunk"),
        ("custom_vjp_call_jaxpr", "bwd"),
        ("custom_vjp_call_jaxpr", "out_trees"),
    }
)


class _Same:
    """A key equal only to the key of the very same object (it keeps the object alive, so that
    its `id` is never reused while the key exists)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return type(other) is _Same and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _jax_own(t: type) -> bool:
    module = getattr(t, "__module__", "") or ""
    return module == "jax" or module.startswith(("jax.", "jaxlib"))


# JAX's own types whose instances are no functions and hash (abstract values, shardings,
# meshes, effects, primitives): their `==` is what JAX's caches rely on. Decided once a type.
_JAX_VALUE_TYPES: PerClass[bool] = PerClass()


def _jax_value_type(t: type, x: Any) -> bool:
    known = _JAX_VALUE_TYPES.get(id(t))
    if known is None:
        known = (
            _jax_own(t)
            and not callable(x)
            and not isinstance(x, jax.Array)
            and getattr(t, "__hash__", None) is not None
        )
        _JAX_VALUE_TYPES.put(t, known)
    return known


# Keys of dtypes by identity, each held with its dtype (so that its `id` is never reused).
_DTYPE_KEYS: dict[int, tuple[np.dtype, Hashable]] = {}


def key_of(x: Any) -> Hashable:
    """A strict key of a value met in a jaxpr or an output tree: equal keys mean the same
    computation, never merely similar values."""
    t = type(x)
    if id(t) in _VALUES:
        return (t, x)
    if isinstance(x, PRIMITIVE):
        return _primitive_key(x)
    if _jax_value_type(t, x):
        try:
            hash(x)
        except TypeError:
            return _Same(x)
        # JAX's `==` compares the Python values such an object carries with `==`
        # (`DictKey(1) == DictKey(1.0)`): those it declares (`__match_args__`) are keyed exactly.
        fields = getattr(t, "__match_args__", None)
        if fields:
            return (t, x, tuple(key_of(getattr(x, name, None)) for name in fields))
        return (t, x)
    if t is float:
        return (t, struct.pack("<d", x))
    if t is complex:
        return (t, struct.pack("<dd", x.real, x.imag))
    # Only immutable values whose whole state the key holds are keyed by value; anything else
    # (a list, dict or set, a NumPy array, a structured dtype, whose contents can change or
    # which a key of a few fields cannot describe) by identity: a guest returns the target's
    # non-array outputs, so a key that merely matches would hand it another object.
    if t is tuple or t is frozenset:
        # In iteration order, which is behaviour (a frozenset iterates as it was built).
        return (t, tuple(map(key_of, x)))
    if t is np.dtype or isinstance(x, np.dtype):
        return _dtype_key(x)
    if isinstance(x, _TreeDef):
        return tree_key(x)
    if isinstance(x, (type, enum.Enum)):
        return _Same(x)
    if isinstance(x, tuple) and hasattr(t, "_fields") and not getattr(x, "__dict__", None):
        # A NamedTuple (JAX's dimension numbers) with no attributes of its own.
        return (_Same(t), tuple(map(key_of, x)))
    if isinstance(x, np.generic) and not x.dtype.hasobject:
        return ("scalar", _Same(t), _dtype_key(x.dtype), x.tobytes())
    return _Same(x)


def _primitive_key(p: Any) -> Hashable:
    # A primitive by identity, and by its `stable_key` (`K-primitive`): its attributes and each
    # rule JAX's tables hold for it now (its lowering, JVP, batching rule, transpose...) keyed
    # as what it computes, a user's rule by its code and the globals, cells and defaults it
    # reads. A jaxpr binding a primitive whose lowering was registered again, or whose lowering
    # reads a global that changed since, is another program, never the one compiled with the
    # old rule. The memo across calls keeps the key of each primitive while its watch holds.
    # Where JAX moved the tables, equal to nothing.
    if rule_tables() is None:
        return ("rules unknown", _Same(object()))
    library = library_primitive(p)
    if library is not None:
        # JAX's own, with JAX's own rules (library code, constant): each by identity, no walk.
        names, held = library
        return (_Same(p), names, tuple(map(_Same, held)))
    return (_Same(p), stable_key(p))


def _each_primitive_once() -> Callable[[Any], Hashable]:
    """`param_key` for one jaxpr, keying each primitive once however many equations bind it
    (its key checks the watch of every rule it holds: 54 equations bind 14 primitives in a
    small MLP's gradient)."""
    primitives: dict[int, tuple[Any, Hashable]] = {}

    def key(x: Any) -> Hashable:
        if isinstance(x, PRIMITIVE):
            known = primitives.get(id(x))
            if known is None:
                known = primitives[id(x)] = (x, _primitive_key(x))
            return known[1]
        return param_key(x)

    return key


def param_key(x: Any) -> Hashable:
    """`key_of` for what a jaxpr holds (equation parameters, literals): an object `key_of` keys
    by identity, a function for instance (a `filter_primitive`'s static part holds the lambdas
    of a lineax operator, made afresh by every trace), is keyed by `eqxstable.stable_key`: the
    same rule as a static argument's (a value key on the allowlist, identity otherwise), so equal
    keys trace and lower the same. Unlike an output's leaves, a parameter is never handed back
    to the caller, so an equivalent object may stand for another here."""
    t = type(x)
    # Containers by what they hold now: two traces whose parameters hold equal values lower
    # the same (a parameter is read while lowering, never later).
    if t is tuple or t is list:
        return (t, tuple(map(param_key, x)))
    if t is dict:
        return (t, tuple((param_key(k), param_key(v)) for k, v in x.items()))
    if isinstance(x, _TreeDef):
        return tree_key(x, param_key)
    k = key_of(x)
    if type(k) is not _Same or isinstance(x, (type, enum.Enum)):
        return k
    if _is_flatten(x):
        if not x.called():
            return k
        leaves, static_tree = jax.tree_util.tree_flatten(x.static_out)
        return (
            "flatten",
            tree_key(x.treedef_out, param_key),
            tree_key(static_tree, param_key),
            tuple(map(param_key, leaves)),
        )
    if isinstance(x, tuple):  # A tuple subclass with attributes of its own: left to identity.
        return k
    # An identity key names this very object (weakly: never a later one with its `id`), with
    # what it holds now.
    stable = stable_key(x)
    if not stable.substitutable:
        # Compared by a class's own `==` somewhere (`K-own-eq`): equal, but not the same. A
        # parameter that runs with the program (a `pure_callback`'s function) would call the
        # first trace's object for the second, which `intern` refuses for the same reason.
        return k
    return ("stable", stable)


def _is_flatten(x: Any) -> bool:
    return _Flatten is not None and type(x) is _Flatten


def _dtype_key(dtype: np.dtype) -> Hashable:
    """A plain dtype by its type, scalar type, byte order and size, and name (`<V2` is every
    2-byte extension type); a structured or subarray dtype, or one with metadata, by identity:
    `str` and `name` leave out its fields and metadata, and its `names` can be assigned."""
    # `dtype.name` is computed in Python on every read; the few dtypes met are keyed once.
    known = _DTYPE_KEYS.get(id(dtype))
    if known is None or known[0] is not dtype:
        if len(_DTYPE_KEYS) > 1024:  # Dtypes made afresh (structured ones): no growth.
            _DTYPE_KEYS.clear()
        if dtype.fields is not None or dtype.subdtype is not None or dtype.metadata is not None:
            key: Hashable = _Same(dtype)
        else:
            key = ("dtype", type(dtype), _Same(dtype.type), dtype.str, dtype.name)
        known = _DTYPE_KEYS[id(dtype)] = (dtype, key)
    return known[1]


def tree_key(treedef: Any, key: Callable[[Any], Hashable] | None = None) -> Hashable:
    """A treedef by value, its node data by `key` (`key_of` by default; `PyTreeDef.__eq__`
    compares node data with `==`, so that `1`, `1.0` and `True` collide)."""
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return "*"
    node = treedef.node_data()
    if node is None:
        return ("?", _Same(treedef))
    kind, data = node
    key = key_of if key is None else key
    if kind is dict and type(data) is list:
        # A dict node's keys: a new list each time JAX is asked, never one anyone holds.
        data = tuple(data)
    return (_Same(kind), key(data), tuple(tree_key(c, key) for c in treedef.children()))


def top_level() -> bool:
    """Whether no transformation (and no outer trace) is running."""
    return _trace_state_clean is not None and _trace_state_clean()


def under_a_trace() -> bool:
    """Whether an outer trace or transformation is running (`False` where this JAX cannot
    tell)."""
    return _trace_state_clean is not None and not _trace_state_clean()


def reusable(*groups: list) -> bool:
    """Whether a call may look for a program compiled for another: outside any transformation
    (a transformation re-traces the jaxpr it finds, so it is left to JAX) and with concrete
    arrays only."""
    if not AVAILABLE or not top_level():
        return False
    if jax.config.jax_disable_jit:  # pyright: ignore[reportAttributeAccessIssue]
        # Nothing is traced or compiled: the function runs as it is (`_program._eager`).
        return False
    return all(isinstance(x, _ARRAYS) for group in groups for x in group)


def input_key(x: Any) -> Hashable:
    if isinstance(x, np.ndarray):
        return (np.ndarray, jax.typeof(x))
    return (type(x), jax.typeof(x), x.sharding, x.format, getattr(x, "_committed", None))


def context() -> Hashable:
    """What JAX keys its own caches by (the trace-context configuration), and the configuration
    a trace reads that JAX leaves out of it (`_config.untraced`: the PRNG implementation)."""
    return (_trace_context(), untraced())  # pyright: ignore[reportOptionalCall]


def fingerprint(
    closed: Any,
    out_tree: Any,
    donated_args: str,
    jitkwargs: tuple,
    donated: list,
    kept: list,
    dyn: Any,
) -> Hashable | None:
    """The fingerprint of a traced call, or `None` where something in it cannot be keyed (the
    caller then compiles, which is always safe).

    **Arguments:**

    - `closed`: the `ClosedJaxpr` the trace produced.
    - `out_tree`: the treedef of its output.
    - `donated_args`, `jitkwargs`: the program's options (whose leaves it donates, and the
      options of `jax.jit`).
    - `donated`, `kept`, `dyn`: the arrays the call passes (concrete, see `reusable`).

    **Returns:** a hashable fingerprint, or `None`.
    """
    if not AVAILABLE:
        return None
    try:
        jaxpr = jaxpr_key(closed, _each_primitive_once(), TRACE_ONLY, {})
        if jaxpr is None:
            return None
        inputs = tuple(map(input_key, (*donated, *kept, *dyn)))
        return (
            jaxpr,
            inputs,
            (donated_args, len(donated), len(kept), len(dyn)),
            # By contents, as compiled: a `compiler_options` dict changed in place since an
            # equal program was compiled is another program (attack 15-01).
            param_key(jitkwargs),
            context(),
            compile_only(),
            jax.default_backend(),
            tree_key(out_tree),
        )
    except Exception:
        return None
