#!/usr/bin/env bash
# The deploy path, offline (issue 13, decision 0703; arm64 by default since issue 24): what
# `sam build && sam deploy` would upload is built, checked and started.
#   0. The artifact checker's self-test: wrong artifacts (an x86_64 ELF in an arm64 function, one
#      needing GLIBC_2.35, too big, not an ELF) must fail, each naming its function.
#   1. `sam validate --lint` of template.yaml.
#   2. `sam build --parameter-overrides Architecture=<arch>` (cargo-lambda, every function, one shared
#      target/ so each dependency compiles once per feature set). arm64 builds with the toolchain
#      scripts/arm64-toolchain.sh picks: rustup's aarch64 target (Zig links) when installed, else
#      Debian's rustc-web and aarch64 cross gcc (installed with apt-get).
#   3. scripts/artifact-check.py: each bootstrap's ELF architecture, highest glibc symbol version
#      (<= 2.34, provided.al2023's), size (<= 8 MiB) and zip (<= 4 MiB).
#   4. Each `.aws-sam/build/<Function>/bootstrap` started as Lambda starts it, on every sample event of
#      `events/<function>/` against DynamoDB Local (tests/integration/artifacts.rs); arm64 artifacts
#      on a non-arm64 host run under qemu-user, whose times are emulation, not performance numbers.
# Usage: scripts/sam-check.sh [--arch arm64|x86_64] [--no-invoke]   (default arm64, template.yaml's)
# `make test` runs this after the tests, with DynamoDB Local running (TURNSTILE_TEST_DYNAMODB);
# `make sam-check ARCH=x86_64` the same for x86_64; `make release` steps 0-3 for both architectures.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=arm64
invoke=1
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch="${2:-}"; shift 2 ;;
        --arch=*) arch="${1#--arch=}"; shift ;;
        --no-invoke) invoke=0; shift ;;
        *) echo "sam-check: unknown argument '$1' (usage: $0 [--arch arm64|x86_64] [--no-invoke])" >&2; exit 2 ;;
    esac
done
case "$arch" in
    arm64 | x86_64) ;;
    *) echo "sam-check: --arch must be arm64 or x86_64, not '$arch'" >&2; exit 2 ;;
esac

echo "--- artifact checker self-test"
scripts/artifact-check.py --self-test

echo "--- sam validate --lint"
scripts/sam.sh validate --lint

echo "--- sam build --parameter-overrides Architecture=$arch"
build=(scripts/sam.sh build --no-cached --parameter-overrides "Architecture=$arch")
# --no-cached: cargo's own incremental state decides what to rebuild (SAM's cache would hash target/).
start=$(date +%s)
if [ "$arch" = arm64 ]; then
    scripts/arm64-toolchain.sh exec "${build[@]}"
else
    "${build[@]}"
fi
echo "sam build ($arch): $(($(date +%s) - start)) s"

echo "--- artifacts: architecture, glibc, sizes (zip: deflate, as \`sam package\` zips a function)"
scripts/artifact-check.py .aws-sam/build --arch "$arch"

[ "$invoke" = 1 ] || exit 0
runner=""
host=$(uname -m)
if [ "$arch" = arm64 ] && [ "$host" != aarch64 ]; then
    runner=$(scripts/arm64-toolchain.sh runner)
elif [ "$arch" = x86_64 ] && [ "$host" != x86_64 ]; then
    echo "sam-check: x86_64 artifacts cannot be started on this $host host (use --no-invoke)" >&2
    exit 1
fi
echo "--- each artifact on its sample events (Runtime API on loopback, DynamoDB Local)${runner:+, under $runner}"
[ -z "$runner" ] || echo "    (emulated: the times below are not performance numbers)"
start=$(date +%s)
TURNSTILE_SAM_BUILD_DIR="$PWD/.aws-sam/build" TURNSTILE_ARTIFACT_RUNNER="$runner" \
    cargo test --workspace --locked --test integration artifacts:: -- --ignored --nocapture --test-threads 1
echo "artifacts started: $(($(date +%s) - start)) s${runner:+ (under emulation)}"
