"""Running a script or a module exactly as `python SCRIPT` or `python -m MODULE` would.

What the script can see of how it was started is the same as under `python`, in the doctor's
own process:

- `__main__`: a fresh module in `sys.modules`, with the `builtins` module as `__builtins__`.
- A file (`python SCRIPT`): `__file__` is absolute (the working directory, a separator and
  `SCRIPT`, not normalised: `./a.py` gives `/cwd/./a.py`), `__loader__` a `SourceFileLoader`
  named `__main__`, `__spec__`, `__package__` and `__cached__` are `None`; `sys.argv` is
  `[SCRIPT, *ARGS]` as given, `sys.path[0]` the script's directory, symbolic links resolved.
- A directory or zip (`python DIR`): run as the module `__main__` found in `DIR` (made absolute
  as above, and put first on `sys.path`); `sys.argv` is `[DIR, *ARGS]`.
- A module (`python -m MODULE`): `sys.argv` is `['-m', *ARGS]` while the module is found, then
  its file; `sys.path[0]` is the working directory; the spec, package and cache path are the
  module's.

Python computes these in C (`Modules/main.c`, `Python/pythonrun.c`); directories and modules it
runs through `runpy._run_module_as_main`, as done here. `tests/test_doctor_launch.py` compares
each case with a real `python` subprocess. With `-P` (`PYTHONSAFEPATH`, Python >= 3.11) Python
puts no directory in front of `sys.path` for a file or a module, and neither does this.
"""

import builtins
import os
import runpy
import sys
import types
from importlib.machinery import SourceFileLoader
from typing import Any


def absolute(path: str) -> str:
    """`path` made absolute as Python makes a script's `__file__`."""
    # As CPython's `_Py_abspath`: the working directory and the path, joined by one separator
    # and not normalised (`./a.py` gives `/cwd/./a.py`, and the root gives `//a.py`).
    if os.path.isabs(path):
        return path
    return os.getcwd() + os.sep + path


def _fresh_main() -> types.ModuleType:
    # The `__main__` module as the interpreter creates it before it runs a script.
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    if sys.version_info < (3, 14):
        # Python 3.10 to 3.13 start `__main__` with empty annotations (3.14 made them lazy).
        main.__dict__["__annotations__"] = {}
    return main


def _set_path0(path0: str | None, insert: bool) -> None:
    # The doctor's own `sys.path[0]` (its working directory or its console script's directory)
    # is there unless Python runs in safe-path mode; the script's takes its place.
    safe = bool(getattr(sys.flags, "safe_path", False))
    if path0 is None:
        return
    if safe:
        if insert:
            sys.path.insert(0, path0)
    else:
        sys.path[0:1] = [path0]


def _run_file(main: types.ModuleType, script: str) -> None:
    filename = absolute(script)
    namespace = main.__dict__
    namespace["__file__"] = filename
    namespace["__cached__"] = None
    namespace["__loader__"] = SourceFileLoader("__main__", filename)
    try:
        with open(filename, "rb") as f:
            source = f.read()
        code = compile(source, filename, "exec", dont_inherit=True)
        exec(code, namespace)
    finally:
        # As Python does once the script has run.
        namespace.pop("__file__", None)
        namespace.pop("__cached__", None)


def run_as_python(target: str, args: list[str], module: bool) -> Any:
    """Runs `target` as `python target *args` (or `python -m target *args`) would, in this
    process; raises whatever the script raises (`SystemExit` included). `sys.argv`, `sys.path`
    and `sys.modules["__main__"]` are restored afterwards.

    **Arguments:**

    - `target`: the script's path (a file, or a directory or zip with a `__main__.py`), or the
        module's name.
    - `args`: the script's arguments.
    - `module`: whether `target` names a module.

    **Returns:**

    `None`.
    """
    main = _fresh_main()
    saved_main = sys.modules.get("__main__")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.modules["__main__"] = main
    try:
        if module:
            sys.argv = ["-m", *args]
            _set_path0(os.getcwd(), insert=False)
            runpy._run_module_as_main(target, alter_argv=True)  # pyright: ignore
        elif not os.path.isfile(target) or _is_zip(target):
            sys.argv = [target, *args]
            _set_path0(absolute(target), insert=True)
            runpy._run_module_as_main("__main__", alter_argv=False)  # pyright: ignore
        else:
            sys.argv = [target, *args]
            _set_path0(os.path.dirname(os.path.realpath(target)), insert=False)
            _run_file(main, target)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is None:
            sys.modules.pop("__main__", None)
        else:
            sys.modules["__main__"] = saved_main


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False
