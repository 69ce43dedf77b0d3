"""`K-primitive`: a JAX primitive, with the rules JAX's tables hold for it.

A primitive's behaviour is not all in the object: its lowering (`mlir.register_lowering`), its
JVP (`ad.primitive_jvps[p] = ...`), its transpose, its batching rule and its partial-evaluation
rules live in module-level dicts of JAX's, keyed by the primitive. They are library data the
program extends at run time, as the pytree registry is (`_registries.py`): a program that binds
a user's primitive, traced and compiled before its lowering was registered again, must not be
served afterwards. So a primitive is keyed as the library object it is (itself and its
attributes, watched) *and* by each entry the tables hold for it, which entries are watched by
`is` (a re-registration is a new key of the same object: a miss of kind "mutated").

Each entry is keyed through the dispatcher as what it computes, as any function a trace reaches
is: a user's rule by its code, the globals it reads, its cells and defaults (watched), so that a
lowering, JVP or batching rule reading a global that changed is a new key of the same primitive
(and, through `_jit/_fingerprint.py`, a new program), never the old one; a JAX helper wrapping
the user's rule (`mlir.lower_fun`'s closure, `ad.defjvp`'s partial, a platform's rule) by its
code and what it holds, followed into that rule; JAX's own rules as library code (code, cells
and defaults, never globals: constant), which the memo across calls keeps.

The tables are JAX internals. They are reached here through one list (`_TABLES`); where JAX
moves a required one (`_REQUIRED`), `rule_tables()` is `None` and a primitive reached by a reader
is a key equal to nothing (`K-opaque`: the reader is itself, never shared, and keeps its key
through the memo), which is always sound. `tests/test_keys_primitives.py` notices a move, and a
new table JAX adds beside these.
"""

import dataclasses
import functools as ft
import importlib
import sys
import types
from typing import Any

from ._context import Ctx, Handler, key
from ._jaxpr import PRIMITIVE
from ._origin import (
    library_class,
    library_code_object,
    library_constant,
    library_function,
    library_module,
    SINGLEDISPATCH_CODE,
)
from ._per_class import type_ids
from ._state import unreadable
from ._types import Identity, MutableKey, Namespace


# (module, name, nested): a table of primitive -> rule, or (`nested`) of platform -> such a table.
_TABLES: tuple[tuple[str, str, bool], ...] = (
    ("jax._src.interpreters.mlir", "_lowerings", False),
    ("jax._src.interpreters.mlir", "_platform_specific_lowerings", True),
    ("jax._src.interpreters.ad", "primitive_jvps", False),
    ("jax._src.interpreters.ad", "primitive_transposes", False),
    ("jax._src.interpreters.ad", "fancy_transposes", False),
    ("jax._src.interpreters.ad", "primitive_linearizations", False),
    ("jax._src.interpreters.batching", "primitive_batchers", False),
    ("jax._src.interpreters.batching", "fancy_primitive_batchers", False),
    ("jax._src.interpreters.batching", "skippable_batchers", False),
    ("jax._src.interpreters.batching", "ragged_prop_rules", False),
    ("jax._src.interpreters.partial_eval", "custom_partial_eval_rules", False),
    ("jax._src.interpreters.partial_eval", "partial_eval_jaxpr_custom_rules", False),
    ("jax._src.interpreters.partial_eval", "dce_rules", False),
    ("jax._src.interpreters.partial_eval", "const_fold_rules", False),
    ("jax._src.interpreters.partial_eval", "forwarding_rules", False),
    ("jax._src.interpreters.partial_eval", "custom_staging_rules", False),
    ("jax._src.interpreters.partial_eval", "padding_rules", False),
)
# Those every supported JAX has (0.5.3 to now): without one, the tables have moved.
_REQUIRED = frozenset(
    {
        ("jax._src.interpreters.mlir", "_lowerings"),
        ("jax._src.interpreters.mlir", "_platform_specific_lowerings"),
        ("jax._src.interpreters.ad", "primitive_jvps"),
        ("jax._src.interpreters.ad", "primitive_transposes"),
        ("jax._src.interpreters.batching", "fancy_primitive_batchers"),
        ("jax._src.interpreters.partial_eval", "custom_partial_eval_rules"),
        ("jax._src.interpreters.partial_eval", "dce_rules"),
    }
)
# Re-exported for the jit layer's fingerprint, which keys a primitive with its rules too.
__all__ = ["library_primitive", "PRIMITIVE", "rule_entries", "rule_tables", "with_rules"]
_ABSENT = object()
_NO_RULE = ("no-rule",)
_found: "tuple[tuple[dict, bool], ...] | None | bool" = False


def rule_tables() -> "tuple[tuple[dict, bool], ...] | None":
    """JAX's rule tables that this JAX has, each with whether it is nested (by platform), or
    `None` where a required one is missing or is not a dict (JAX moved them)."""
    global _found
    if _found is False:
        found = []
        for module, name, nested in _TABLES:
            try:
                table = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError):
                table = None
            if isinstance(table, dict):
                found.append((table, nested))
            elif (module, name) in _REQUIRED:
                found = None
                break
        _found = None if found is None else tuple(found)
    return _found  # pyright: ignore[reportReturnType]


def rule_entries(p: Any) -> tuple:
    """What JAX's tables hold for `p` now, each entry as the object itself (compared by `is`,
    so flat: no tuple made afresh): a platform's table by its name and its entry, so that a
    platform added is seen too."""
    tables = rule_tables() or ()
    entries: list = []
    for table, nested in tables:
        if nested:
            for platform, inner in list(table.items()):
                rule = inner.get(p, _ABSENT)
                if rule is not _ABSENT:
                    entries.append(platform)
                    entries.append(rule)
        else:
            entries.append(table.get(p, _ABSENT))
    return tuple(entries)


def _rule(entry: Any, ctx: Ctx) -> Any:
    """An entry of `rule_entries`: an absent rule as a marker, a platform's name as itself, and
    a rule as what it computes (`key`: a function by its code, globals, cells and defaults, a
    partial by its function and arguments, a callable object by what it holds), watched."""
    if entry is _ABSENT:
        return _NO_RULE
    if type(entry) is str:
        return entry
    if _library_rule(entry):
        # JAX's own rule (library code, holding only library code and constants): constant,
        # itself, as any library function is, without a walk of the partials and closures it
        # is made of (the first miss of a process keys every primitive of its jaxpr).
        return Namespace(entry)
    return key(entry, ctx, False)


# Each rule judged by `_library_rule`, by `id`, held with its decision (so that its `id` is not
# reused while the entry lives); the tables' entries live as long as the tables.
_judged: dict[int, tuple[Any, bool]] = {}
_SCALARS = type_ids((int, float, complex, str, bytes, bool, type(None)))
_MAX_PARTS = 64


def _library_rule(rule: Any) -> bool:
    """Whether `rule` is made of library code alone: a library function (its code in an
    installed package, `_origin.library_function`) or an exact `functools.partial` whose cells,
    defaults, attributes, arguments and keywords are, recursively, such functions and partials,
    exact tuples (a library's `NamedTuple`s too: `LoweringRuleEntry`), scalars, builtins, and a
    library's classes and own objects (`_origin.library_code_object`: `lax.mul_p`). Anything
    else it holds (a user's function, a list, a callable object) makes it `False`, and the rule
    is keyed through the dispatcher. Remembered per rule object: a library's functions and
    partials are not changed after they are made (by the same assumption that takes a library's
    code as constant)."""
    known = _judged.get(id(rule))
    if known is not None and known[0] is rule:
        return known[1]
    if len(_judged) > 4096:  # Rules registered afresh in a loop: no growth.
        _judged.clear()
    try:
        verdict = _made_of_library([rule], set())
    except Exception:
        verdict = False
    _judged[id(rule)] = (rule, verdict)
    return verdict


def _made_of_library(todo: list, seen: set[int]) -> bool:
    while todo:
        x: Any = todo.pop()
        if id(x) in seen or id(type(x)) in _SCALARS:
            continue
        seen.add(id(x))
        if len(seen) > _MAX_PARTS:
            return False
        t = type(x)
        if t is types.FunctionType:
            if not library_function(x) or x.__code__ is SINGLEDISPATCH_CODE:
                return False
            todo.extend(cell.cell_contents for cell in x.__closure__ or () if _filled(cell))
            todo.extend(x.__defaults__ or ())
            todo.extend((x.__kwdefaults__ or {}).values())
            todo.extend(x.__dict__.values())
        elif t is ft.partial:
            if x.__dict__:
                return False
            todo.append(x.func)
            todo.extend(x.args)
            todo.extend(x.keywords.values())
        elif t is tuple or (isinstance(x, tuple) and _library_tuple(t, x)):
            todo.extend(tuple.__iter__(x))
        elif t is list or t is set or t is frozenset:
            # Library data inside library code (`abstract_eval`'s allowed dtypes): made with
            # the rule, at import, and taken as constant with it.
            todo.extend(x)
        elif t is dict and isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
        elif _library_record(t, x):
            todo.extend(getattr(x, f.name) for f in dataclasses.fields(t))  # pyright: ignore
        elif isinstance(x, PRIMITIVE) and library_class(t):
            # A primitive the rule binds (`standard_jvp`'s): itself, as where the rule's code
            # reads it as a global; its own rules are keyed where a jaxpr binds it.
            continue
        elif not (
            isinstance(x, (types.BuiltinFunctionType, type)) and library_code_object(x)
        ) and not (library_class(t) and not callable_object(x) and library_constant(x)):
            return False
    return True


def _library_record(t: type, x: Any) -> bool:
    # A library's frozen dataclass (JAX's `LoweringRuleEntry`: a rule and a flag), holding only
    # its fields.
    params = getattr(t, "__dataclass_params__", None)
    if params is None or not params.frozen or isinstance(x, type) or not library_class(t):
        return False
    extra = getattr(x, "__dict__", None)
    names = {f.name for f in dataclasses.fields(t)}
    return not extra or set(extra) <= names


def _library_tuple(t: type, x: tuple) -> bool:
    # A library's `NamedTuple` (JAX's `LoweringRuleEntry`): its class defined in a library
    # module, no attributes of its own, its items read from the tuple's storage.
    module = sys.modules.get(getattr(t, "__module__", None) or "")
    return (
        hasattr(t, "_fields")
        and module is not None
        and library_module(module)
        and not getattr(x, "__dict__", None)
    )


def library_primitive(p: Any) -> tuple | None:
    """For a primitive of JAX's class whose attributes (`impl`, `abstract_eval`...) and every
    rule JAX's tables hold for it are library code alone (`_library_rule`: JAX's own `lax.mul_p`),
    what names it exactly: its attributes and its table entries, each by identity (the fingerprint
    of a program keys such a primitive so, without a walk); `None` for any other (a user's rule,
    a user's `impl`), which is keyed by `stable_key`."""
    if not library_class(type(p)):
        return None
    attrs = getattr(p, "__dict__", None)
    if type(attrs) is not dict:
        return None
    entries = rule_entries(p)
    held = [*attrs.values(), *entries]
    if not all(id(type(x)) in _SCALARS or x is _ABSENT or _library_rule(x) for x in held):
        return None
    return (tuple(attrs), tuple(held))


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def callable_object(x: Any) -> bool:
    """Whether `x` is a callable instance (not a function or class): what it runs is its class's
    and its state's, which only the dispatcher keys."""
    return callable(x) and not isinstance(x, type)


# The primitives whose rules are being keyed now, by walk: `(id(walk), id(primitive))`.
_keying: set[tuple[int, int]] = set()


def with_rules(handler: Handler) -> Handler:
    """`K-primitive`: the handler `handler` (what the primitive's class is keyed by: itself and
    its attributes, `K-library-object`, or its own `==`), with each rule JAX's tables hold for
    it keyed as what it computes (`_rule`), and the entries watched by `is` (a rule registered
    again is a new key)."""

    def primitive(p: Any, ctx: Ctx, content_ok: bool) -> Any:
        if rule_tables() is None:
            # JAX moved its tables: they cannot be read, so a reader is never shared.
            return unreadable(p, ctx)
        parts = handler(p, ctx, content_ok)
        names_itself = _names(parts, p)
        token = (id(ctx.stack), id(p))
        if names_itself and token in _keying:
            # Met again inside its own rules (`ad.defjvp`'s partial holds the primitive, a JVP
            # rule binds it): this very object, whose rules the key holds where they are being
            # keyed, above. Two equal keys name the same object at both places (by identity),
            # so its rules are in both, once; keying them again at every meeting is a walk
            # (and a watch) as long again for each primitive a rule reaches.
            rules: Any = _ABOVE
        else:
            entries = rule_entries(p)
            ctx.states.append((p, rule_entries, entries))
            if names_itself:
                _keying.add(token)
            try:
                rules = ("rules", tuple([_rule(e, ctx) for e in entries]))
            finally:
                _keying.discard(token)
        if type(parts) is MutableKey:
            # Still a key naming this very primitive: a jaxpr holding it stays substitutable.
            return MutableKey(parts.identity, (parts.contents, rules))
        return (parts, rules)

    return primitive


_ABOVE = ("rules", "keyed above")


def _names(parts: Any, p: Any) -> bool:
    """Whether `parts` names `p` itself by identity (a library's constant, `Namespace`, or an
    object keyed with what it holds, `MutableKey`), rather than by its own `==`."""
    if type(parts) is Namespace:
        return parts == Namespace(p)
    return type(parts) is MutableKey and parts.identity == Identity(p)
