#!/usr/bin/env bash
# `make dev`: the local stack. Until the local-stack issue lands this starts DynamoDB Local and
# creates the tables, then says what is not there yet.
set -euo pipefail
cd "$(dirname "$0")/.."
export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8000}"
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:${DYNAMODB_LOCAL_PORT}"
scripts/dynamodb-local.sh start "$@"
trap 'scripts/dynamodb-local.sh stop' EXIT
cargo run --quiet -p turnstile-cli -- tables create
echo "make dev: the WebSocket/HTTP local stack (turnstile dev) is not yet built; tables are ready at $AWS_ENDPOINT_URL_DYNAMODB."
