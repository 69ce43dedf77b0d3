#!/usr/bin/env bash
# Proves the versions `pyproject.toml` declares: builds a fresh venv and runs the test suite in it.
#
#   bash scripts/test-floors.sh [floor]    the oldest declared Python found on this machine, with
#                                          every `>=` floor of the runtime dependencies and of the
#                                          `test` extra pinned exactly (a pip constraints file)
#   bash scripts/test-floors.sh newest     the newest Python found, with the newest releases that
#                                          the package index offers for it
#
# `PINS="name==version ..."` overrides single pins (a row of the matrix between floor and newest).
# Extra arguments are handed to pytest instead of running the whole `scripts/test.sh`, e.g.
# `bash scripts/test-floors.sh floor -x tests/test_jit.py`. The venv lives in a temporary folder
# and is deleted on exit (or in `$FLOORS_VENV`, kept); pip's download cache is reused between runs.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-floor}"
[[ $# -gt 0 ]] && shift
case "$mode" in
floor | newest) ;;
*)
    echo "usage: bash scripts/test-floors.sh [floor|newest] [pytest arguments...]" >&2
    exit 2
    ;;
esac

# The machine's `python3` only reads pyproject.toml (tomllib, Python >= 3.11); the tests run in
# the venv.
host_python="$(command -v python3)"
declared_python="$("$host_python" -c 'import re, tomllib
spec = tomllib.load(open("pyproject.toml", "rb"))["project"]["requires-python"]
print(re.fullmatch(r">=\s*(3\.\d+)", spec.strip()).group(1))')"

# Every Python 3 interpreter this machine has at or above the declared floor, oldest first: those
# on PATH as `python3.N` and those that pyenv installed. Each is run once, since a pyenv shim is on
# PATH even for versions that pyenv will refuse to run.
find_pythons() {
    local minor candidates=()
    for minor in $(seq "${declared_python#3.}" 20); do
        if "python3.$minor" -c '' >/dev/null 2>&1; then
            candidates+=("$(command -v "python3.$minor")")
        fi
        if command -v pyenv >/dev/null 2>&1; then
            local found
            found="$(ls -d "$(pyenv root)"/versions/3."$minor".*/bin/python 2>/dev/null | sort -V | tail -1)"
            [[ -n "$found" ]] && candidates+=("$found")
        fi
    done
    printf '%s\n' "${candidates[@]}"
}
if [[ "$mode" == floor ]]; then
    # `sed -n 1p` reads every line: `head -1` closes the pipe early, and under `pipefail` the
    # SIGPIPE of a longer list (more Pythons installed) failed the script (exit 141, seen in CI).
    python="$(find_pythons | sed -n 1p)"
else
    python="$(find_pythons | tail -1)"
fi
if [[ -z "$python" ]]; then
    echo "test-floors.sh: no Python >= $declared_python on this machine" >&2
    exit 1
fi

if [[ -n "${FLOORS_VENV:-}" ]]; then
    # Kept for reruns while debugging one combination; delete it by hand afterwards.
    venv="$FLOORS_VENV"
    [[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
    # A kept venv of the other row (the floor's Python 3.10 given to `newest`) would get that
    # row's versions installed over its own, on the wrong Python: refuse instead.
    version='import sys; print("%d.%d" % sys.version_info[:2])'
    if [[ "$("$venv/bin/python" -c "$version")" != "$("$python" -c "$version")" ]]; then
        echo "test-floors.sh: $venv is a venv of Python $("$venv/bin/python" -c "$version"), not" \
            "of $("$python" -c "$version") as the $mode row needs: give another FLOORS_VENV" >&2
        exit 2
    fi
else
    venv="$(mktemp -d /tmp/eqxstable-floors.XXXXXX)"
    trap 'rm -rf "$venv"' EXIT
    "$python" -m venv "$venv"
fi
export PATH="$venv/bin:$PATH" PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH VIRTUAL_ENV

constraints="$venv/constraints.txt"
if [[ "$mode" == floor ]]; then
    # `name>=X` becomes `name==X`; a requirement without a floor is left free.
    "$host_python" -c 'import re, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for req in project["dependencies"] + project["optional-dependencies"]["test"]:
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*>=\s*([^,;\s]+)", req)
    if m is None:
        sys.exit(f"test-floors.sh: cannot read a floor from {req!r} in pyproject.toml")
    print(f"{m.group(1)}=={m.group(3)}")' >"$constraints"
else
    : >"$constraints"
fi
# `PINS="equinox==0.13.2 jax==0.6.2"` replaces those pins, for the rows of the matrix in between.
for pin in ${PINS:-}; do
    grep -iv "^${pin%%==*}==" "$constraints" >"$constraints.new" || true
    echo "$pin" >>"$constraints.new"
    mv "$constraints.new" "$constraints"
done
echo "== $mode: $("$venv/bin/python" --version) ($python)"
sed 's/^/   pin /' "$constraints"

# Wheels only: no compiler run on this machine, and a jaxlib build from source is never wanted.
python -m pip install -q --only-binary :all: -c "$constraints" -e ".[test]"
python -c 'import importlib.metadata as md
print("  ", " | ".join(f"{n} {md.version(n)}" for n in
    ("jax", "jaxlib", "equinox", "jaxtyping", "typing_extensions", "numpy", "pytest")))'

if [[ $# -gt 0 ]]; then
    python -m pytest "$@"
else
    bash scripts/test.sh
fi
