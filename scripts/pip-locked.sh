#!/usr/bin/env bash
# Installs a hash-locked requirements file into a venv: `scripts/pip-locked.sh VENV REQUIREMENTS`.
#
# Every package, transitive ones included, is pinned to one version and the SHA-256 of each of its
# files on PyPI (`pip-compile --generate-hashes` from the .in beside the lock; scripts/pip-lock.sh
# regenerates them all). pip runs in hash-checking mode (--require-hashes): a file whose hash is not
# in the lock stops the install. --no-deps: exactly the lock is installed, nothing it does not name is
# ever fetched, and `pip check` then refuses a lock that misses a dependency. --only-binary :all:
# installs wheels only, so no package's build code runs (a source build would fetch its build tools
# unchecked). A venv whose .locked stamp is the lock's SHA-256 is reused; anything else is rebuilt
# from scratch. Used by scripts/cfn-lint.sh, scripts/sam.sh, scripts/bench.sh and scripts/pip-lock.sh;
# checked by scripts/supply-chain-check.sh (a tampered hash is refused).
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
venv=$1 req=$2
[ -f "$req" ] || { echo "pip-locked: no $req" >&2; exit 1; }
want=$(sha256sum "$req" | cut -d' ' -f1)
[ "$(cat "$venv/.locked" 2>/dev/null)" = "$want" ] && exit 0
command -v python3 >/dev/null || { echo "pip-locked: python3 is required" >&2; exit 1; }
echo "installing $req (hash-locked) into $venv" >&2
rm -rf "$venv"
python3 -m venv "$venv"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps \
  --only-binary :all: -r "$req" >"$log" 2>&1; then
  cat "$log" >&2
  rm -rf "$venv"
  if grep -q "DO NOT MATCH THE HASHES" "$log"; then
    echo "pip-locked: REFUSED $req: a downloaded file's SHA-256 is not one the lock records (the" \
      "file was altered, or the lock was); nothing was installed. Regenerate the lock with" \
      "scripts/pip-lock.sh only after checking why." >&2
  elif grep -q "Hashes are required" "$log"; then
    echo "pip-locked: REFUSED $req: a requirement has no --hash; locks come from scripts/pip-lock.sh" >&2
  else
    echo "pip-locked: $req did not install (see pip's output above)" >&2
  fi
  exit 1
fi
cat "$log" >&2
if ! problems=$("$venv/bin/pip" check --disable-pip-version-check 2>&1); then
  echo "$problems" >&2
  echo "pip-locked: $req misses a dependency of a package it pins; regenerate it (scripts/pip-lock.sh)" >&2
  rm -rf "$venv"
  exit 1
fi
echo "$want" >"$venv/.locked"
