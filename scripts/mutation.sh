#!/usr/bin/env bash
# Mutation testing of the keys, the registry, the mutation detection and the jit cache (issue 13):
# mutmut makes one small bug at a time in those modules and runs the tests that cover it; a bug
# that no test notices is a rule no test defends. Not part of CI: about 30 minutes on 2 cores.
#
#   pip install -e '.[mutation]'          # once: mutmut
#   bash scripts/mutation.sh              # every module; the score is the last line
#   bash scripts/mutation.sh 'eqxstable._keys._watch.*'   # only the mutants matching a pattern
#
# It works in a copy, build/mutation/, which `scripts/mutation.py prepare` rewrites so that
# mutmut can mutate decorated functions too (see that file). The configuration (modules, tests,
# fork server) is `[tool.mutmut]` in pyproject.toml; mutants judged equivalent are listed, with
# the reason, in tests/mutation_equivalent.txt. Afterwards, `cd build/mutation && mutmut show
# NAME` shows a mutant, and `mutmut browse` all of them. Record each run in tests/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

if ! python3 -c "import mutmut" 2>/dev/null; then
    echo "scripts/mutation.sh: mutmut is not installed; run: pip install -e '.[mutation]'" >&2
    exit 2
fi

WORK="$ROOT/build/mutation"
rm -rf "$WORK"
mkdir -p "$WORK"
tar -c --exclude=__pycache__ eqxstable tests scripts pyproject.toml | tar -x -C "$WORK"
cp scripts/mutation_conftest.py "$WORK/conftest.py"
python3 scripts/mutation.py prepare "$WORK"

cd "$WORK"
# Hypothesis draws the same examples every run (tests/conftest.py's "ci" profile), so a mutant
# is killed or not whatever the run.
export CI=1
JOBS="${MUTATION_JOBS:-2}"
# Seconds of recorded test time a mutant may run (fastest tests first; scripts/mutation_conftest.py).
export MUTATION_BUDGET_S="${MUTATION_BUDGET_S:-5}"
start=$(date +%s)
# mutmut's own progress goes to a log; its verdicts are read back by `mutation.py score`.
if ! mutmut run --max-children "$JOBS" "$@" >"$WORK/mutmut.log" 2>&1; then
    tail -n 40 "$WORK/mutmut.log" >&2
    echo "scripts/mutation.sh: mutmut failed; its log is $WORK/mutmut.log" >&2
    exit 1
fi
echo "mutmut ran in $(( $(date +%s) - start )) s with $JOBS workers, a budget of $MUTATION_BUDGET_S s of tests per mutant"
python3 "$ROOT/scripts/mutation.py" score "$WORK" "$@"
