#!/usr/bin/env bash
# `make dev`: the whole suite on this machine. Installs DynamoDB Local and the dashboard's charting
# library if missing, starts DynamoDB Local (in memory;
# `--persist` or DYNAMODB_LOCAL_PERSIST=1 keeps data in .dynamodb/), builds the CLI, and runs
# `turnstile dev` (tables, demo tenants, WebSocket + HTTP + @connections + stream bridge + EventBridge).
# Ctrl-C stops the stack and DynamoDB Local.
#
# Env: DYNAMODB_LOCAL_PORT (8000), TURNSTILE_DEV_WS_ADDR (127.0.0.1:3001), TURNSTILE_DEV_HTTP_ADDR
# (127.0.0.1:3000), TURNSTILE_DEV_TENANTS (config/demo-tenants.json), TURNSTILE_LOG_FORMAT=json.
set -euo pipefail
cd "$(dirname "$0")/.."

persist=()
for a in "$@"; do
  case "$a" in
    --persist) persist=(--persist) ;;
    *) echo "make dev: unknown option $a (only --persist)" >&2; exit 2 ;;
  esac
done

export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8000}"
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:${DYNAMODB_LOCAL_PORT}"

command -v cargo >/dev/null || { echo "make dev: cargo is required (https://rustup.rs)" >&2; exit 1; }
echo "==> building the turnstile CLI" >&2
cargo build --quiet -p turnstile-cli
target="${CARGO_TARGET_DIR:-target}"

# The dashboard's charting library (npm ci into local/dashboard/node_modules, once); without it the
# dashboard still serves its tables and says what is missing.
scripts/dashboard-assets.sh || echo "make dev: the dashboard will show no charts (see above)" >&2

scripts/dynamodb-local.sh start "${persist[@]}"
trap 'scripts/dynamodb-local.sh stop' EXIT

# EMF metrics go to a file, not the console (docs/operations.md); TURNSTILE_METRICS=off or stdout
# overrides.
export TURNSTILE_METRICS="${TURNSTILE_METRICS:-file:$target/dev-metrics.jsonl}"
echo "==> metrics (CloudWatch EMF lines): ${TURNSTILE_METRICS}" >&2

# Not exec: the trap above must run when the stack stops, to stop DynamoDB Local too.
"$target/debug/turnstile" dev
