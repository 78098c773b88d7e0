#!/usr/bin/env bash
# `make wheel`: the `turnstile` Python wheels, release builds (profile `wheel`: the release profile with
# panics unwinding into Python exceptions), for x86_64 (this host's toolchain) and aarch64 (the arm64
# toolchain the Lambda artifacts use: scripts/arm64-toolchain.sh, Debian's rustc-web + cross gcc when
# rustup has no aarch64 target), into target/wheels/release/, each checked by scripts/wheel-check.py
# (ELF machine, glibc <= 2.34, manylinux_2_34 or lower, abi3) and timed.
#   WHEEL_ARCHES="aarch64" scripts/wheel.sh   # one architecture only
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

venv=.tools/python-test
scripts/pip-locked.sh "$venv" scripts/requirements/maturin.txt
maturin="$root/$venv/bin/maturin"
out=target/wheels/release
mkdir -p "$out"
common=(build --quiet --manifest-path python/Cargo.toml --profile wheel --locked --out "$out"
        --compatibility manylinux_2_34)

for arch in ${WHEEL_ARCHES:-x86_64 aarch64}; do
  rm -f "$out"/turnstile-*_"$arch".whl
  started=$(date +%s)
  case "$arch" in
    x86_64) "$maturin" "${common[@]}" --interpreter "$(command -v python3)" ;;
    aarch64) scripts/arm64-toolchain.sh exec "$maturin" "${common[@]}" --target aarch64-unknown-linux-gnu ;;
    *) echo "wheel: unknown architecture $arch (x86_64 or aarch64)" >&2; exit 2 ;;
  esac
  echo "wheel: $arch built in $(( $(date +%s) - started )) s" >&2
done
python3 scripts/wheel-check.py "$out"/*.whl
