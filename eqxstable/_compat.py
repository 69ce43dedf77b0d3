"""Fallbacks for the oldest JAX, Equinox and Python versions that `pyproject.toml` declares.

Each fallback is chosen by looking at what the installed library does (never by comparing version
strings), and `tests/test_compat.py` notices when the internal it reads moves. The floors are
proven by `scripts/test-floors.sh`; `tests/README.md` lists the versions it was run on.

What is new where, and what older versions get instead:

- `jax.jit(f)._jit_info` (JAX 0.6.0): older JAX keeps the same `PjitInfo` in the closure of
  `f._cache_miss`; `jit_parts` reads either.
- A module's node data as a plain tuple (Equinox 0.13.3): older Equinox gives a fresh
  `_FlattenedData` per flatten; `flat_module_aux` turns it into the same kind of tuple (the jit
  cache's hit path), and the keys layer keys it by its fields (`LEGACY_MODULE_AUX`), so that a
  treedef holding it (the static part of a jitted module) is keyed by value, not by identity.
- Equinox's construction stores a converter's result with `object.__setattr__` (Equinox 0.13);
  older Equinox calls `setattr`, through the `__setattr__` of the class it builds for `__init__`.
  `STORE_FRAMES` holds the code of such functions, found by watching a store, so that the
  `StableModule` field descriptor recognizes the store as Equinox's (`_module/_access.py`).
- `CodeType.co_qualname` (Python 3.11): `code_qualname` asks a live function on Python 3.10.
- JAX >= 0.9 explains a tracing-cache miss from `jax._src.interpreters.partial_eval` (its
  `explain`), before the trace, and names the function in its trace event. Older JAX (0.5.3 to
  0.8) logs another text from `jax._src.pjit` after the trace, and JAX 0.5 names no function in
  its events, so the doctor cannot pair an explanation with its compile there:
  `EXPLAINS_JIT_MISSES` is `False`, and the doctor and the pytest plugin leave plain `jax.jit`
  out (the report says so) rather than miscount it.
- No JAX version has a public way to make a weakly typed array: `weak_convert` uses the function
  `jnp.asarray(0.1)` itself ends in, and falls back to a strongly typed conversion if it moves.
"""

import dataclasses
import gc
import inspect
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.tree_util as jtu
import numpy as np


def jit_parts(f: Any) -> tuple[Callable, Any] | None:
    """The function and the options (JAX's `PjitInfo`) that `jax.jit(fun, **options)` was built
    from, or `None` where they cannot be read (the caller then keys `f` by identity).

    JAX >= 0.6 keeps them in `f._fun` and `f._jit_info`. Older versions keep only `_fun` there;
    the options are a variable of the closure of `f._cache_miss`, next to the same `fun`.
    """
    try:
        return f._fun, f._jit_info
    except AttributeError:
        pass
    try:
        fun, miss = f._fun, inspect.unwrap(f._cache_miss)
        cells = dict(zip(miss.__code__.co_freevars, miss.__closure__ or ()))
        info = cells["jit_info"].cell_contents
        same_fun = cells["fun"].cell_contents is fun
    except (AttributeError, KeyError, ValueError, TypeError):
        return None
    # Only a closure that holds this very `fun` next to a `PjitInfo` is the one `jax.jit` built.
    if not same_fun or type(info).__name__ != "PjitInfo":
        return None
    return fun, info


class _Probe(eqx.Module):
    static: int = eqx.field(static=True)


def _legacy_aux_type() -> type | None:
    # The node data of a module is `(cls, aux)`. From Equinox 0.13.3 `aux` is a plain tuple of the
    # static field values; before, it is a `_FlattenedData` dataclass, made fresh on every flatten
    # and compared by `==` only.
    _, aux = jtu.tree_structure(_Probe(static=1)).node_data()  # pyright: ignore
    if type(aux) is tuple or not dataclasses.is_dataclass(aux):
        return None
    return type(aux)


_LEGACY_AUX = _legacy_aux_type()
# Equinox < 0.13.3 only (else `None`): the type of a module's node data, which the keys layer keys
# like a frozen dataclass (by its fields). Equinox makes one afresh per flatten and never changes
# it, so its fields are what it holds for good.
LEGACY_MODULE_AUX: type | None = _LEGACY_AUX


def _flat_module_aux(d: Any) -> Any:
    """Equinox < 0.13.3 only: the node data `d` of an Equinox module (its `_FlattenedData`:
    field names, static field values, wrapper fields) as one flat tuple whose items are the very
    objects the module holds, so that it can be compared by identity item by item (the jit cache's
    hit path) and keyed by value (`stable_key`), like the tuple newer Equinox gives. Any other node
    data comes back unchanged.

    This is sound only where the treedefs already compare equal (as they do wherever the jit cache
    compares node data): `_FlattenedData.__eq__` compares every field, so the structure that the
    flat tuple drops (which name goes with which value) is then the same on both sides.
    """
    if type(d) is not _LEGACY_AUX:
        return d
    flat: list = []
    for field in dataclasses.fields(d):
        value = getattr(d, field.name)
        if type(value) is not tuple:
            flat.append(value)
            continue
        for x in value:
            # Equinox 0.13.0-0.13.2 store `(name, value)` pairs.
            if type(x) is tuple:
                flat.extend(x)
            else:
                flat.append(x)
    return tuple(flat)


# `None` where Equinox's node data needs no help (Equinox >= 0.13.3), so callers skip the call.
flat_module_aux: Callable[[Any], Any] | None = None if _LEGACY_AUX is None else _flat_module_aux


# Equinox's construction (`_ModuleMeta.__call__`): it runs `__init__`, then each field's converter.
EQX_CALL: types.CodeType | None = getattr(
    type(eqx.Module).__dict__.get("__call__"), "__code__", None
)


class _StoreRecorder:
    """A data descriptor for a field: records the Python frames between each store and Equinox's
    construction."""

    def __init__(self) -> None:
        self.chains: list[tuple[types.CodeType, ...] | None] = []

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            raise AttributeError("value")
        return obj.__dict__["value"]

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["value"] = value
        codes = []
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not EQX_CALL:
            codes.append(frame.f_code)
            frame = frame.f_back
        self.chains.append(None if frame is None else tuple(codes))


def _store_frames() -> tuple[types.CodeType, ...] | None:
    """The code of the Python functions between Equinox's construction and the store of a
    converter's result (the last store it makes), or `None` if none reaches `EQX_CALL`."""

    class Probe(eqx.Module):
        value: int = eqx.field(converter=int)

    recorder = _StoreRecorder()
    setattr(Probe, "value", recorder)
    try:
        Probe(1.0)  # pyright: ignore[reportArgumentType]
    except Exception:
        return None
    return recorder.chains[-1] if recorder.chains else None


# Equinox >= 0.13: `()`; older: the initable class's `__setattr__`. `None`: no store was seen to
# come from Equinox's construction (it moved); then only a direct store is recognized, as on
# Equinox 0.13 (`tests/test_compat.py` notices).
STORE_FRAMES: tuple[types.CodeType, ...] | None = _store_frames()


def code_qualname(code: types.CodeType) -> str:
    """The qualified name of the function that `code` belongs to (`Outer.method.<locals>.f`).

    Python >= 3.11 records it in `code.co_qualname`. Python 3.10 has it only on functions: it is
    taken from a live function that runs this code, else the bare `co_name`. Used in messages
    only, never in a key.
    """
    try:
        return code.co_qualname  # pyright: ignore[reportAttributeAccessIssue]
    except AttributeError:
        pass
    # `gc.get_referrers` scans every object in the process: once per code object (a rebuilt
    # closure's misses share its code), not once per message.
    known = _QUALNAMES.get(code)
    if known is not None:
        return known
    name = code.co_name
    for ref in gc.get_referrers(code):
        if isinstance(ref, types.FunctionType) and ref.__code__ is code:
            name = ref.__qualname__
            break
    _QUALNAMES[code] = name
    return name


_QUALNAMES: "weakref.WeakKeyDictionary[types.CodeType, str]" = weakref.WeakKeyDictionary()


def _explains_jit_misses() -> bool:
    try:
        from jax._src.interpreters import partial_eval
    except ImportError:
        return False
    return callable(getattr(partial_eval, "explain", None))


# Whether this JAX explains a `jax.jit` miss where and as the doctor reads it (JAX >= 0.9: from
# `partial_eval`'s logger, before the trace). `tests/test_compat.py` checks it against what JAX
# logs, so that a move either way is noticed.
EXPLAINS_JIT_MISSES: bool = _explains_jit_misses()


def _weak_converter() -> Callable[..., Any] | None:
    try:
        from jax._src.lax.lax import _convert_element_type
    except ImportError:
        return None
    return _convert_element_type


_CONVERT = _weak_converter()


def weak_convert(x: Any, dtype: Any) -> Any:
    """`x` converted to `dtype` and weakly typed (as a Python scalar is inside JAX), so that a
    dynamic `0.1` times a bfloat16 array stays bfloat16. If JAX moves the internal this reads,
    the conversion is strongly typed (a wider result dtype, never a wrong value), and
    `tests/test_compat.py` notices.
    """
    if _CONVERT is None:
        return jax.lax.convert_element_type(x, dtype)
    return _CONVERT(x, np.dtype(dtype), weak_type=True)
