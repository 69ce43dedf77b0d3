"""What a key costs: linear in the distinct objects reached, never a walk of a live JAX trace,
bounded by a budget past which the object is equal to nothing (issue 19 items 1-2, issue 18
family 6)."""

import json
import os
import subprocess
import sys
import textwrap
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float

import eqxstable as es
from eqxstable._keys import _context, _numbering, compute, Identity, too_many_objects
from eqxstable._keys._context import MAX_OBJECTS
from eqxstable._keys._origin import library_function


# A vector of any length (a module-level alias: a string in an annotation reads as a name).
_Vector = Float[Array, "n"]


class _TooMuchWork(BaseException):
    """Raised by a counter past its bound: not an `Exception`, which a handler's fallback to
    identity would catch, so that a walk gone exponential fails at once instead of running on."""


def _walks(monkeypatch: Any, limit: int = MAX_OBJECTS + 1) -> list:
    """The walk (`_numbering.Walk`) of each key computation started from now on: its `walked`
    counts the objects it walked (each through `compound`). Counts of work, not seconds: a time
    limit fails on a loaded machine and passes a slow rule on a fast one."""
    walks = []

    class Counting(_numbering.Walk):
        def __init__(self) -> None:
            self.count = 0
            super().__init__()
            walks.append(self)

        @property
        def walked(self) -> int:  # pyright: ignore[reportIncompatibleVariableOverride]
            return self.count

        @walked.setter
        def walked(self, n: int) -> None:
            self.count = n
            if n > limit:
                raise _TooMuchWork(f"walked {n} objects, more than {limit}")

    monkeypatch.setattr(_context, "Walk", Counting)
    return walks


def _counting(monkeypatch: Any, cls: type, name: str, limit: int) -> list:
    """Counts the calls of `cls.name` (in `calls[0]`), failing past `limit`."""
    real = getattr(cls, name)
    calls = [0]

    def counted(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] > limit:
            raise _TooMuchWork(f"{cls.__name__}.{name} called more than {limit} times")
        return real(*args)

    monkeypatch.setattr(cls, name, counted)
    return calls


def _shared_tower(depth: int) -> list:
    node: list = []
    for _ in range(depth):
        node = [node, node]
    return node


def test_shared_structure_is_walked_once(monkeypatch):
    # 2**30 paths through 31 lists: each list is keyed (and watched) once.
    node = _shared_tower(30)
    f = lambda x: (x, node)  # noqa: E731
    walks = _walks(monkeypatch, limit=100)
    # A shared part's `==` and hash, counted from here to the end (past the limit, at once a
    # failure, never a walk of 2**30 paths): the keys below compare 60 levels.
    depth = 60
    eqs = _counting(monkeypatch, _numbering.Shared, "__eq__", limit=depth**2)
    hashes = _counting(monkeypatch, _numbering.Shared, "__hash__", limit=3 * depth**2)
    key, watch = compute(f)
    # The 31 lists, the function and what it holds: never a list once per path to it.
    assert [w.walked for w in walks] and all(w.walked <= 2 * 31 for w in walks)
    assert len(watch) < 100
    # The same structure built again is another object: a new key; the same one is the same key.
    assert compute(f)[0] == key
    other = _shared_tower(30)
    assert compute(lambda x: (x, other))[0] != key
    # Comparing two keys of equal shared structures costs their distinct parts, not their paths:
    # the calls of a shared part's `==` and hash (these keys and the ones above) grow with the
    # square of the depth at most (60 levels: 1,830 and 8,370 here; by path, 2**60).
    t: tuple = ()
    u: tuple = ()
    for _ in range(depth):
        t, u = (t, t), (u, u)
    assert es.stable_key(t) == es.stable_key(u)
    assert hash(es.stable_key(t)) == hash(es.stable_key(u))
    assert eqs[0] >= depth and hashes[0] >= depth


def test_shared_tuple_equals_two_equal_tuples():
    # Sharing is not part of an immutable value's key: `(p, p)` and `(p, q)` with `p == q`.
    p, q = (1, 2.0), (1, 2.0)
    assert es.stable_key((p, p)) == es.stable_key((p, q))
    assert es.stable_key((p, p)) != es.stable_key((p, (1, 2)))


def test_cycles_through_shared_objects():
    # A back-reference inside a sub-key that points outside it must not be reused elsewhere.
    a: list = []
    b: list = [a]
    a.append(b)
    outer = [a, b]
    key1 = es.stable_key(lambda: outer)
    c: list = []
    d: list = [c]
    c.append(d)
    other = [c, d]
    key2 = es.stable_key(lambda: other)
    assert key1 != key2  # different lists (identity), but both keys terminate
    x = ((1,), (1,))
    assert es.stable_key([x, x]) != es.stable_key([x])


@pytest.mark.counts_traces
def test_too_many_objects_is_equal_to_nothing_and_right(monkeypatch):
    # Lists of lists of lists: a list of small lists is keyed by identity one level down
    # (`test_keys_too_many_nested.py`); two levels down it can change where the walk did not go.
    data = [[[i]] for i in range(MAX_OBJECTS + 10)]
    traces = 0

    @es.filter_jit
    def total(scale, x):
        nonlocal traces
        traces += 1
        return x * scale()

    scale = lambda: 2.0  # noqa: E731
    key = compute(lambda: data)[0]
    assert too_many_objects(key)
    assert key != compute(lambda: data)[0]
    big = lambda: float(len(data))  # noqa: E731
    # Past the budget the walk stops: what `top` may walk for one key (the budget, once per try)
    # bounds what the call walks, however many objects the data holds.
    bound = (_context._RETRIES + 2) * (MAX_OBJECTS + 1)
    walks = _walks(monkeypatch)
    assert float(total(big, jnp.array(1.0))) == float(len(data))
    assert 0 < sum(w.walked for w in walks) <= bound
    data.append([[0]])
    assert float(total(big, jnp.array(1.0))) == float(len(data))
    assert traces == 2
    miss = total.misses[-1]
    assert miss.kind == "identity"
    assert "too many" in miss.reason
    # A small function still hits.
    total(scale, jnp.array(1.0))
    total(scale, jnp.array(1.0))
    assert traces == 3


@pytest.mark.counts_traces
def test_closure_over_outer_tracer(monkeypatch):
    # A static callable closing over a tracer of the enclosing trace (diffrax's event root find,
    # optimistix's implicit JVP): keyed by the tracer's identity, never by walking its trace.
    inner = 0

    @es.filter_jit
    def apply(f, y):
        nonlocal inner
        inner += 1
        return f(y)

    def loss(x, steps):
        acc = x
        for _ in range(steps):
            acc = jnp.sin(acc) * x
        return apply(lambda y: y * acc, jnp.ones(3)).sum()

    def plain(x, steps):
        acc = x
        for _ in range(steps):
            acc = jnp.sin(acc) * x
        return (jnp.ones(3) * acc).sum()

    walked = []
    for steps in (1, 4, 16):
        # What the keys of one outer trace walk: the closure and its cell (the tracer by
        # identity), as few objects for 16 steps of the trace as for one.
        walks = _walks(monkeypatch, limit=20)
        got = jax.jit(jax.grad(loss), static_argnums=1)(1.5, steps)
        walked.append(max(w.walked for w in walks))
        want = jax.jit(jax.grad(plain), static_argnums=1)(1.5, steps)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    # Each outer trace has new tracers: one inner trace per outer trace (as in Equinox).
    assert inner == 3
    assert walked[1] == walked[2] <= 10

    seen = []

    def keyed(x):
        acc = jnp.sin(x) * x
        key, watch = compute(lambda y: y * acc)
        seen.append((key, len(watch), acc))
        return acc

    jax.jit(jax.grad(keyed))(1.5)
    key, watched, tracer = seen[0]
    # Nothing of the trace is walked or watched: the function itself, and the tracer by identity.
    assert watched == 1
    assert Identity(tracer) in key.parts.cells
    assert key.identity


def _run_swapped(tmp_path, source: str, timeout: float) -> str:
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(source))
    out = subprocess.run(
        [sys.executable, "-m", "eqxstable", "doctor", "--stabilize", str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_diffrax_event_gradient_under_the_swap(tmp_path):
    # Grad through a continuous event: the root find's closures capture tracers of the solve.
    pytest.importorskip("diffrax")
    pytest.importorskip("optimistix")
    out = _run_swapped(
        tmp_path,
        """
        import jax, diffrax, optimistix as optx

        def crossing(y0):
            event = diffrax.Event(
                cond_fn=lambda t, y, args, **kwargs: y - 0.5,
                root_finder=optx.Newton(rtol=1e-8, atol=1e-8),
            )
            term = diffrax.ODETerm(lambda t, y, args: -y)
            sol = diffrax.diffeqsolve(
                term, diffrax.Tsit5(), t0=0.0, t1=10.0, dt0=0.1, y0=y0, event=event
            )
            return sol.ts[-1]

        value, grad = jax.value_and_grad(crossing)(2.0)
        print(f"{float(value):.6f} {float(grad):.6f}")
        """,
        timeout=240,
    )
    value, grad = map(float, out.split())
    assert value == pytest.approx(np.log(4.0), abs=1e-5)  # y0 * exp(-t) = 0.5
    assert grad == pytest.approx(0.5, abs=1e-5)  # d/dy0 log(2 * y0)


def test_a_set_that_did_not_change_keeps_its_key_valid():
    # A hit never keys a set again (jaxtyping's wrappers of methods close over one).
    names = {"t0", "t1", "self"}
    f = lambda x: x * len(names)  # noqa: E731
    _, watch = compute(f)
    assert watch.valid()
    names.add("ret0")
    assert not watch.valid()


def _generated(namespace: Any, filename: str = "<string>") -> types.FunctionType:
    code = compile("def f(x):\n    return x * scale\n", filename, "exec")
    return types.FunctionType(code.co_consts[0], namespace)


def test_code_generated_into_a_library_namespace_is_the_library_s():
    # Generated code is where its globals are: a library module's namespace (beartype's wrapper
    # of a library function, the methods `dataclasses` writes for a library's dataclass).
    assert library_function(_generated(vars(json)))
    assert library_function(_generated(vars(json), "<@beartype(json.f) at 0x1>"))
    # The user's: their module, a dict of their own (which may change), whatever `__main__` is.
    assert not library_function(_generated(globals()))
    assert not library_function(_generated({"__name__": "json", "scale": 2.0}))
    assert not library_function(_generated({"__name__": "__main__", "scale": 2.0}))
    assert not library_function(_generated(vars(sys.modules["__main__"])))


@pytest.mark.counts_traces
def test_code_generated_into_a_dict_of_the_user_s_is_keyed_by_what_it_reads():
    namespace = {"__name__": "mine", "scale": 2.0}
    f = _generated(namespace)
    traces = 0

    @es.filter_jit
    def apply(g, x):
        nonlocal traces
        traces += 1
        return g(x)

    assert float(apply(f, jnp.array(1.0))) == 2.0
    namespace["scale"] = 3.0
    assert float(apply(f, jnp.array(1.0))) == 3.0
    # Another namespace is another key (globals are read from it later): a trace, never a reuse.
    assert float(apply(_generated(dict(namespace)), jnp.array(1.0))) == 3.0
    assert traces == 3


@pytest.mark.counts_traces
def test_type_checked_functions_key_once(monkeypatch):
    pytest.importorskip("beartype")
    from beartype import beartype
    from jaxtyping import jaxtyped

    @jaxtyped(typechecker=beartype)
    def scale(x: _Vector, k: float) -> _Vector:
        return x * k

    @beartype
    def shift(x: _Vector) -> _Vector:
        return x + 1.0

    traces = 0

    @es.filter_jit
    def apply(f, g, x):
        nonlocal traces
        traces += 1
        return g(f(x, 2.0))

    for f in (scale, shift):
        # The function, its wrapper and what they read (35 and 19 objects here), never the
        # type checkers' machinery (keying a type-checked `diffeqsolve` walked 50,000).
        walks = _walks(monkeypatch, limit=200)
        _, watch = compute(f)
        assert 0 < sum(w.walked for w in walks) <= 200
        assert len(watch) < 500
    for _ in range(3):
        np.testing.assert_allclose(apply(scale, shift, jnp.ones(2)), 3.0)
    assert traces == 1
    assert compute(scale)[1].valid() and compute(shift)[1].valid()
    with pytest.raises(Exception, match="(?i)type"):
        apply(scale, shift, jnp.ones(2, dtype=jnp.int32))


def test_jaxtyped_diffrax_under_the_swap(tmp_path):
    # diffrax imported under jaxtyping's import hook with beartype, as its own test suite runs,
    # and `equinox.filter_jit` swapped: keying `diffeqsolve` walked 50,000 objects, and hits
    # keyed it again (issue 19 item 2).
    pytest.importorskip("diffrax")
    pytest.importorskip("beartype")
    out = _run_swapped(
        tmp_path,
        """
        from jaxtyping import install_import_hook

        with install_import_hook(["diffrax"], "beartype.beartype"):
            import diffrax
        import jax.numpy as jnp
        from eqxstable._keys import _context, _numbering, compute

        walks = []

        class Counting(_numbering.Walk):
            def __init__(self):
                super().__init__()
                walks.append(self)

        _context.Walk = Counting
        key, watch = compute(diffrax.diffeqsolve)
        walked = sum(w.walked for w in walks)
        term = diffrax.ODETerm(lambda t, y, args: -y)
        ys = []
        for y0 in (1.0, 2.0, 3.0):
            sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 1.0, 0.1, jnp.array(y0))
            ys.append(float(sol.ys[-1]))
        info = diffrax.diffeqsolve.cache_info()
        print(walked, len(watch), watch.valid(), info.hits, info.misses, *ys)
        """,
        timeout=300,
    )
    walked, watched, valid, hits, misses, *ys = out.split()
    # The objects the key walked, counted (not timed): 50,000, the budget, before.
    assert int(walked) < 5000
    assert int(watched) < 5000
    assert valid == "True"
    assert (int(hits), int(misses)) == (2, 1)
    np.testing.assert_allclose(
        [float(y) for y in ys], np.exp(-1.0) * np.array([1, 2, 3]), rtol=1e-3
    )
