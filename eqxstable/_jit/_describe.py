"""Saying in words how two stable keys differ.

"function <lambda> at 0x7f.. -> function <lambda> at 0x7f.." does not tell a user what to change,
and neither does "tuple (FunctionKey(... -> tuple (FunctionKey(...". The two keys are walked in
parallel down to the innermost value that differs, and its place is named in the user's terms:
the variable a function captures (`co_freevars`), the global it reads, its default argument, an
attribute or field, an item; the functions on the way are named by their qualified names. A
function's key (`FunctionKey`) records its definition, the globals it reads, its defaults and
what it captures, so the difference can be named: another definition (and where each was
written), or the same definition reading another value (and which variable or global).

Only the key forms built in `eqxstable/_keys/` are walked by name; any other tuple is walked only
where exactly one item differs. The two values shown are never cut to the same text.
"""

import functools as ft
import struct
import types
from typing import Any, NamedTuple

from .._compat import code_qualname
from .._keys import Equal, FunctionKey, Identity, Key, MutableKey, Namespace
from .._keys._context import MAX_OBJECTS
from .._keys._fallbacks import TOO_MANY


_MAX = 40


class Step(NamedTuple):
    """One step from a key into a part of it: `kind` is "captured", "global", "default",
    "attr", "item" or "through" (a step with no name of its own: a bound method's function);
    `name` is the variable, attribute or item; `owner` is the function the variable belongs to."""

    kind: str
    name: str
    owner: str = ""
    code: Any = None


def _where(code: types.CodeType) -> str:
    return f"`{code_qualname(code)}` defined at {code.co_filename}:{code.co_firstlineno}"


def _safe_repr(obj: Any) -> str:
    try:
        return repr(obj)
    except Exception:
        return f"<{type(obj).__name__} object>"


def _text(part: Any) -> str:
    """The full rendering of one part of a key (not cut)."""
    if isinstance(part, Key):
        part = part.parts
    if isinstance(part, Namespace):
        obj = part.obj
        text = getattr(obj, "__name__", None) or f"a {type(obj).__name__}"
        return text if isinstance(text, str) else f"a {type(obj).__name__}"
    if isinstance(part, Identity):
        obj = part.obj
        kind = "object" if obj is None else type(obj).__name__
        return f"a {kind} at {hash(part):#x}"
    if type(part) is MutableKey:
        return _text(part.identity)
    if type(part) is FunctionKey:
        return _where(part.code)
    if isinstance(part, Equal):
        return _safe_repr(part.obj)
    if isinstance(part, tuple) and len(part) == 2 and part[0] is float:
        return repr(struct.unpack("<d", part[1])[0])
    if isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], type):
        return f"{part[0].__name__} {_safe_repr(part[1])}"
    return _safe_repr(part)


def _cut(text: str) -> str:
    return text if len(text) <= _MAX else text[: _MAX - 3] + "..."


def render(part: Any) -> str:
    """A short, readable rendering of one part of a key."""
    return _cut(_text(part))


def render_pair(a: Any, b: Any) -> str:
    """`"A -> B"` for two parts, cut where they differ: never two equal texts for two
    different parts."""
    x, y = _text(a), _text(b)
    if len(x) <= _MAX and len(y) <= _MAX:
        return f"{x} -> {y}"
    start = next((i for i, (c, d) in enumerate(zip(x, y)) if c != d), min(len(x), len(y)))
    if start < _MAX - 10:
        return f"{_cut(x)} -> {_cut(y)}"
    begin = start - 10

    def window(t: str) -> str:
        end = begin + _MAX - 6
        return "..." + t[begin:end] + ("..." if end < len(t) else "")

    return f"{window(x)} -> {window(y)}"


def _param_names(code: types.CodeType, count: int) -> list[str]:
    """The names of the last `count` positional parameters: those the defaults belong to."""
    names = list(code.co_varnames[: code.co_argcount])
    return names[len(names) - count :] if count <= len(names) else [str(i) for i in range(count)]


def _cell(part: Any) -> tuple[Any, Any]:
    """`(cell identity or None, contents key)` of one captured variable's key."""
    if type(part) is tuple and len(part) == 2 and type(part[0]) is Identity:
        return part[0], part[1]
    return None, part


def _function(a: FunctionKey, b: FunctionKey) -> tuple[Step, Any, Any] | None:
    """The first part of two keys of the same definition that differs, with its step."""
    owner = code_qualname(b.code)
    for name, x, y in zip(b.code.co_freevars, a.cells, b.cells):
        if x != y:
            (cx, vx), (cy, vy) = _cell(x), _cell(y)
            if cx is not None and cx == cy:
                x, y = vx, vy
            return Step("captured", name, owner, b.code), x, y
    ga, gb = dict(a.globals), dict(b.globals)
    for name in {**ga, **gb}:
        if ga.get(name) != gb.get(name):
            return Step("global", name, owner, b.code), ga.get(name), gb.get(name)
    da, db = _items(a.defaults), _items(b.defaults)
    if da is not None and db is not None and len(da) == len(db):
        for name, x, y in zip(_param_names(b.code, len(db)), da, db):
            if x != y:
                return Step("default", name, owner), x, y
    elif a.defaults != b.defaults:
        return Step("default", "", owner), a.defaults, b.defaults
    for label, pairs_a, pairs_b in (
        ("default", a.kwdefaults, b.kwdefaults),
        ("attr", a.attrs, b.attrs),
    ):
        found = _named(pairs_a, pairs_b)
        if found is not None:
            name, x, y = found
            return Step(label, name, owner if label == "default" else ""), x, y
    names = ("__name__", "__qualname__", "__module__", "__doc__", "__type_params__")
    for name, x, y in zip(names, a.names, b.names):
        if x != y:
            return Step("attr", name), x, y
    if a.annotations != b.annotations:
        return Step("attr", "__annotations__"), a.annotations, b.annotations
    return None


def _items(part: Any) -> tuple | None:
    """The items of a plain tuple's key, `(tuple, items)`."""
    if isinstance(part, Key):
        part = part.parts
    if type(part) is tuple and len(part) == 2 and part[0] is tuple and type(part[1]) is tuple:
        return part[1]
    return None


def _named(a: Any, b: Any) -> tuple[str, Any, Any] | None:
    """The first differing entry of two `((name, key), ...)` tuples with the same names."""
    if not (_is_named(a) and _is_named(b)) or [n for n, *_ in a] != [n for n, *_ in b]:
        return None
    for x, y in zip(a, b):
        if x != y:
            return x[0], (x[1] if len(x) == 2 else x[1:]), (y[1] if len(y) == 2 else y[1:])
    return None


def _is_named(part: Any) -> bool:
    return type(part) is tuple and all(
        type(p) is tuple and len(p) >= 2 and type(p[0]) is str for p in part
    )


def _class_of(head: Any) -> Any:
    """The class a container's key starts with: the class, a user's subclass keyed as a class
    (`("class", Namespace(cls), ...)`), or a library class keyed with its pytree registry entry
    (`("library-class", Namespace(cls), ...)`, `_keys/_registries.py`)."""
    if type(head) is tuple and len(head) > 1 and head[0] in ("class", "library-class"):
        cls = getattr(head[1], "obj", None)
        return cls if isinstance(cls, type) else head
    return head


def _container(a: tuple, b: tuple) -> tuple[Step, Any, Any] | None:
    """A step into the key of a container, record or callable built in `eqxstable/_keys/`."""
    head = _class_of(a[0])
    if head is tuple and len(a) == 2 and len(a[1]) == len(b[1]):
        for i, (x, y) in enumerate(zip(a[1], b[1])):
            if x != y:
                return Step("item", f"[{i}]"), x, y
    if isinstance(head, type) and issubclass(head, tuple) and len(a) == 3:
        # A NamedTuple (or another tuple subclass): its fields by name, then its attributes.
        fields = getattr(head, "_fields", None)
        if len(a[1]) == len(b[1]):
            for i, (x, y) in enumerate(zip(a[1], b[1])):
                if x != y:
                    name = f".{fields[i]}" if fields and i < len(fields) else f"[{i}]"
                    return Step("attr" if fields else "item", name), x, y
        found = _named(a[2], b[2])
        if found is not None:
            return Step("attr", f".{found[0]}"), found[1], found[2]
    if isinstance(head, type) and issubclass(head, ft.partial) and len(a) == 5:
        if a[1] != b[1]:
            return Step("attr", ".func"), a[1], b[1]
        xa, xb = _items(a[2]), _items(b[2])
        if xa is not None and xb is not None and len(xa) == len(xb):
            for i, (x, y) in enumerate(zip(xa, xb)):
                if x != y:
                    return Step("attr", f".args[{i}]"), x, y
        found = _named(a[3], b[3])
        if found is not None:
            return Step("attr", f".keywords[{found[0]!r}]"), found[1], found[2]
    if head in ("method", "jit") and len(a) == 3:
        if a[1] != b[1]:
            return Step("through", "__func__" if head == "method" else ""), a[1], b[1]
        if head == "method":
            return Step("attr", ".__self__"), a[2], b[2]
    if head == "module" and len(a) == 3 and a[1] == b[1]:
        found = _named(a[2], b[2])
        if found is not None:
            return Step("attr", f".{found[0]}"), found[1], found[2]
    if len(a) == 3 and type(a[1]) is tuple and _is_named(a[1]) and _is_named(b[1]):
        # A frozen dataclass or an Equinox module: (class, fields by name, attributes).
        found = _named(a[1], b[1]) or _named(a[2], b[2])
        if found is not None and a[0] == b[0]:
            return Step("attr", f".{found[0]}"), found[1], found[2]
    return None


def _walkable(part: Any) -> bool:
    return isinstance(part, (Key, tuple))


def difference(a: Any, b: Any) -> tuple[list[Step], Any, Any]:
    """The innermost parts of two keys that differ, and the steps that lead there.

    **Arguments:**

    - `a`, `b`: two stable keys (or parts of keys) that differ.

    **Returns:**

    `(steps, x, y)`: `x` and `y` are the innermost differing parts of `a` and `b`, reached from
    them by `steps` (an empty list when `a` and `b` differ as a whole).
    """
    steps: list[Step] = []
    for _ in range(200):  # Keys are at most 100 levels deep.
        if isinstance(a, Key):
            a = a.parts
        if isinstance(b, Key):
            b = b.parts
        if a == b:
            break
        found = None
        if type(a) is FunctionKey and type(b) is FunctionKey:
            if a.code == b.code and a.namespace == b.namespace:
                found = _function(a, b)
        elif type(a) is MutableKey or type(b) is MutableKey:
            # The same object with other contents was changed in place; another object is a
            # new object: which item differs is not needed either way.
            break
        elif type(a) is tuple and type(b) is tuple and a and b and len(a) == len(b):
            found = _container(a, b)
            if found is None and not isinstance(a[0], type) and a[0] == b[0]:
                # Another form: followed only where exactly one item differs.
                diffs = [(x, y) for x, y in zip(a, b) if x != y]
                if len(diffs) == 1 and all(map(_walkable, diffs[0])):
                    found = (Step("through", ""), *diffs[0])
        if found is None:
            break
        step, a, b = found
        steps.append(step)
    return steps, a, b


def _segments(steps: list[Step]) -> list[tuple[Step, str]]:
    """The steps grouped into variables and what is reached from each: `(variable step,
    expression)`, e.g. `(captured update_fns, "update_fns[1]")`; attributes and items before the
    first variable are grouped under a `through` step."""
    out: list[tuple[Step, str]] = []
    for step in steps:
        if step.kind in ("captured", "global", "default"):
            out.append((step, step.name))
        elif step.kind in ("attr", "item"):
            if not out:
                out.append((Step("through", ""), ""))
            head, text = out[-1]
            out[-1] = (head, text + step.name)
    return out


def _place(steps: list[Step], top: str | None) -> str:
    """Where the difference is, in words; `top` is the qualified name of the function the walk
    started from (its variables are "it captures"), or `None`."""
    segments = _segments(steps)
    if not segments:
        return ""
    head, expr = segments[-1]
    route = [text for _, text in segments[:-1] if text]
    inner = expr if expr.startswith((".", "[")) or not expr else expr
    base = head.name
    if head.kind == "through":
        where = f"`{inner.lstrip('.')}`" if inner else ""
    else:
        of_top = head.owner == top and not route
        if head.kind == "captured":
            what = "it captures" if of_top else f"captured by `{head.owner}`"
        elif head.kind == "global":
            what = "it reads" if of_top else f"read by `{head.owner}`"
        else:
            what = "" if of_top else f" of `{head.owner}`"
        if head.kind == "default":
            label = f"default argument `{base}`" if base else "default arguments"
            label = f"its {label}" if of_top else f"the {label}"
        else:
            label = f"the {'global ' if head.kind == 'global' else ''}`{base}`"
        label = f"{label}{'' if head.kind == 'default' else ' '}{what}"
        where = label if inner == base else f"`{inner}` in {label}"
    if route:
        where += f" (reached through {' -> '.join(f'`{r}`' for r in route)})"
    return where


def describe_change(old: Any, new: Any, rebuilt: bool = False) -> str:
    """How a static value's key changed, as a clause: "the global `lr` it reads was rebound:
    0.1 -> 0.5", "the list held by the `v` it captures was changed in place", "the `step_size`
    captured by `scale.<locals>.update_fn` (reached through `update_fns[1]` -> `tx.update`)
    changed: -0.001 -> -0.003". `rebuilt`: the two keys are of two objects (a function made
    again), so nothing "was rebound"."""
    top = old.parts if isinstance(old, Key) else old
    qualname = code_qualname(top.code) if type(top) is FunctionKey else None
    steps, a, b = difference(old, new)
    place = _place(steps, qualname)
    if type(a) is MutableKey and type(b) is MutableKey and a.identity == b.identity:
        kind = type(a.identity.obj).__name__
        return (
            f"the {kind} held by {place} was changed in place"
            if place
            else (f"the {kind} was changed in place")
        )
    held = _held_past_budget(a)
    if held is not None and held is _held_past_budget(b):
        kind = type(held).__name__
        return (
            f"the {kind} held by {place or 'it'} was changed in place (past the budget of "
            f"{MAX_OBJECTS:,} objects a key walks, it is keyed by identity and by the identity of "
            "everything it holds)"
        )
    last = _segments(steps)[-1] if steps and _segments(steps) else None
    rebound = (
        last is not None and last[0].kind in ("captured", "global") and last[1] == last[0].name
    )
    verb = "was rebound" if rebound and not rebuilt else "changed"
    return f"{place or 'its value'} {verb}: {render_pair(a, b)}"


def _held_past_budget(part: Any) -> Any:
    """The container that a key part past the object budget names by identity
    (`_keys._context.held_items`; a tuple of frozen records, `_keys._records.records_part`,
    with its records' classes after), else `None`."""
    if type(part) is tuple and len(part) in (3, 4) and part[0] == TOO_MANY:
        ident = part[1]
        if type(ident) is Identity:
            return ident.obj
    return None
