"""The `eqxstable` command line: `eqxstable doctor SCRIPT [ARGS...]`."""

import argparse
import sys
from collections.abc import Sequence


_DOCTOR_HELP = (
    "Run SCRIPT as `python SCRIPT ARGS...` would, count and explain every call of "
    "`equinox.filter_jit`, and print a report when it ends (also when it raises or calls "
    "`sys.exit`). Exits with the script's own status; 2 if it cannot run."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eqxstable", description="Find out why Equinox code recompiles."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser("doctor", help=_DOCTOR_HELP, description=_DOCTOR_HELP)
    doctor.add_argument(
        "--stabilize",
        action="store_true",
        help="run with eqxstable's `filter_jit` in place of `equinox.filter_jit`",
    )
    doctor.add_argument("--json", action="store_true", help="write the report as JSON")
    doctor.add_argument(
        "--output", metavar="FILE", help="write the report to FILE instead of stderr"
    )
    doctor.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    doctor.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `eqxstable` console script and of `python -m eqxstable`.

    **Arguments:**

    - `argv`: the command line without the program name; `sys.argv[1:]` by default.

    **Returns:** the exit status: the script's own, or 2 when it cannot run.
    """
    options = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    from ._doctor import check_output, check_script, run, write_report

    problem = check_script(options.script) or check_output(options.output)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    status, report = run(options.script, options.args, stabilize=options.stabilize)
    write_report(report, options.output, options.json)
    return status
