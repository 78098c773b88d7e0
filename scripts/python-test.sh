#!/usr/bin/env bash
# The Python package's tests (`make test`): builds the `turnstile` wheel in the dev profile (reusing
# target/debug, the build `cargo test` already made), installs it into .tools/python-test (maturin and
# pytest, hash-locked by scripts/requirements/maturin.txt), and runs python/tests with pytest against
# the DynamoDB Local at TURNSTILE_TEST_DYNAMODB. The tables are made by the `turnstile` CLI (built
# here if missing), which one test also checks agrees with the package on a shared bucket.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${TURNSTILE_TEST_DYNAMODB:?set TURNSTILE_TEST_DYNAMODB to a DynamoDB Local endpoint (make test does)}"
venv=.tools/python-test
scripts/pip-locked.sh "$venv" scripts/requirements/maturin.txt
# The CLI from the test build's own selection (as scripts/schemathesis.sh): no second compile of `shared`.
cargo build --locked --workspace --all-targets
out=target/wheels/dev
rm -rf "$out"
started=$(date +%s.%N)
# The interpreter is the one pyo3's build script finds on PATH under `cargo test`, so the two builds
# share pyo3's compiled crates.
"$venv/bin/maturin" build --quiet --manifest-path python/Cargo.toml --profile dev --locked --out "$out" \
  --interpreter "$(command -v python3)"
echo "python-test: wheel built in $(python3 -c "import time; print(round(time.time() - $started, 1))") s: $(ls "$out")"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --no-deps --force-reinstall "$out"/turnstile-*.whl
export TURNSTILE_CLI="$PWD/target/debug/turnstile"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q python/tests "$@"
