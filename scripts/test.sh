#!/usr/bin/env bash
# The project's one test command: the README and `.ci/run` both call this script, so they cannot
# drift apart. Run it from anywhere; it runs from the repository root.
#
# Two pytest processes, because XLA fixes the number of CPU devices when a process starts:
#   1. every test except those marked `multidevice`, on the machine's default devices;
#   2. only the `multidevice` tests (everything under tests/multidevice/ is marked automatically by
#      tests/conftest.py), with XLA told to fake 8 CPU devices.
# Any pytest exit status other than 0 fails the script, including 5 ("no tests collected").
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pytest -m "not multidevice" tests
XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_force_host_platform_device_count=8" \
    python3 -m pytest -m multidevice tests
