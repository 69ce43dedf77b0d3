"""The `eqxstable` command line: `eqxstable doctor (SCRIPT | -m MODULE) [ARGS...]`."""

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Sequence


_DOCTOR_HELP = (
    "Run SCRIPT as `python SCRIPT ARGS...` would (or MODULE as `python -m MODULE ARGS...`), count "
    "and explain every compile of `equinox.filter_jit`, eqxstable's `filter_jit` and `jax.jit`, "
    "and print a report when it ends (also when it raises or calls `sys.exit`). Exits with the "
    "script's own status; 2 if it cannot run."
)
_DOCTOR_USAGE = (
    "eqxstable doctor [-h] [--stabilize] [--json] [--output FILE] (SCRIPT | -m MODULE) [ARGS ...]"
)
MSG_NO_TARGET = "give the script to run (SCRIPT) or a module (-m MODULE)"
MSG_BOTH = "give either SCRIPT or -m MODULE, not both: everything after -m MODULE is its ARGS"


def _version() -> str:
    # From the installed metadata, so that `--version` does not import JAX.
    return f"eqxstable {importlib.metadata.version('eqxstable')}"


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog="eqxstable", description="Find out why Equinox and JAX code recompiles."
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser(
        "doctor", help=_DOCTOR_HELP, description=_DOCTOR_HELP, usage=_DOCTOR_USAGE
    )
    doctor.add_argument(
        "--stabilize",
        action="store_true",
        help="run with eqxstable's `filter_jit` in place of `equinox.filter_jit`",
    )
    doctor.add_argument("--json", action="store_true", help="write the report as JSON")
    doctor.add_argument(
        "--output", metavar="FILE", help="write the report to FILE instead of stderr"
    )
    # As with `python -m`: everything after the module's name is its own.
    doctor.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE",
        help="run library module MODULE as a script, as `python -m MODULE` does",
    )
    doctor.add_argument("script", nargs="?", metavar="SCRIPT", help="the Python script to run")
    doctor.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments"
    )
    return parser, doctor


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `eqxstable` console script and of `python -m eqxstable`.

    **Arguments:**

    - `argv`: the command line without the program name; `sys.argv[1:]` by default.

    **Returns:** the exit status: the script's own, or 2 when it cannot run.
    """
    parser, doctor = _parser()
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    module = options.module is not None
    if module and options.script is not None:
        doctor.error(MSG_BOTH)
    if module and not options.module:
        doctor.error("argument -m: expected the MODULE to run")
    if not module and options.script is None:
        doctor.error(MSG_NO_TARGET)
    from ._doctor import check_module, check_output, check_script, run, write_report

    if module:
        target, args = options.module[0], options.module[1:]
    else:
        target, args = options.script, options.args
    assert isinstance(target, str)
    problem = (check_module(target) if module else check_script(target)) or check_output(
        options.output
    )
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    # The script may `os.chdir`: the report goes where the user named it, relative to the
    # directory the doctor was started in (as every command line tool resolves its own paths),
    # and the message names that file unambiguously.
    output = None if options.output is None else os.path.abspath(options.output)
    status, report = run(target, args, stabilize=options.stabilize, module=module)
    write_report(report, output, options.json)
    return status
