#!/usr/bin/env bash
# Runs one client's own pytest suite (issue 19) in one mode, timed; README, "Client suites".
#
#   bash benchmarks/clients.sh NAME MODE RUNDIR OUTDIR -- pytest args...
#
# MODE: plain (`python3 -m pytest`), swapped (`python3 -m eqxstable doctor --stabilize -m pytest`,
# the doctor's report in OUTDIR/NAME-MODE.report), verify (swapped with EQXSTABLE_VERIFY=1).
# RUNDIR holds only the suite's tests folder and its pyproject.toml, so the client imported is
# the installed one. Set PYTHONPATH to the eqxstable to test. The run gets EQX_GETKEY_SEED=0, a
# `timeout` of TMO seconds (default 1500) and `nice -n 10`; pytest's output, `/usr/bin/time -v`
# and the load average at the start and end go to OUTDIR/NAME-MODE.txt, JUnit XML to .xml.
# Read the results with `python3 benchmarks/clients_table.py OUTDIR NAME...`.
set -u
if [ $# -lt 4 ]; then
  echo "usage: bash benchmarks/clients.sh NAME MODE RUNDIR OUTDIR -- pytest args..." >&2
  exit 2
fi
name=$1 mode=$2 rundir=$3
mkdir -p "$4" && out=$(cd "$4" && pwd)
shift 4
[ "${1-}" = -- ] && shift
base=$out/$name-$mode
opts=(-p no:cacheprovider --durations=20 -rfEs "--junitxml=$base.xml")
case $mode in
  plain) cmd=(python3 -m pytest "${opts[@]}" "$@") ;;
  swapped | verify)
    cmd=(python3 -m eqxstable doctor --stabilize --output "$base.report" -m pytest "${opts[@]}" "$@")
    ;;
  *) echo "MODE must be plain, swapped or verify, not $mode" >&2; exit 2 ;;
esac
envs=(env -u EQXSTABLE_VERIFY EQX_GETKEY_SEED=0)
[ "$mode" = verify ] && envs+=(EQXSTABLE_VERIFY=1)
cd "$rundir" || exit 2
{
  echo "# $name $mode in $rundir, PYTHONPATH=${PYTHONPATH-}"
  echo "# ${envs[*]} ${cmd[*]}"
  echo "# start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$base.txt"
"${envs[@]}" /usr/bin/time -v timeout -k 30 "${TMO:-1500}" nice -n 10 "${cmd[@]}" >> "$base.txt" 2>&1
rc=$?
echo "# end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) rc $rc" >> "$base.txt"
exit $rc
