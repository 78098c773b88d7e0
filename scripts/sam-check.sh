#!/usr/bin/env bash
# The deploy path, offline (decision 0703; arm64 by default, as template.yaml): what
# `sam build && sam deploy` would upload is built, checked and started.
#   0. The artifact checker's self-test: wrong artifacts (an x86_64 ELF in an arm64 function, one
#      needing GLIBC_2.35, too big, not an ELF) must fail, each naming its function.
#   1. `sam validate --lint` of template.yaml.
#   2. Every function's release binary in one `cargo lambda build` (the dependencies compile once, the
#      fat-LTO links run side by side), then `sam build --parameter-overrides Architecture=<arch>`,
#      which finds each binary fresh and packages it. arm64 builds with the toolchain
#      scripts/arm64-toolchain.sh picks: rustup's aarch64 target (Zig links) when installed, else
#      Debian's rustc-web and aarch64 cross gcc (installed with apt-get).
#   3. scripts/artifact-check.py: each bootstrap's ELF architecture, highest glibc symbol version
#      (<= 2.34, provided.al2023's), size (<= 8 MiB) and zip (<= 4 MiB).
#   4. Each `.aws-sam/build/<Function>/bootstrap` started as Lambda starts it, on every sample event of
#      `events/<function>/` against DynamoDB Local (tests/integration/artifacts.rs); arm64 artifacts
#      on a non-arm64 host run under qemu-user, whose times are emulation, not performance numbers.
# Usage: scripts/sam-check.sh [--arch arm64|x86_64] [--no-invoke] [--build-only|--after-build]
#        (default arm64, template.yaml's)
# `make test` runs this after the tests, with DynamoDB Local running (TURNSTILE_TEST_DYNAMODB);
# `make sam-check ARCH=x86_64` the same for x86_64; `make release` steps 0-3 for both architectures.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=arm64
invoke=1
# --build-only: steps 0-2's checks and the release binaries, nothing packaged or started (`make test`
# runs this in the background while the other checks run); --after-build: the rest (the binaries are
# then fresh and cargo only confirms it), without repeating the self-test and the lint.
part=all
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch="${2:-}"; shift 2 ;;
        --arch=*) arch="${1#--arch=}"; shift ;;
        --no-invoke) invoke=0; shift ;;
        --build-only) part=build; shift ;;
        --after-build) part=after; shift ;;
        *) echo "sam-check: unknown argument '$1' (usage: $0 [--arch arm64|x86_64] [--no-invoke] [--build-only|--after-build])" >&2; exit 2 ;;
    esac
done
case "$arch" in
    arm64 | x86_64) ;;
    *) echo "sam-check: --arch must be arm64 or x86_64, not '$arch'" >&2; exit 2 ;;
esac

if [ "$part" != after ]; then
    echo "--- artifact checker self-test"
    scripts/artifact-check.py --self-test

    echo "--- sam validate --lint"
    scripts/sam.sh validate --lint
fi

# Every function's binary in ONE cargo invocation first, with exactly the flags `sam build` passes
# cargo-lambda per function (`--release [--arm64] --bin <Binary>`, from the workspace root): the
# dependencies compile once and the fat-LTO links (single-threaded, minutes each) run side by side
# on every core instead of one after another. `sam build` then finds each binary fresh and only
# packages it; run on its own it still builds everything, one function at a time.
mapfile -t binaries < <(sed -n 's/^ *Binary: *\([A-Za-z0-9_-]*\) *$/\1/p' template.yaml)
[ ${#binaries[@]} -gt 0 ] || { echo "sam-check: no BuildProperties.Binary in template.yaml" >&2; exit 1; }
lambda_flags=(--release); [ "$arch" = arm64 ] && lambda_flags+=(--arm64)
for b in "${binaries[@]}"; do lambda_flags+=(--bin "$b"); done
prebuild=(scripts/sam.sh --exec cargo lambda build "${lambda_flags[@]}")
build=(scripts/sam.sh build --no-cached --parameter-overrides "Architecture=$arch")
# --no-cached: cargo's own incremental state decides what to rebuild (SAM's cache would hash target/).
# Without a workspace wrapper the caller may have set (`make test` lints its dev build through
# clippy-driver): the release binaries are built by the toolchain alone, fingerprinted the same way
# whoever starts the build.
in_toolchain() {
    if [ "$arch" = arm64 ]; then set -- scripts/arm64-toolchain.sh exec "$@"; fi
    env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS "$@"
}
echo "--- cargo lambda build ${lambda_flags[*]}"
start=$(date +%s)
in_toolchain "${prebuild[@]}"
echo "release binaries ($arch, ${#binaries[@]} functions, one cargo invocation): $(($(date +%s) - start)) s"
[ "$part" != build ] || exit 0
echo "--- sam build --parameter-overrides Architecture=$arch"
start=$(date +%s)
in_toolchain "${build[@]}"
echo "sam build ($arch, packaging): $(($(date +%s) - start)) s"

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
