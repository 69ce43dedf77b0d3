"""`eqxstable doctor`: run a script as `python SCRIPT` (or a module as `python -m MODULE`) would,
with every `filter_jit` and `jax.jit` compile counted, and report when it ends, however it ends."""

import functools as ft
import importlib.metadata
import importlib.util
import inspect
import json
import os
import runpy
import sys
import traceback
from typing import Any

import equinox as eqx

from .._jit import current, filter_jit as stable_filter_jit, live_wrappers, miss_listeners
from ._jax_jit import JaxJitWatch
from ._launch import absolute, run_as_python
from ._observe import Observer
from ._render import equinox_row, jax_row, prediction, render_text, stable_row, totals


MSG_NO_SCRIPT = "eqxstable doctor: cannot run {script!r}: no such file or directory."
MSG_NO_MAIN = "eqxstable doctor: cannot run {script!r}: a directory needs a __main__.py."
MSG_SYNTAX = "eqxstable doctor: cannot run {script!r}: {error}, line {line}: {msg}."
MSG_UNREADABLE = "eqxstable doctor: cannot run {script!r}: {error}."
MSG_NO_MODULE = "eqxstable doctor: cannot run module {module!r}: no module named {missing!r}."
MSG_PACKAGE = (
    "eqxstable doctor: cannot run module {module!r}: it is a package without a __main__.py."
)
MSG_BAD_MODULE = "eqxstable doctor: cannot run module {module!r}: {error}."
MSG_NO_OUTPUT_DIR = "eqxstable doctor: cannot write the report to {path!r}: no such directory."
MSG_WRITTEN = "eqxstable doctor: report written to {path}"
_HERE = {
    os.path.abspath(__file__),
    os.path.abspath(runpy.__file__),
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "_observe.py"),
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launch.py"),
}


def check_output(path: str | None) -> str | None:
    """One clear line saying why the report cannot be written to `path`, or `None`."""
    if path is None or os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return None
    return MSG_NO_OUTPUT_DIR.format(path=path)


def check_script(script: str) -> str | None:
    """One clear line saying why `script` cannot run, or `None`."""
    if os.path.isdir(script):
        if os.path.isfile(os.path.join(script, "__main__.py")):
            return None
        return MSG_NO_MAIN.format(script=script)
    if not os.path.isfile(script):
        return MSG_NO_SCRIPT.format(script=script)
    try:
        with open(script, "rb") as f:
            source = f.read()
        compile(source, script, "exec", dont_inherit=True)
    except SyntaxError as e:
        return MSG_SYNTAX.format(script=script, error=type(e).__name__, line=e.lineno, msg=e.msg)
    except (OSError, ValueError) as e:
        return MSG_UNREADABLE.format(script=script, error=e)
    return None


def check_module(module: str) -> str | None:
    """One clear line saying why `python -m module` cannot run, or `None`. Like `python -m`, it
    imports the packages that contain `module` to find it."""
    saved = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            if importlib.util.find_spec(module + ".__main__") is None:
                return MSG_PACKAGE.format(module=module)
    except ModuleNotFoundError as e:
        return MSG_NO_MODULE.format(module=module, missing=e.name or module)
    except (ImportError, ValueError) as e:
        return MSG_BAD_MODULE.format(module=module, error=e)
    finally:
        sys.path[:] = saved
    if spec is None:
        return MSG_NO_MODULE.format(module=module, missing=module)
    return None


def _ours(tb: Any) -> bool:
    filename = tb.tb_frame.f_code.co_filename
    return filename.startswith("<frozen runpy") or os.path.abspath(filename) in _HERE


def _print_traceback(error: BaseException) -> None:
    # Python would show the script's frames only, so the doctor's and runpy's are unlinked.
    frames = []
    tb = error.__traceback__
    while tb is not None:
        if not _ours(tb):
            frames.append(tb)
        tb = tb.tb_next
    for before, after in zip(frames, frames[1:] + [None]):
        before.tb_next = after
    error.__traceback__ = frames[0] if frames else None
    sys.stdout.flush()
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)


def _exit_status(code: Any) -> int:
    # As the interpreter treats `sys.exit(code)`.
    if code is None:
        return 0
    if isinstance(code, int):
        # The status the process exits with: `True` is 1, and POSIX keeps the low byte.
        return int(code) & 0xFF
    sys.stdout.flush()
    print(code, file=sys.stderr)
    return 1


def _patch_filter_jit(make: Any) -> Any:
    """Routes every `equinox.filter_jit(fun, **options)` the script makes through
    `make(original, fun, options)`; returns the function that undoes it."""
    original = eqx.filter_jit

    @ft.wraps(original)
    def filter_jit(fun=None, /, **options):
        if fun is None and "fun" in options:
            fun = options.pop("fun")
        if fun is None:
            return ft.partial(filter_jit, **options)
        return make(original, fun, options)

    eqx.filter_jit = filter_jit
    return lambda: setattr(eqx, "filter_jit", original)


def _observed(observer: Observer) -> Any:
    # Observe only: Equinox's own wrapper, noted as one that `--stabilize` would replace.
    return lambda original, fun, options: observer.made(original(fun, **options))


def _stabilized(kept: list) -> Any:
    def make(original, fun, options):
        del original
        wrapper = stable_filter_jit(fun, **options)
        # Kept alive until the report, even when the script dropped it.
        kept.append(wrapper)
        return wrapper

    return make


def _busy(observer: Observer) -> Any:
    # Whether a `filter_jit` call runs in this thread: its compiles are counted in its own row.
    return lambda: observer.running() or current.call is not None


def _quiet_plugins_imported(addopts: str | None) -> str:
    """`PYTEST_ADDOPTS` for `-m pytest`: the pytest plugins the doctor imported before pytest
    started (eqxstable's own, and jaxtyping's through Equinox) cannot have their asserts
    rewritten, which pytest warns about, and a project's `filterwarnings = error` turns into a
    start-up error. Those warnings only, for those plugins only (on pytest 7, for any
    module), are ignored."""
    names = set()
    for entry in importlib.metadata.entry_points(group="pytest11"):
        name = entry.value.partition(":")[0].partition(".")[0]
        if name in sys.modules:
            names.add(name)
    prefix = "Module already imported so cannot be rewritten"
    if names and not _names_after_semicolon():
        # Older pytest (7.0, the floor of the `test` extra) writes `rewritten: NAME`, and a `-W`
        # message cannot hold a colon: there the filter is the message without the name.
        names = {""}
    filters = [
        f"-W 'ignore:{prefix}{'; ' if name else ''}{name}:pytest.PytestAssertRewriteWarning'"
        for name in sorted(names)
    ]
    return " ".join([*filters, addopts or ""]).strip()


def _names_after_semicolon() -> bool:
    # Whether the installed pytest writes the warning as `...rewritten; NAME` (pytest 8).
    try:
        from _pytest.assertion.rewrite import AssertionRewritingHook

        return "rewritten; " in inspect.getsource(AssertionRewritingHook._warn_already_imported)
    except (ImportError, AttributeError, OSError, TypeError):
        return False


def run(
    script: str, script_args: list[str], stabilize: bool = False, module: bool = False
) -> tuple[int, dict]:
    """Runs `script` as `python script *script_args` would (or, with `module=True`, as
    `python -m script *script_args`), with every `filter_jit` and `jax.jit` compile counted.

    **Arguments:**

    - `script`: the path of the script (or of a directory with a `__main__.py`), or the
        module's name.
    - `script_args`: its arguments; `sys.argv` is `[script, *script_args]` while it runs (the
        module's file in place of `script` for a module, as with `python -m`).
    - `stabilize`: whether `equinox.filter_jit` is replaced by `eqxstable.filter_jit` first.
    - `module`: whether `script` names a module.

    **Returns:**

    `(exit status, report)`: the status Python would exit with, and the report as a JSON-able
    dict (see `write_report`).
    """
    observer = Observer(only_made=True)
    hooks = observer.install()
    watch = JaxJitWatch(_busy(observer))
    explains = watch.install()
    kept: list = []
    undo = _patch_filter_jit(_stabilized(kept) if stabilize else _observed(observer))
    # The script's own `eqxstable.filter_jit` wrappers that missed, kept until the report too:
    # a function-local one is otherwise gone by then, its row with it (attack 14b-01).
    missed: dict[int, Any] = {}
    listener = lambda wrapper, miss: missed.setdefault(id(wrapper), wrapper)  # noqa: E731
    miss_listeners.append(listener)
    status = 0
    # The script's own functions are shown where the user named it (`examples/sweep.py:83`), not
    # by the absolute `__file__` Python gives them (and their code).
    script_file = None if module else absolute(script)
    saved_addopts = os.environ.get("PYTEST_ADDOPTS")
    if module and script in ("pytest", "py.test"):
        os.environ["PYTEST_ADDOPTS"] = _quiet_plugins_imported(saved_addopts)
    try:
        run_as_python(script, script_args, module)
    except SystemExit as e:
        status = _exit_status(e.code)
    except KeyboardInterrupt as e:
        _print_traceback(e)
        status = 130
    except BaseException as e:
        _print_traceback(e)
        status = 1
    finally:
        if saved_addopts is None:
            os.environ.pop("PYTEST_ADDOPTS", None)
        else:
            os.environ["PYTEST_ADDOPTS"] = saved_addopts
        undo()
        watch.uninstall()
        observer.uninstall()
        miss_listeners.remove(listener)
    # Stable wrappers: those `--stabilize` made, and any the script made itself with eqxstable;
    # one row per function, however often it was wrapped again.
    by_function: dict[tuple[str, str, type], list] = {}
    mine = sorted({**missed, **{id(w): w for w in live_wrappers}}.values(), key=lambda w: w.name)
    for wrapper in _unique([*kept, *mine]):
        if sum(wrapper.cache_info()[:2]):
            fun = getattr(wrapper, "__wrapped__", None)
            code = getattr(fun, "__code__", None)
            # A callable object (a module) has no code: its class stands for the function.
            cls = type(fun)
            where = f"{code.co_filename}:{code.co_firstlineno}" if code else cls.__qualname__
            by_function.setdefault((wrapper.name, where, cls), []).append(wrapper)
    rows = [stable_row(wrappers) for wrappers in by_function.values()]
    # A function only lowered is no call of Equinox's, but a miss of eqxstable's.
    rows += [equinox_row(r) for r in observer.records if r.calls or r.predicted]
    rows += [jax_row(r) for r in watch.records]
    if script_file is not None and script_file != script:
        rows = _as_given(rows, script_file + ":", script + ":")
    shown = f"-m {script}" if module else script
    report = {
        "script": shown,
        "argv": [shown, *script_args],
        "mode": "stabilize" if stabilize else "observe",
        "exit_status": status,
        "equinox_version": getattr(eqx, "__version__", "?"),
        "hooks": {"call": hooks[0], "trace": hooks[1], "jax_jit": explains},
        "functions": rows,
        "totals": totals(rows),
        "prediction": None if stabilize else prediction(rows),
    }
    if report["prediction"] is not None:
        report["prediction"]["jax_caches_cleared"] = observer.predictor.clears
    return status, report


def _as_given(value: Any, absolute_at: str, given_at: str) -> Any:
    # The report's rows with every `ABSOLUTE:LINE` of the script (a location, a reason's
    # "defined at") written as `SCRIPT:LINE`.
    if isinstance(value, str):
        return value.replace(absolute_at, given_at)
    if isinstance(value, dict):
        return {k: _as_given(v, absolute_at, given_at) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_as_given(v, absolute_at, given_at) for v in value)
    return value


def _unique(wrappers: list) -> list:
    return list({id(w): w for w in wrappers}.values())


def write_report(report: dict, output: str | None, as_json: bool) -> None:
    text = json.dumps(report, indent=2) + "\n" if as_json else render_text(report)
    sys.stdout.flush()
    if output is None:
        sys.stderr.write(("\n" if not as_json else "") + text)
        sys.stderr.flush()
        return
    with open(output, "w") as f:
        f.write(text)
    print(MSG_WRITTEN.format(path=output), file=sys.stderr)
