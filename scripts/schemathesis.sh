#!/usr/bin/env bash
# The decide API against its OpenAPI description (openapi/decide-api.yaml), by Schemathesis (PyPI,
# pinned with every dependency's hashes in scripts/requirements/schemathesis.txt, installed on first
# use into .tools/schemathesis): `turnstile dev` on its own ports and the running DynamoDB Local,
# requests generated from the document (valid and invalid: positive and negative), every check on
# (no 5xx, status codes, content types, headers and bodies match their schemas). Bounded and seeded
# so `make test` stays short: SCHEMATHESIS_MAX_EXAMPLES (default 25 per operation), seed
# SCHEMATHESIS_SEED (default 37); scripts/schemathesis.toml keeps earlier runs out of this one
# (docs/testing.md). A caller is bound by an unsigned JWT (the local stack decodes,
# never verifies, bearer tokens: docs/decide-api.md).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=".tools/schemathesis"
scripts/pip-locked.sh "$VENV" scripts/requirements/schemathesis.txt

port="${DYNAMODB_LOCAL_PORT:-8000}"
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:${port}"
export TURNSTILE_TABLE_PREFIX="st$$-"
export TURNSTILE_DEV_WS_ADDR="127.0.0.1:${SCHEMATHESIS_WS_PORT:-3101}"
export TURNSTILE_DEV_HTTP_ADDR="127.0.0.1:${SCHEMATHESIS_HTTP_PORT:-3100}"
export TURNSTILE_DEV_TENANTS=""
# The test build's selection (every package and target), so inside `make test` this only links the
# binary from what `cargo test --workspace` compiled; `-p turnstile-cli` alone would unify other
# features and compile `shared` and its async stack a second time.
cargo build --quiet --locked --workspace --all-targets
target="${CARGO_TARGET_DIR:-target}"
log=$(mktemp "${TMPDIR:-/tmp}/schemathesis-dev.XXXXXX")
# Hypothesis' own files (its Unicode tables) go there too, not into the worktree.
HYPOTHESIS_STORAGE_DIRECTORY=$(mktemp -d "${TMPDIR:-/tmp}/schemathesis-hypothesis.XXXXXX")
export HYPOTHESIS_STORAGE_DIRECTORY
"$target/debug/turnstile" dev >"$log" 2>&1 &
dev=$!
trap 'kill "$dev" 2>/dev/null || true; rm -rf "$log" "$HYPOTHESIS_STORAGE_DIRECTORY"' EXIT
base="http://${TURNSTILE_DEV_HTTP_ADDR}"
# Up once /v1/ answers anything (without a token: 401).
up=""
for _ in $(seq 1 120); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/v1/limits/check" || true)
  if [ "$code" != 000 ]; then up=1; break; fi
  kill -0 "$dev" 2>/dev/null || break
  sleep 0.5
done
if [ -z "$up" ]; then
  echo "schemathesis: turnstile dev did not answer on $base; its log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi

b64url() { printf '%s' "$1" | base64 -w0 | tr '+/' '-_' | tr -d '='; }
token="$(b64url '{"alg":"none"}').$(b64url '{"sub":"schemathesis","tenantId":"schemathesis"}').unsigned"

start=$(date +%s)
set +e
"$VENV/bin/schemathesis" --config-file scripts/schemathesis.toml run openapi/decide-api.yaml \
  --url "$base" \
  --header "Authorization: Bearer $token" \
  --checks all \
  --mode all \
  --phases examples,coverage,fuzzing \
  --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-25}" \
  --seed "${SCHEMATHESIS_SEED:-37}" \
  --workers 1 \
  --request-timeout 10 \
  --no-color
rc=$?
set -e
echo "schemathesis: $(( $(date +%s) - start )) s" >&2
exit $rc
