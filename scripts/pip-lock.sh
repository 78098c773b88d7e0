#!/usr/bin/env bash
# Regenerates the hash-locked requirements files from the .in beside each, with pip-compile (pip-tools,
# itself hash-locked in scripts/requirements/pip-tools.txt) on this machine's python3 (3.11 for the
# locks in the repository; the hashes cover every file PyPI has for each pinned version, so other
# platforms install the same versions):
#   scripts/pip-lock.sh              # all: scripts/requirements/*.in, bench/peers/requirements-*.in
#   scripts/pip-lock.sh FILE.in ...  # just these
#   PIP_LOCK_UPGRADE=1 scripts/pip-lock.sh ...   # newest versions the .in allows (else pins are kept)
# Review the diff before committing: its versions and hashes are what every later install trusts.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

VENV=".tools/pip-tools"
scripts/pip-locked.sh "$VENV" scripts/requirements/pip-tools.txt

[ $# -gt 0 ] || set -- scripts/requirements/*.in bench/peers/requirements-*.in
upgrade=(); [ "${PIP_LOCK_UPGRADE:-0}" = 1 ] && upgrade=(--upgrade)
for in in "$@"; do
  out="${in%.in}.txt"
  echo "pip-lock: $in -> $out" >&2
  # No local wheel directories: every hash must come from PyPI.
  (cd "$(dirname "$in")" && PIP_FIND_LINKS= CUSTOM_COMPILE_COMMAND="scripts/pip-lock.sh" \
    "$root/$VENV/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
    --no-emit-index-url --no-emit-find-links "${upgrade[@]}" \
    --output-file "$(basename "$out")" "$(basename "$in")")
done
