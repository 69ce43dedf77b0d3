"""The differential harness: one situation, one way of using eqxstable, checked against Python.

A *situation* is a function `situation(h)` that builds objects, calls `h.call(obj, *args)`,
changes something (a global, a closure cell, a list in place, a reloaded module...) and calls
again. Each `h.call` computes

- the **expected** answer: `apply(obj, *args)` in plain Python, no jit;
- a **fresh** answer: `equinox.filter_jit` of a brand-new function closing over the current
  objects, so it is traced now. It must agree with the expected one, or the situation itself is
  wrong (`IllPosed`). It is computed at every step whose answer is wrong, so that each failure
  is confirmed by a fresh trace, and at every step when the table is made;
- under `stable` and `intern`, the **baseline**: a plain `equinox.filter_jit` wrapper kept for
  the whole situation, called with the objects themselves (what a user gets without eqxstable);
- the answer of the **mode** under test:
  - `jit_arg`: one `es.filter_jit(apply)` for the whole situation, the objects as arguments;
  - `jit_wrap`: `es.filter_jit(obj)` (or of `Partial(apply, obj)`), one wrapper per object;
  - `stable`: the objects in an `es.StableModule`, one per object, plus plain `eqx.filter_jit`
    (one per step where the situation says `h.static_copies = True`, see below);
  - `intern`: `es.intern` of the objects, once per object, plus plain `eqx.filter_jit`; an
    object that is a pytree is rebuilt at each step with its leaves interned once per leaf
    (`jtu.tree_map` makes new containers, which cannot see later changes to the old ones);
  - `eqx` (only for the table, `python -m tests.differential.table`): the baseline alone.

The mode must give the expected answer, values and dtype (verdict `wrong` otherwise), and must
not raise or hang (`crash`; a call is given a few seconds). Under `stable` and `intern` the
replacement object (the holder's field, the representative) must also give the expected answer
*without* jit: `intern` never changes behaviour. A step at which the baseline itself is wrong (or
both crash) is `inherited`, not held against eqxstable: `intern` promises not to make plain
Equinox worse, not to fix it. A step where Equinox refuses the harness's own module around the
object is `n/a`. A recompile is never a failure.

A `StableModule` stores a list, dict, set or NumPy array held in a static field (its own, or one
of a nested module's) as a read-only copy made when it is built (CONTRACT section 2, "Static
fields ... become hashable canonical forms"; `docs/stable_module.md`): a change made in place to
the original afterwards is, by design, not seen by that module. A situation that makes such a
change sets `h.static_copies = True`; under `stable` it then builds the module anew at every step,
as a user must, and the check is that the new module never reuses a program traced for the old
contents.

Each situation runs with eqxstable's caches cleared and a temporary directory on `sys.path`
(`h.write_module`); its module-level code runs in a namespace dict (`h.module`), so loop variables
there are real globals. `h.expect_distinct` (on by default) checks that the expected answers
differ between steps, so that a stale answer could not pass unnoticed.
"""

import dataclasses
import functools as ft
import importlib
import os
import sys
import tempfile
import textwrap
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

import eqxstable as es

from .answers import CALL_SECONDS, CallTimeout, deadline, describe, same, where


MODES = ("jit_arg", "jit_wrap", "stable", "intern")
ALL_MODES = ("eqx", *MODES)

# Set by `tests/differential/table.py`: check every step of every situation against a fresh
# trace, not only the wrong ones (the suite skips it to stay fast).
CONFIRM_EVERY_STEP = os.environ.get("EQXSTABLE_DIFFERENTIAL_CONFIRM") == "1"


def call_obj(obj: Any, *args: Any) -> Any:
    """The default `apply`: call the object."""
    return obj(*args)


class PlainBox(eqx.Module):
    """A plain Equinox module holding a value as a static field."""

    obj: Any = eqx.field(static=True)


class _NotApplicable(Exception):
    """Equinox itself refuses the object in a module field: nothing of eqxstable's to test."""


def _plain_box(obj: Any) -> PlainBox:
    with warnings.catch_warnings():
        # Equinox warns when a NumPy value is static; the situations put it there on purpose.
        warnings.filterwarnings("ignore", "A JAX array is being set as static")
        try:
            return PlainBox(obj)
        except Exception as e:  # noqa: BLE001
            raise _NotApplicable(f"{type(e).__name__}: {e}") from e


class StableBox(es.StableModule):
    """The same, as a `StableModule`."""

    obj: Any = eqx.field(static=True)


class StableHolder(es.StableModule):
    """A `StableModule` holding a pytree (arrays traced, other leaves static)."""

    obj: Any


class IllPosed(AssertionError):
    """The situation itself is wrong: eager Python and a fresh `eqx.filter_jit` disagree."""


@dataclasses.dataclass
class Step:
    index: int
    label: str
    verdict: str  # "ok", "wrong", "crash", "inherited", "n/a"
    detail: str = ""
    baseline_ok: bool | None = None  # None: the baseline crashed.


class _Abandon(Exception):
    """Stops a situation after a hang."""


def _is_leaf_object(obj: Any) -> bool:
    return jtu.treedef_is_leaf(jtu.tree_structure(obj))


class _ByIdentity:
    """A small map keyed by object identity that keeps its keys alive (no `id()` reuse)."""

    def __init__(self):
        self._items: list[tuple[Any, Any]] = []

    def get(self, obj: Any, make: Callable[[], Any]) -> Any:
        for key, value in self._items:
            if key is obj:
                return value
        value = make()
        self._items.append((obj, value))
        return value


class Harness:
    """What a situation calls: `h.call(...)`, plus helpers for module-level code and files."""

    def __init__(self, mode: str, tmp: Path):
        assert mode in ALL_MODES
        self.mode = mode
        self.tmp = tmp
        self.steps: list[Step] = []
        self.expected: list[Any] = []
        # Set to False by a situation whose answers are equal on purpose (robustness cases).
        self.expect_distinct = True
        # Set to True by a situation that changes a list, dict, set or NumPy array in a static
        # field in place: a `StableModule` holds a read-only copy of it (see the docstring).
        self.static_copies = False
        # What `stable` or `intern` gave this step in place of the object.
        self._replacement: Any = None
        self._baseline: dict[tuple[int, bool], Callable] = {}
        self._mode_fns: dict[tuple[int, bool], Callable] = {}
        self._wrappers = _ByIdentity()
        self._holders = _ByIdentity()
        self._interned = _ByIdentity()
        self._keep: list[Any] = []

    # Calls.

    def _per_apply(self, table: dict, apply: Callable, box: bool, make: Callable) -> Callable:
        self._keep.append(apply)
        key = (id(apply), box)
        if key not in table:
            if box:
                table[key] = make(lambda b, *a: apply(b.obj, *a))
            else:
                table[key] = make(lambda o, *a: apply(o, *a))
        return table[key]

    def _run_mode(self, obj: Any, args: tuple, apply: Callable, box: bool) -> Any:
        if self.mode == "eqx":
            fn = self._per_apply(self._mode_fns, apply, box, eqx.filter_jit)
            return fn(_plain_box(obj) if box else obj, *args)
        if self.mode == "jit_arg":
            fn = self._per_apply(self._mode_fns, apply, box, es.filter_jit)
            return fn(_plain_box(obj) if box else obj, *args)
        if self.mode == "jit_wrap":

            def make():
                if apply is call_obj:
                    return es.filter_jit(obj)
                return es.filter_jit(ft.partial(apply, obj) if box else jtu.Partial(apply, obj))

            return self._wrappers.get(obj, make)(*args)
        if self.mode == "stable":
            # The holder is passed whole: plain Equinox sees the `StableModule` itself.
            fn = self._per_apply(self._mode_fns, apply, True, eqx.filter_jit)
            make = lambda: (StableBox if box else StableHolder)(obj)  # noqa: E731
            holder: Any = make() if self.static_copies else self._holders.get(obj, make)
            self._replacement = holder.obj
            return fn(holder, *args)
        fn = self._per_apply(self._mode_fns, apply, box, eqx.filter_jit)
        if box or _is_leaf_object(obj):
            rep = self._interned.get(obj, lambda: es.intern(obj))
        else:
            rep = jtu.tree_map(self._intern_leaf, obj)
        self._replacement = rep
        return fn(_plain_box(rep) if box else rep, *args)

    def _intern_leaf(self, leaf: Any) -> Any:
        if eqx.is_array(leaf):
            return leaf
        return self._interned.get(leaf, lambda: es.intern(leaf))

    def call(
        self, obj: Any, *args: Any, apply: Callable = call_obj, box: bool = False, label: str = ""
    ) -> Any:
        """Runs one step: the expected answer, the fresh and baseline ones, and the mode's.

        **Arguments:**

        - `obj`: the static object(s) under attack (a callable, a module, a value...).
        - `*args`: arrays, traced.
        - `apply`: `apply(obj, *args)` computes the answer; define it once per situation.
        - `box`: pass `obj` inside a static field instead of as a pytree.

        **Returns:** the expected (eager) answer.
        """
        index = len(self.steps)
        label = label or f"step {index}"
        expected = apply(obj, *args)
        if CONFIRM_EVERY_STEP:
            self._confirm(obj, args, apply, expected, label)
        self.expected.append(expected)
        baseline_ok: bool | None = None
        if self.mode in ("stable", "intern"):
            # Called at every step, so that its cache holds what a user's wrapper would hold.
            try:
                base_fn = self._per_apply(self._baseline, apply, box, eqx.filter_jit)
                baseline_ok = same(base_fn(_plain_box(obj) if box else obj, *args), expected)
            except Exception:  # noqa: BLE001
                baseline_ok = None
        try:
            with deadline(CALL_SECONDS), warnings.catch_warnings():
                # The documented warning for a class with `__hash__` but no `__eq__`; the suite
                # turns warnings into errors, and it is no wrong answer.
                warnings.simplefilter("ignore", es.StabilityWarning)
                got = self._run_mode(obj, args, apply, box)
        except (Exception, CallTimeout) as e:  # noqa: BLE001
            if isinstance(e, _NotApplicable):
                verdict = "n/a"
            elif self._excused(baseline_ok) and baseline_ok is None:
                verdict = "inherited"
            else:
                verdict = "crash"
            detail = f"{type(e).__name__} at {where(e)}: {str(e)[:300]}"
            self.steps.append(Step(index, label, verdict, detail, baseline_ok))
            if isinstance(e, CallTimeout):
                raise _Abandon from e  # One hang is enough; the next steps would hang too.
            return expected
        changed = self._changed_without_jit(obj, args, apply, expected)
        if changed:
            # `intern` and `StableModule` must never change behaviour, jit or no jit.
            self.steps.append(Step(index, label, "wrong", changed, baseline_ok))
            return expected
        if same(got, expected):
            verdict = "ok"
        else:
            # A wrong answer is only held against eqxstable once a fresh trace confirms it.
            self._confirm(obj, args, apply, expected, label)
            verdict = "inherited" if self._excused(baseline_ok) else "wrong"
        detail = f"got {describe(got)}, expected {describe(expected)}"
        self.steps.append(Step(index, label, verdict, detail, baseline_ok))
        return expected

    def _changed_without_jit(self, obj: Any, args: tuple, apply: Callable, expected: Any) -> str:
        if self.mode not in ("stable", "intern"):
            return ""
        replacement = self._replacement
        try:
            eager = apply(replacement, *args)
        except Exception as e:  # noqa: BLE001
            return f"without jit, the {self.mode} replacement raises {type(e).__name__}: {e}"
        if same(eager, expected):
            return ""
        return (
            f"without jit, the {self.mode} replacement gives {describe(eager)}, the "
            f"original {describe(expected)}"
        )

    def _confirm(self, obj: Any, args: tuple, apply: Callable, expected: Any, label: str) -> None:
        # A brand-new function, so a brand-new trace of the objects as they are now.
        fresh = eqx.filter_jit(lambda *a: apply(obj, *a))(*args)
        if not same(expected, fresh):
            raise IllPosed(
                f"{label}: eager {describe(expected)} but a fresh eqx.filter_jit gives "
                f"{describe(fresh)}"
            )

    def _excused(self, baseline_ok: bool | None) -> bool:
        # Under plain `eqx.filter_jit` the user gets what Equinox gives; eqxstable's promise for
        # `stable` and `intern` is not to make it worse.
        return self.mode in ("stable", "intern") and baseline_ok is not True

    # Module-level code and user modules.

    def module(
        self,
        source: str,
        namespace: dict[str, Any] | None = None,
        filename: str = "<situation>",
        **names: Any,
    ) -> dict[str, Any]:
        """Executes `source` at module level in a namespace dict (a script or notebook cell);
        `h`, `jax`, `jnp`, `np`, `eqx` and `ft` are defined there. Returns the namespace."""
        ns: dict[str, Any] = namespace if namespace is not None else {"__name__": "__main__"}
        ns.update(h=self, jax=jax, jnp=jnp, np=np, eqx=eqx, ft=ft, **names)
        exec(compile(textwrap.dedent(source), filename, "exec"), ns)
        return ns

    def write_module(self, source: str) -> Any:
        """Writes `source` to a new module file under the temporary directory and imports it."""
        name = f"diffmod_{uuid.uuid4().hex[:12]}"
        (self.tmp / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        return importlib.import_module(name)

    def rewrite_module(self, module: Any, source: str) -> Any:
        """Rewrites the module's file and `importlib.reload`s it."""
        Path(module.__file__).write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        return importlib.reload(module)


@dataclasses.dataclass
class Outcome:
    steps: list[Step]

    @property
    def status(self) -> str:
        verdicts = {s.verdict for s in self.steps}
        if "crash" in verdicts:
            return "CRASH"
        if "wrong" in verdicts:
            return "WRONG"
        if verdicts == {"n/a"}:
            return "n/a"
        return "pass"

    @property
    def baseline_wrong(self) -> bool:
        return any(s.baseline_ok is False for s in self.steps)

    def report(self) -> str:
        return "\n".join(
            f"  {s.label}: {s.verdict} ({s.detail})" for s in self.steps if s.verdict != "ok"
        )


def run(situation: Callable[[Harness], None], mode: str) -> Outcome:
    """Runs a situation under one mode, in a fresh temporary directory on `sys.path`, with
    eqxstable's caches cleared first (so the result does not depend on what ran before)."""
    # No `gc.collect()` here (it costs more than the situation); the situations where identity
    # reuse matters collect themselves.
    es.clear_caches()
    with tempfile.TemporaryDirectory() as tmp:
        old_path, old_bytecode = list(sys.path), sys.dont_write_bytecode
        old_modules = set(sys.modules)
        # A file rewritten within the same second keeps its size and mtime: no stale `.pyc`.
        sys.dont_write_bytecode = True
        sys.path.insert(0, tmp)
        h = Harness(mode, Path(tmp))
        try:
            situation(h)
        except _Abandon:
            h.expect_distinct = False
        finally:
            sys.path[:] = old_path
            sys.dont_write_bytecode = old_bytecode
            for name in set(sys.modules) - old_modules:
                if name.startswith("diffmod_"):
                    del sys.modules[name]
    if h.expect_distinct:
        firsts = h.expected[0], h.expected[1:]
        assert any(not same(firsts[0], e) for e in firsts[1]), (
            "the situation cannot tell a stale answer from a right one: every step's expected "
            "answer is the same"
        )
    return Outcome(h.steps)


def check(situation: Callable[[Harness], None], mode: str) -> None:
    """Runs a situation under one mode and fails on any wrong answer or crash."""
    outcome = run(situation, mode)
    if outcome.status not in ("pass", "n/a"):
        raise AssertionError(
            f"{situation.__name__} under {mode}: {outcome.status}\n{outcome.report()}"
        )


class Situations(list):
    """A list of situations, filled by the `@SITUATIONS.add` decorator."""

    def add(self, fn: Callable[[Harness], None]) -> Callable[[Harness], None]:
        self.append(fn)
        return fn
