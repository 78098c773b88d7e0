#!/usr/bin/env bash
# The Python package's tests (`make test`): packs the `turnstile` wheel in the dev profile from the
# test build's own extension module (scripts/dev-wheel.py: no second compile of `shared`), checks it
# as `make wheel` checks its wheels (scripts/wheel-check.py), installs it into .tools/python-test
# (pytest, hash-locked by scripts/requirements/maturin.txt), and runs python/tests with pytest against
# the DynamoDB Local at TURNSTILE_TEST_DYNAMODB. The tables are made by the `turnstile` CLI (from the
# same build), which one test also checks agrees with the package on a shared bucket.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${TURNSTILE_TEST_DYNAMODB:?set TURNSTILE_TEST_DYNAMODB to a DynamoDB Local endpoint (make test does)}"
venv=.tools/python-test
scripts/pip-locked.sh "$venv" scripts/requirements/maturin.txt
out=target/wheels/dev
rm -rf "$out"
started=$(date +%s.%N)
wheel=$(cargo build --locked --workspace --all-targets --message-format json-render-diagnostics | scripts/dev-wheel.py "$out")
echo "python-test: wheel packed in $(python3 -c "import time; print(round(time.time() - $started, 1))") s: $(basename "$wheel")"
python3 scripts/wheel-check.py "$wheel"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --no-deps --force-reinstall "$wheel"
export TURNSTILE_CLI="$PWD/target/debug/turnstile"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q python/tests "$@"
