"""A closure cell is taken as fixed (`K-cell`: keyed by contents, so `intern`, `StableModule` and
`stabilize` may hand out an equivalent closure) only where no store of the enclosing code can run
once a closure over it exists (`_cells._never_rebound`). Attack round 13a, finding 01: a
parameter rebound after the closure was interned (`s = later`, `s *= k`, after a `yield`) was
taken as fixed, and the canonical closure kept the old value.

Each enclosing function below is compiled on its own (`exec` into a fresh namespace, where the
enclosing code is found by name) and run twice, the first result kept alive (the registry holds
its canonicals weakly). What `intern` or a `StableModule` gives must be what the closure itself
computes after the enclosing function returned, as a plain `eqx.Module` holding it does."""

import asyncio
import contextlib
import textwrap
import types
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys._cells import sealed_cells


X = jnp.float32(1.0)


class Net(es.StableModule):
    fn: Any

    def __call__(self, v):
        return self.fn(v)


class Plain(eqx.Module):
    fn: Any = eqx.field(static=True)

    def __call__(self, v):
        return self.fn(v)


def _stable(f: Any) -> Any:
    return Net(f).fn


# name: (source of `build(s, later, wrap)` returning `(f, wrap(f))`, whether the cell is fixed)
SHAPES: dict[str, tuple[str, bool]] = {
    "param rebound after": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)
            s = later
            return f, g
        """,
        False,
    ),
    "param augmented after": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)
            s *= later
            return f, g
        """,
        False,
    ),
    "param rebound after yield": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            yield f, wrap(f)
            s = later
        """,
        False,
    ),
    "param rebound after await": (
        """
        async def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)
            await asyncio.sleep(0)
            s = later
            return f, g
        """,
        False,
    ),
    "local rebound after": (
        """
        def build(s, later, wrap):
            t = s
            f = lambda v: v * t
            g = wrap(f)
            t = later
            return f, g
        """,
        False,
    ),
    "finally": (
        """
        def build(s, later, wrap):
            try:
                f = lambda v: v * s
                g = wrap(f)
            finally:
                s = later
            return f, g
        """,
        False,
    ),
    "except": (
        """
        def build(s, later, wrap):
            try:
                f = lambda v: v * s
                g = wrap(f)
                raise KeyError
            except KeyError:
                s = later
            return f, g
        """,
        False,
    ),
    "with": (
        """
        def build(s, later, wrap):
            with contextlib.nullcontext():
                f = lambda v: v * s
                g = wrap(f)
                s = later
            return f, g
        """,
        False,
    ),
    "match": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)
            match later:
                case float():
                    s = later
            return f, g
        """,
        False,
    ),
    "while True and break": (
        """
        def build(s, later, wrap):
            n = 0
            while True:
                t = s if n == 0 else later
                if n == 0:
                    f = lambda v: v * t
                    g = wrap(f)
                n += 1
                if n == 2:
                    break
            return f, g
        """,
        False,
    ),
    "for, made in the first round": (
        """
        def build(s, later, wrap):
            for k in range(2):
                t = s if k == 0 else later
                if k == 0:
                    f = lambda v: v * t
                    g = wrap(f)
            return f, g
        """,
        False,
    ),
    "walrus": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)
            if (s := later) > 100:
                pass
            return f, g
        """,
        False,
    ),
    "walrus in a comprehension": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)
            [s := later for _ in range(1)]
            return f, g
        """,
        False,
    ),
    "nonlocal setter": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)

            def set_():
                nonlocal s
                s = later

            set_()
            return f, g
        """,
        False,
    ),
    "nonlocal in a class body": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)

            class Setter:
                nonlocal s
                s = later

            return f, g
        """,
        False,
    ),
    "made through a nested factory": (
        """
        def build(s, later, wrap):
            def mid():
                return lambda v: v * s

            f = mid()
            g = wrap(f)
            s = later
            return f, g
        """,
        False,
    ),
    "del after": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            g = wrap(f)
            del s
            return f, g
        """,
        False,
    ),
    # Fixed: every store runs before any closure over the cell is made.
    "param untouched": (
        """
        def build(s, later, wrap):
            f = lambda v: v * s
            return f, wrap(f)
        """,
        True,
    ),
    "param normalised first": (
        """
        def build(s, later, wrap):
            s = float(s)
            f = lambda v: v * s
            return f, wrap(f)
        """,
        True,
    ),
    "stores before, in a loop and a branch": (
        """
        def build(s, later, wrap):
            for _ in range(3):
                s = s + 0.0
            if later > 100:
                s = later
            f = lambda v: v * s
            g = wrap(f)
            for _ in range(2):
                pass
            return f, g
        """,
        True,
    ),
    "local captured, then bound once": (
        """
        def build(s, later, wrap):
            f = lambda v: v * t
            t = s
            g = wrap(f)
            return f, g
        """,
        True,
    ),
    "local captured, then bound twice": (
        """
        def build(s, later, wrap):
            f = lambda v: v * t
            t = s
            g = wrap(f)
            t = later
            return f, g
        """,
        False,
    ),
    "local captured, then bound once in a loop": (
        """
        def build(s, later, wrap):
            f = lambda v: v * t
            for k in range(2):
                t = s if k == 0 else later
                if k == 0:
                    g = wrap(f)
            return f, g
        """,
        False,
    ),
    "generator, bound before the yield": (
        """
        def build(s, later, wrap):
            t = s
            f = lambda v: v * t
            yield f, wrap(f)
            s = later
        """,
        True,
    ),
}


def _compile(source: str) -> Any:
    namespace: dict = {"asyncio": asyncio, "contextlib": contextlib}
    exec(textwrap.dedent(source), namespace)
    return namespace["build"]


def _run(build: Any, s: float, later: float, wrap: Any) -> tuple[Any, Any]:
    result = build(s, later, wrap)
    if isinstance(result, types.GeneratorType):
        return list(result)[0]
    if isinstance(result, types.CoroutineType):
        return asyncio.run(result)
    return result


def _outcome(fn: Any) -> Any:
    try:
        return float(fn(X))
    except NameError:
        return "unbound"


@pytest.mark.parametrize("wrap", [es.intern, _stable], ids=["intern", "StableModule"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_cell_rebound_after_its_closure_is_never_shared(shape: str, wrap: Any) -> None:
    source, fixed = SHAPES[shape]
    build = _compile(source)
    f1, g1 = _run(build, 2.0, 2.0, wrap)
    f2, g2 = _run(build, 2.0, 3.0, wrap)
    # What a plain `eqx.Module` holding the very closure computes, eagerly.
    want = _outcome(Plain(f2))
    assert _outcome(g2) == want
    jitted = eqx.filter_jit(lambda m, v: m(v))
    assert _outcome(lambda v: jitted(Plain(g2), v)) == want
    assert sealed_cells(f2, False) == (fixed,)
    # A fixed cell keeps the sharing: equivalent closures are one.
    assert (g2 is g1) == fixed
    assert _outcome(f1) == _outcome(g1)


def _recursive_maker(s: float) -> Any:
    def fact(n):
        return 1.0 if n == 0 else n * fact(n - 1)

    return lambda v: v * s * fact(2)


def test_a_recursive_helper_captured_before_its_binding_is_fixed() -> None:
    # `fact`'s cell is captured (by `fact` itself) before its one binding, which runs once.
    f = _recursive_maker(2.0)
    assert sealed_cells(f, False) == (True, True)
    assert es.stable_key(f) == es.stable_key(_recursive_maker(2.0))
    assert es.stable_key(f) != es.stable_key(_recursive_maker(3.0))


def test_shapes_cover_the_table() -> None:
    assert len(SHAPES) >= 15
    assert any(fixed for _, fixed in SHAPES.values())


# Generated enclosing functions: statements around the one closure, each of which may bind `s`.
_SIMPLE = [
    "{v} = later",
    "{v} *= later",
    "{v} = s + 0.0",
    "pass",
    "del {v}",
    "del {v}\n{v} = later",
]
_COMPOUND = [
    "for _ in range(2):\n{body}",
    "while n < 2:\n    n += 1\n{body}",
    "if later > 2.5:\n{body}",
    "try:\n{body}\nexcept KeyError:\n    pass",
    "try:\n    pass\nfinally:\n{body}",
    "with contextlib.nullcontext():\n{body}",
]
_CLOSE = "f = lambda v: v * {v}\ng = wrap(f)"


def _indent(text: str, by: str = "    ") -> str:
    return "\n".join(by + line for line in text.splitlines())


@st.composite
def _enclosing_functions(draw: Any) -> str:
    parts = draw(st.lists(st.sampled_from(_SIMPLE), max_size=3))
    at = draw(st.integers(0, len(parts)))
    parts.insert(at, _CLOSE)
    # Wrap a run of statements (the closure among them or not) in a compound statement.
    lo = draw(st.integers(0, len(parts) - 1))
    hi = draw(st.integers(lo, len(parts) - 1))
    template = draw(st.sampled_from(_COMPOUND))
    body = _indent("\n".join(parts[lo : hi + 1]))
    compound = template.format(body=body)
    statements = [*parts[:lo], compound, *parts[hi + 1 :]]
    inner = "\n".join(["n = 0", "g = f = None", *statements, "return f, g"])
    # The cell: the parameter, or a local the statements may bind.
    variable = draw(st.sampled_from(["s", "t"]))
    return "def build(s, later, wrap):\n" + _indent(inner.replace("{v}", variable))


@settings(max_examples=60, deadline=None)
@given(_enclosing_functions())
def test_generated_enclosing_functions_agree_with_the_closure(source: str) -> None:
    try:
        build = _compile(source)
    except SyntaxError:
        return
    # The statements may run the closure's line never (a branch not taken), or it may capture
    # an unbound cell (`del s`): only closures made are compared.
    try:
        f1, g1 = _run(build, 2.0, 2.0, es.intern)
        f2, g2 = _run(build, 2.0, 3.0, es.intern)
    except NameError:
        return
    for f, g in ((f1, g1), (f2, g2)):
        if f is not None:
            assert _outcome(g) == _outcome(f), source
