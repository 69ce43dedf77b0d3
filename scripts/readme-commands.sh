#!/usr/bin/env bash
# Runs the README's two commands exactly as written, as a newcomer would: in a fresh virtual
# environment with every extra the README names installed (a user who followed all of it, tqdm
# from `.[demo]` included), from the repository root. Fails if either command fails.
#
#   bash scripts/readme-commands.sh
#
# The commands are read from the README's two ```bash blocks (tests/test_readme.py checks there
# are two), so they cannot drift apart. The venv lives in a temporary folder and is deleted on exit
# (or in `$README_VENV`, kept); pip's download cache is reused. Needs the package index. Takes
# about as long as `scripts/test.sh` plus two to three minutes of installing (tests/README.md has
# the last measured time).
set -euo pipefail
cd "$(dirname "$0")/.."

host_python="$(command -v python3)"
mapfile -t commands < <("$host_python" -c 'import re
blocks = re.findall(r"```bash\n(.*?)```", open("README.md").read(), flags=re.DOTALL)
assert len(blocks) == 2, f"the README shows {len(blocks)} bash blocks, not 2"
for block in blocks:
    assert "\n" not in block.strip(), f"a README command on several lines: {block!r}"
    print(block.strip())')
extras="$("$host_python" -c 'import re
found = re.findall(r"\.\[([\w,-]+)\]", open("README.md").read())
print(",".join(sorted({e for group in found for e in group.split(",")})))')"

if [[ -n "${README_VENV:-}" ]]; then
    venv="$README_VENV"
else
    venv="$(mktemp -d /tmp/eqxstable-readme.XXXXXX)"
    trap 'rm -rf "$venv"' EXIT
fi
"$host_python" -m venv "$venv"
# As `source $venv/bin/activate` does, without depending on the shell's prompt handling.
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH PYTHONHOME

echo "== readme-commands: $(python --version) in $venv; every extra the README names: [$extras]"
start=$SECONDS
python -m pip install -q -e ".[$extras]"
echo "== installed in $((SECONDS - start)) s"

status=0
for i in "${!commands[@]}"; do
    echo "== README command $((i + 1)): ${commands[$i]}"
    start=$SECONDS
    if bash -c "${commands[$i]}"; then
        echo "== README command $((i + 1)) passed in $((SECONDS - start)) s"
    else
        echo "== README command $((i + 1)) FAILED (status $?) after $((SECONDS - start)) s"
        status=1
    fi
done
exit "$status"
