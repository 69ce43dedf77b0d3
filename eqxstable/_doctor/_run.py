"""`eqxstable doctor`: run a script as `python SCRIPT` would, with every `filter_jit` counted,
and report when it ends, however it ends."""

import functools as ft
import json
import os
import runpy
import sys
import traceback
from typing import Any

import equinox as eqx

from .._jit import filter_jit as stable_filter_jit, report as stable_report
from .._jit._accounting import live_wrappers
from ._observe import Observer
from ._render import equinox_row, render_text, stable_row, totals


MSG_NO_SCRIPT = "eqxstable doctor: cannot run {script!r}: no such file or directory."
MSG_NO_MAIN = "eqxstable doctor: cannot run {script!r}: a directory needs a __main__.py."
MSG_SYNTAX = "eqxstable doctor: cannot run {script!r}: {error}, line {line}: {msg}."
MSG_UNREADABLE = "eqxstable doctor: cannot run {script!r}: {error}."
MSG_NO_OUTPUT_DIR = "eqxstable doctor: cannot write the report to {path!r}: no such directory."
MSG_WRITTEN = "eqxstable doctor: report written to {path}"
_HERE = {
    os.path.abspath(__file__),
    os.path.abspath(runpy.__file__),
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "_observe.py"),
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
        return code
    sys.stdout.flush()
    print(code, file=sys.stderr)
    return 1


def _stabilize(kept: list) -> Any:
    """Replaces `equinox.filter_jit` with eqxstable's; returns the function that undoes it."""
    original = eqx.filter_jit

    @ft.wraps(original)
    def filter_jit(fun=None, /, **options):
        if fun is None:
            return ft.partial(filter_jit, **options)
        wrapper = stable_filter_jit(fun, **options)
        # Kept alive until the report, even when the script dropped it.
        kept.append(wrapper)
        return wrapper

    eqx.filter_jit = filter_jit
    return lambda: setattr(eqx, "filter_jit", original)


def run(script: str, script_args: list[str], stabilize: bool = False) -> tuple[int, dict]:
    """Runs `script` as `python script *script_args` would, with every `filter_jit` counted.

    **Arguments:**

    - `script`: the path of the script (or of a directory with a `__main__.py`).
    - `script_args`: its arguments; `sys.argv` is `[script, *script_args]` while it runs.
    - `stabilize`: whether `equinox.filter_jit` is replaced by `eqxstable.filter_jit` first.

    **Returns:**

    `(exit status, report)`: the status Python would exit with, and the report as a JSON-able
    dict (see `write_report`).
    """
    observer = Observer()
    hooks = observer.install()
    kept: list = []
    undo = _stabilize(kept) if stabilize else None
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *script_args]
    here = os.path.abspath(script)
    sys.path[0:1] = [here if os.path.isdir(script) else os.path.dirname(here)]
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        status = _exit_status(e.code)
    except KeyboardInterrupt as e:
        _print_traceback(e)
        status = 130
    except BaseException as e:
        _print_traceback(e)
        status = 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if undo is not None:
            undo()
        observer.uninstall()
    # Stable wrappers: those `--stabilize` made, and any the script made itself with eqxstable.
    stable = _unique([*kept, *sorted(live_wrappers, key=lambda w: w.name)])
    rows = [stable_row(w) for w in stable if sum(w.cache_info()[:2])]
    rows += [equinox_row(r) for r in observer.records if r.calls]
    report = {
        "script": script,
        "argv": [script, *script_args],
        "mode": "stabilize" if stabilize else "observe",
        "exit_status": status,
        "equinox_version": getattr(eqx, "__version__", "?"),
        "hooks": {"call": hooks[0], "trace": hooks[1]},
        "functions": rows,
        "totals": totals(rows),
    }
    if stabilize:
        report["report"] = stable_report()
    return status, report


def _unique(wrappers: list) -> list:
    return list({id(w): w for w in wrappers}.values())


def write_report(report: dict, output: str | None, as_json: bool) -> None:
    text = json.dumps(report, indent=2) + "\n" if as_json else render_text(report)
    if report["mode"] == "stabilize" and not as_json:
        text += "\nes.report():\n" + report["report"] + "\n"
    sys.stdout.flush()
    if output is None:
        sys.stderr.write(("\n" if not as_json else "") + text)
        sys.stderr.flush()
        return
    with open(output, "w") as f:
        f.write(text)
    print(MSG_WRITTEN.format(path=output), file=sys.stderr)
