#!/usr/bin/env bash
# `cargo build --release` of every Lambda function (every crate under functions/), in one cargo
# invocation so the dependencies compile once and only the per-binary fat-LTO link repeats. Prints
# each binary's size and the wall time. Used by `make test` and `make release`.
#
# AWS_LC_SYS_NO_JITTER_ENTROPY=1 (default here, as for deployment builds) leaves out aws-lc's CPU
# jitter entropy source, which otherwise costs tens of milliseconds at every cold start.
set -euo pipefail
cd "$(dirname "$0")/.."

export AWS_LC_SYS_NO_JITTER_ENTROPY="${AWS_LC_SYS_NO_JITTER_ENTROPY:-1}"
target_dir="${CARGO_TARGET_DIR:-target}"

names=()
for dir in functions/*/; do
    names+=("$(basename "$dir")")
done
packages=()
for n in "${names[@]}"; do packages+=(-p "$n"); done

start=$(date +%s)
cargo build --release --locked "${packages[@]}" "$@"
elapsed=$(($(date +%s) - start))

echo
printf '%-16s %12s %10s\n' binary bytes MiB
for n in "${names[@]}"; do
    bin="$target_dir/release/$n"
    [ -x "$bin" ] || { echo "release-build.sh: $bin was not built" >&2; exit 1; }
    bytes=$(stat -c %s "$bin")
    printf '%-16s %12d %10s\n' "$n" "$bytes" "$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')"
done
echo "release build of ${#names[@]} functions: ${elapsed}s (host target $(rustc -vV | awk '/^host/ {print $2}'))"
