#!/usr/bin/env bash
# The project's one test command: the README and `.ci/run` both call this script, so they cannot
# drift apart. Run it from anywhere; it runs from the repository root.
#
# Two pytest processes, because XLA fixes the number of CPU devices when a process starts:
#   1. every test except those marked `multidevice`, on the machine's default devices;
#   2. only the `multidevice` tests (everything under tests/multidevice/ is marked automatically by
#      tests/conftest.py), with XLA told to fake 8 CPU devices.
# Both always run, so that a failure in the first does not hide one in the second; the script fails
# if either does. Any pytest exit status other than 0 counts as a failure, including 5 ("no tests
# collected"). Arguments are passed to both pytest processes (e.g. `-q`, `-x`).
set -uo pipefail
cd "$(dirname "$0")/.."

python3 -m pytest -m "not multidevice" "$@" tests
first=$?
XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_force_host_platform_device_count=8" \
    python3 -m pytest -m multidevice "$@" tests
second=$?

if [[ $first -ne 0 || $second -ne 0 ]]; then
    echo "scripts/test.sh: failed (pytest exit status: $first without the multidevice tests," \
        "$second for the multidevice tests)" >&2
    exit 1
fi
