#!/usr/bin/env bash
# The deploy path, offline (issue 13, decision 0703): what `sam build && sam deploy` would upload is
# built, measured and started.
#   1. `sam validate --lint` of template.yaml.
#   2. `sam build --parameter-overrides Architecture=x86_64` (cargo-lambda, every function, one shared
#      target/ so the dependencies compile once; this host cannot build arm64).
#   3. Each artifact's size, stripped and zipped as SAM packages it; fails above 8 MiB / 4 MiB.
#   4. Each `.aws-sam/build/<Function>/bootstrap` started as Lambda starts it, on every sample event of
#      `events/<function>/` against DynamoDB Local (tests/integration/artifacts.rs).
# Tools come from scripts/sam.sh (pinned, in .tools/). `make test` runs this after the tests, with
# DynamoDB Local running (TURNSTILE_TEST_DYNAMODB); `make release` runs steps 1-3 (--no-invoke).
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_BINARY=$((8 * 1024 * 1024))
MAX_ZIP=$((4 * 1024 * 1024))
invoke=1
[ "${1:-}" != "--no-invoke" ] || invoke=0

echo "--- sam validate --lint"
scripts/sam.sh validate --lint

echo "--- sam build --parameter-overrides Architecture=x86_64"
start=$(date +%s)
# --no-cached: cargo's own incremental state decides what to rebuild (SAM's cache would hash target/).
scripts/sam.sh build --no-cached --parameter-overrides Architecture=x86_64
echo "sam build: $(($(date +%s) - start)) s"

echo "--- artifact sizes (zip: deflate, as \`sam package\` zips a function)"
python3 - "$MAX_BINARY" "$MAX_ZIP" <<'EOF'
import io, os, sys, zipfile
max_bin, max_zip = int(sys.argv[1]), int(sys.argv[2])
build = ".aws-sam/build"
rows, bad = [], []
for fn in sorted(os.listdir(build)):
    path = os.path.join(build, fn, "bootstrap")
    if not os.path.isfile(path):
        continue
    size = os.path.getsize(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(path, "bootstrap")
    zipped = len(buf.getvalue())
    rows.append((fn, size, zipped))
    if size > max_bin or zipped > max_zip:
        bad.append(fn)
mib = lambda b: f"{b / 1048576:.2f}"
print(f"{'function':<22} {'bootstrap bytes':>15} {'MiB':>6} {'zip bytes':>10} {'MiB':>6}")
for fn, size, zipped in rows:
    print(f"{fn:<22} {size:>15,} {mib(size):>6} {zipped:>10,} {mib(zipped):>6}")
if len(rows) != 8:
    sys.exit(f"expected 8 artifacts in {build}, found {len(rows)}")
if bad:
    sys.exit(f"over {mib(max_bin)} MiB (binary) or {mib(max_zip)} MiB (zip): {', '.join(bad)}")
EOF

if [ "$invoke" = 1 ]; then
    echo "--- each artifact on its sample events (Runtime API on loopback, DynamoDB Local)"
    TURNSTILE_SAM_BUILD_DIR="$PWD/.aws-sam/build" cargo test --workspace --locked --test integration \
        artifacts:: -- --ignored --nocapture --test-threads 1
fi
