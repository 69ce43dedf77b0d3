"""How far one call of `es.filter_jit(f)(module, x)` walks through eqxstable's own files.

Prints, for the wrapper's creation and first call (a miss: a trace and a compile) and then for a
repeat call (a hit), the files and functions of the package that ran, how many times control
passed from one of the package's files to another, and the package's largest files. The
imports and JAX's own first-time set-up happen in a warm-up call of another function first, so
the figures are those of a running program, not of the first call in the process.

    python scripts/call_walk.py            # the summary
    python scripts/call_walk.py --list     # and every function that ran, per file

A "switch" is a call or return, among the package's own frames, that lands in another file
than the one that was running; frames of JAX, Equinox and the standard library in between are
not counted (a call out to JAX and back into the package is one switch if it lands in another
file).
"""

import argparse
import collections
import os
import sys
from types import FrameType
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

import eqxstable as es


PACKAGE = os.path.dirname(os.path.abspath(es.__file__))


class Walk:
    """The package's functions that ran while it was on, in order of events."""

    def __init__(self) -> None:
        self.functions: collections.Counter[tuple[str, str]] = collections.Counter()
        self.switches = 0
        self._last: str | None = None

    def _land(self, frame: FrameType | None) -> None:
        # The frame that runs after the event: the callee on a call, the caller on a return.
        # Walk out of foreign frames to the innermost frame of the package, if any.
        while frame is not None and not frame.f_code.co_filename.startswith(PACKAGE):
            frame = frame.f_back
        if frame is None:
            return
        filename = frame.f_code.co_filename
        if self._last is not None and filename != self._last:
            self.switches += 1
        self._last = filename

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        del arg
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(PACKAGE):
                name = getattr(code, "co_qualname", code.co_name)
                self.functions[(_short(code.co_filename), name)] += 1
                self._land(frame)
        elif event == "return" and frame.f_code.co_filename.startswith(PACKAGE):
            self._land(frame.f_back)

    def files(self) -> collections.Counter[str]:
        out: collections.Counter[str] = collections.Counter()
        for filename, _ in self.functions:
            out[filename] += 1
        return out


def _short(filename: str) -> str:
    return os.path.relpath(filename, os.path.dirname(PACKAGE))


def _run(fn: Any) -> Walk:
    walk = Walk()
    sys.setprofile(walk)
    try:
        jax.block_until_ready(fn())
    finally:
        sys.setprofile(None)
    return walk


def _report(title: str, walk: Walk, show: bool) -> None:
    files = walk.files()
    print(
        f"{title}: {len(files)} files, {len(walk.functions)} functions, "
        f"{walk.switches} switches between files"
    )
    if show:
        for filename, count in sorted(files.items()):
            print(f"  {filename} ({count})")
            for (f, name), calls in sorted(walk.functions.items()):
                if f == filename:
                    print(f"    {name} x{calls}")


def _largest(n: int) -> None:
    sizes = []
    for root, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path) as f:
                    sizes.append((sum(1 for _ in f), _short(path)))
    sizes.sort(reverse=True)
    print(f"largest files (lines), of {len(sizes)}:")
    for lines, path in sizes[:n]:
        print(f"  {lines:5d} {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--list", action="store_true", help="every function that ran")
    parser.add_argument("--largest", type=int, default=8, help="how many largest files")
    options = parser.parse_args()

    # A warm-up of another function and module: imports, JAX's first compile, lazy names.
    warm = eqx.nn.Linear(2, 2, key=jax.random.key(1))
    es.filter_jit(lambda m, x: m(x) + 1)(warm, jnp.ones(2))

    module = eqx.nn.MLP(3, 2, 8, 2, key=jax.random.key(0))
    x = jnp.ones(3)

    def f(m, x):
        return m(x)

    holder: list[Any] = []

    def first():
        holder.append(es.filter_jit(f))
        return holder[0](module, x)

    _report("wrapper and first call", _run(first), options.list)
    _report("repeat call", _run(lambda: holder[0](module, x)), options.list)
    _largest(options.largest)


if __name__ == "__main__":
    main()
