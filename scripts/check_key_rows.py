"""Breaks each row of the keys table (`eqxstable/_keys/README.md`) in turn and checks that the
tests notice: for every row, a weakened handler is patched in, the row tests run, and at least
one must fail. Not part of CI (a minute); run by hand after changing the table:

    python scripts/check_key_rows.py

Prints one line per row and exits non-zero if a broken row went unnoticed.
"""

import subprocess
import sys
import textwrap


TESTS = ["tests/test_keys_rows.py", "tests/test_keys_edges.py", "tests/test_jit_cache.py"]

# Row -> Python run before the tests (in a plugin), which weakens that row's handler.
BREAKS = {
    "int, bool, str, bytes, None": "r._EXACT[int] = r._EXACT[bool] = lambda o, c, k: ('v', o)",
    "float, complex": "r._EXACT[float] = lambda o, c, k: (float, o)",
    "NumPy scalar": "r.v.numpy_scalar.__code__ = (lambda o, c, k: (type(o), o.tobytes())).__code__",
    "subclass of a builtin value": "r.v.builtin_subclass = r.v.value",
    "range, slice": "r._EXACT[range] = lambda o, c, k: (range, o.start, o.stop)",
    "enum member": "r.v.enum_ = lambda o, c, k: ('enum', c_key(o._value_, c, False))",
    "tuple, NamedTuple, frozenset": "r.v.tuple_subclass = r.v.tuple_",
    "frozen dataclass, eqx.Module": "r.v._owns_dicts = lambda t: False",
    "hashable object": "r.v.by_reduce = lambda o, c, k: Equal(o, hash(o))",
    "__hash__ without __eq__": "r.hash_without_eq = r.v.by_reduce",
    "list, dict, set, bytearray, object": "r.v.list_state = lambda o: ()",
    "NumPy array at the top level": (
        "f = r.v.ndarray; r._EXACT[np.ndarray] = lambda o, c, k: f(o, c, False)"
    ),
    "NumPy array reached through a function": (
        "f = r.v.ndarray; r._EXACT[np.ndarray] = lambda o, c, k: f(o, c, True)"
    ),
    "jax.Array": "r.v.jax_array = lambda o, c, k: ('array',)",
    "user function": "r.c.extra_attrs = lambda o, c, skip=(): ()",
    "closure cell": "r.c.sealed_cells = lambda f, lib: (True,) * len(f.__closure__)",
    "closure cell counting its function's runs": (
        "r.c.counter_cells = lambda f, lib: (True,) * len(f.__closure__)"
    ),
    "functools.partial": "r.c.partial = lambda o, c, k: (type(o), c_key(o.func, c, False))",
    "bound method": "r._EXACT[types.MethodType] = lambda o, c, k: c_key(o.__func__, c, False)",
    "jax.jit function": "r._EXACT[r.c.PjitFunction] = lambda o, c, k: c_key(o._fun, c, False)",
    "user class": "r.v.user_class = r.v.constant",
    "user module": "r.v.user_module = r.v.constant",
    "library function, module, class": "r.library_class = lambda t: False",
    "library object holding user functions": "r.c.library_object = r.v.constant",
    "too deep, unreadable": "ctx.too_deep = lambda o, c: ('too-deep',)",
    "pytree node data (jit cache)": "keys_init.Ctx = lambda by_value=False: ctx.Ctx(False)",
}

PRELUDE = """
import types
import numpy as np
import eqxstable
from eqxstable import _keys as keys_init
from eqxstable._keys import _context as ctx, _rules as r
from eqxstable._keys._types import Equal
c_key = ctx.key
"""


def run(row: str, patch: str) -> bool:
    """Whether some test fails with `patch` applied."""
    plugin = textwrap.dedent(PRELUDE) + patch + "\n"
    code = (
        "import sys, types, pytest\n"
        "mod = types.ModuleType('break_row')\n"
        f"exec(compile({plugin!r}, 'break_row', 'exec'), mod.__dict__)\n"
        "args = ['-q', '-x', '-p', 'no:benchmark', '-p', 'no:jaxtyping']\n"
        # eqxstable (and equinox's jaxtyping plugin) are imported before pytest starts.
        "args += ['-W', 'ignore::pytest.PytestAssertRewriteWarning']\n"
        "sys.exit(pytest.main([*args, *sys.argv[1:]]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *TESTS], capture_output=True, text=True
    )
    if result.returncode not in (0, 1):
        raise SystemExit(f"`scripts/check_key_rows.py`: row {row!r}: pytest failed to run:\n"
                         + result.stdout[-3000:] + result.stderr[-3000:])
    return result.returncode == 1


def main() -> None:
    if run("none", "pass"):
        raise SystemExit("`scripts/check_key_rows.py`: the tests fail unpatched; fix them first.")
    missed = []
    for row, patch in BREAKS.items():
        noticed = run(row, patch)
        print(f"{'noticed' if noticed else 'NOT NOTICED'}: {row}")
        if not noticed:
            missed.append(row)
    if missed:
        raise SystemExit(f"{len(missed)} broken rows went unnoticed: {missed}")


if __name__ == "__main__":
    main()
