"""The entries of a user class's own namespace (`K-user-class`, `K-enum`): every one keyed as
what it is, whatever its name, through the dispatcher (`entry`). A name decides nothing: dunder
and `_sunder_` entries are data and code like any other (`__registry__ = {...}`, an enum's
`_missing_`, `__class_getitem__`, a dunder property, `__annotations__`)."""

import dataclasses
import enum
import types
from typing import Any

from ._context import Ctx, key
from ._per_class import type_ids
from ._state import dict_state, list_state
from ._types import Namespace


# The entries of a class's namespace left out of its key, each for its reason: `__dict__` is the
# descriptor `type` makes for its instances' `__dict__` (no code and no data of the user's), and
# `type` refuses to rebind it (`C.__dict__ = {}` raises). Nothing else.
SKIPPED = frozenset({"__dict__"})

# The records `dataclasses` makes for a class (`__dataclass_fields__`' fields,
# `__dataclass_params__`): slots only, each the class's own, keyed by what its slots hold.
_RECORDS = type_ids(
    (dataclasses.Field, getattr(dataclasses, "_DataclassParams", dataclasses.Field))
)
# What a field's `_field_type` names: `dataclasses`' own markers (a plain field, a `ClassVar`, an
# `InitVar`), module constants that nothing changes.
_MARKERS = frozenset(
    id(getattr(dataclasses, name))
    for name in ("_FIELD", "_FIELD_CLASSVAR", "_FIELD_INITVAR")
    if hasattr(dataclasses, name)
)


def entry(c: type, name: str, v: Any, ctx: Ctx) -> Any:
    """One entry of a user class's own namespace, keyed as what it is (`key`: a classmethod,
    staticmethod or property by the functions it runs, data by the allowlist), except:

    - the class's own containers at the top of the entry (`_owned`): a dict, a list, a
      `dataclasses` record, a field's metadata proxy (three levels down), by contents, watched,
      without their identity: any two equal keys of
      the class name this very class, whose entry this very object is (a rebinding is watched
      by the class's state), so a rebuilt reader of an unchanged class is the same key (and
      `Key.identity` does not say otherwise: `__annotations__`, `__dataclass_fields__`);
    - `abc`'s bookkeeping `_abc_impl` (a C object caching `isinstance` answers, not a hidden
      state that would make the class a key equal to nothing; the registry it holds is keyed by
      `_classes._abc_registry`, and `abc`'s cache token is watched), and the methods
      `dataclasses` generates (`generated`: text compiled from the fields, which are keyed;
      `__repr__` is wrapped with a `set` of its own): the objects the class holds, never walked;
    - in an enum, its own members, named (the class is keyed already, and a member's key would
      name the class in terms of itself: a cycle, whose key the memo never reuses; what a member
      holds is keyed by `_classes._members`), in the class body's names and in the tables
      `EnumMeta` keeps of them (`_member_map_`, `_value2member_map_`, `_member_names_`, a
      `Flag`'s `_inverted_`), which can change in place (an alias added to `_value2member_map_`
      changes what `Mode(99)` returns)."""
    if name == "_abc_impl":
        return Namespace(v)
    if generated(v):
        return generated_key(v, ctx)
    return _owned(c if isinstance(c, enum.EnumMeta) else None, v, ctx, 0)


# From this many items on, a class's own list or dict is keyed as any other container is.
BIG = 1024


def _owned(members_of: Any, v: Any, ctx: Ctx, depth: int) -> Any:
    t = type(v)
    if members_of is not None and t is members_of:
        return ("member", v._name_, key(v._value_, ctx, False))
    if id(v) in _MARKERS:
        return Namespace(v)
    if members_of is None and (t is dict or t is list) and len(v) >= BIG:
        # A big table held by the class (`Vocab.TABLE = {...}`, 100,000 entries): keyed by the
        # dispatcher as a global's is (`K-mutable`), with the same machinery: the run of
        # scalars, the object budget (identity past it, with a reason), `recall_held` for a
        # rebuilt reader, the watch compared where it is; not item by item here (attack 11a-09:
        # 200 ms a hit, 3 s a rebuilt reader). Its identity part says nothing the class's does
        # not (equal keys name the very class, whose entry this very object is, and what it
        # holds is watched by `is`), so `Key.identity` is left as it was, as for a small one.
        was = ctx.identity
        part = key(v, ctx, False)
        ctx.identity = was
        return part
    # Down to a field's metadata: the class's dict, a field in it, the metadata it holds.
    if depth < 3:
        if t is dict or t is types.MappingProxyType:
            # `dataclasses` wraps a field's metadata in a proxy of its own (one shared empty
            # proxy for none): its items, watched, not the proxy's identity.
            ctx.states.append((v, dict_state, dict_state(v)))  # pyright: ignore[reportArgumentType]
            items = [
                (key(k, ctx, False), _owned(members_of, x, ctx, depth + 1)) for k, x in v.items()
            ]
            return (t, tuple(items))
        if t is list:
            ctx.states.append((v, list_state, list_state(v)))
            return (list, tuple([_owned(members_of, x, ctx, depth + 1) for x in v]))
        if id(t) in _RECORDS:
            ctx.states.append((v, _record_state, _record_state(v)))
            return (t, tuple([_owned(members_of, x, ctx, depth + 1) for x in _record_state(v)]))
    return key(v, ctx, False)


def _record_state(v: Any) -> tuple:
    return tuple([getattr(v, s, None) for s in type(v).__slots__])


def _generated_code(code: Any) -> bool:
    # Compiled from "<string>" inside `dataclasses`' `__create_fn__` (Python 3.11 on, by the
    # code's qualified name; on 3.10, which has none, by the file name alone).
    if type(code) is not types.CodeType or code.co_filename != "<string>":
        return False
    qualname = getattr(code, "co_qualname", None)
    return qualname is None or qualname.startswith("__create_fn__.<locals>.")


def _repr_wrapper() -> tuple[Any, int]:
    # `dataclasses` wraps the `__repr__` it generates in a guard against recursion (its own
    # `_recursive_repr`, or `reprlib.recursive_repr` from 3.12), a library function holding the
    # generated one in its closure cell `user_function`: that code object, told by identity, and
    # the cell's index. Never `__wrapped__`, which any `functools.wraps` sets.
    @dataclasses.dataclass
    class _Probe:
        a: int = 0

    code = _Probe.__dict__["__repr__"].__code__
    if _generated_code(code) or "user_function" not in code.co_freevars:
        return None, -1
    return code, code.co_freevars.index("user_function")


_REPR_WRAPPER, _REPR_CELL = _repr_wrapper()


def _held(f: Any) -> Any:
    # The function whose code runs: the one the repr guard holds in its cell, else `f`.
    if f.__code__ is _REPR_WRAPPER and f.__closure__ is not None:
        try:
            return f.__closure__[_REPR_CELL].cell_contents
        except ValueError:
            return None
    return f


def generated(f: Any) -> bool:
    """Whether `f` is a method `dataclasses` made from a class's fields, told by its own code
    object (`_generated_code`), or the recursion guard `dataclasses` wraps its `__repr__` in (by
    the guard's code object, by identity) holding such a method in its cell. Never by
    `__wrapped__` or any other attribute a user's function can set: a user's own method
    decorated with `functools.wraps(<a generated method>)` is the user's code, keyed as any
    method is. Any other `exec` also compiles from "<string>": such a method
    (`__call__ = ns["__call__"]`) is the user's code too."""
    if type(f) is not types.FunctionType:
        return False
    inner = _held(f)
    return type(inner) is types.FunctionType and _generated_code(inner.__code__)


def _generated_parts(f: types.FunctionType) -> list[types.FunctionType]:
    inner = _held(f)
    return [f] if inner is f or type(inner) is not types.FunctionType else [f, inner]


def generated_state(f: types.FunctionType) -> tuple:
    """What a generated method held as the object can be rebound to: its code, defaults, keyword
    defaults and closure cells, and those of the method its repr guard holds."""
    out: list[Any] = [_held(f)]
    for g in _generated_parts(f):
        out.extend((g.__code__, g.__defaults__, g.__kwdefaults__))
        for cell in g.__closure__ or ():
            try:
                out.append(cell.cell_contents)
            except ValueError:
                out.append(None)
    return tuple(out)


def generated_key(f: types.FunctionType, ctx: Ctx) -> Any:
    """A generated method: the object itself, never walked as the user's code, with what can be
    rebound in it keyed as what it is (`g.__init__.__defaults__ = (2.0,)` changes what `C()`
    holds), watched (`generated_state`). The repr guard's own set of running calls changes
    during every `repr` and is watched by identity only."""
    ctx.states.append((f, generated_state, generated_state(f)))
    parts: list[Any] = [Namespace(f)]
    for g in _generated_parts(f):
        cells: list[Any] = []
        if g is not f or _REPR_WRAPPER is None or f.__code__ is not _REPR_WRAPPER:
            for cell in g.__closure__ or ():
                try:
                    cells.append(key(cell.cell_contents, ctx, False))
                except ValueError:
                    cells.append(None)
        parts.append(
            (
                g.__code__,
                key(g.__defaults__, ctx, False),
                key(g.__kwdefaults__, ctx, False),
                tuple(cells),
            )
        )
    return ("generated", tuple(parts))
