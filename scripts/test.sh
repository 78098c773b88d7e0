#!/usr/bin/env bash
# `make test`: installs what is missing (DynamoDB Local; cfn-lint into .tools/ via python3 -m venv),
# starts a private DynamoDB Local, runs every check, and stops DynamoDB Local even when a step fails.
# Exit status: the first failing step's, else 0.
set -uo pipefail
cd "$(dirname "$0")/.."

export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8000}"
export TURNSTILE_TEST_DYNAMODB="http://127.0.0.1:${DYNAMODB_LOCAL_PORT}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { echo; echo "==> $*"; }

command -v cargo >/dev/null || { echo "make test: cargo is required (https://rustup.rs)" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

step "DynamoDB Local (port $DYNAMODB_LOCAL_PORT)"
scripts/dynamodb-local.sh start || exit 1
trap 'scripts/dynamodb-local.sh stop' EXIT

status=0
run() { step "$*"; "$@"; local rc=$?; [ $rc -eq 0 ] || { echo "FAILED ($rc): $*"; [ $status -ne 0 ] || status=$rc; }; }

run cargo fmt --all -- --check
run scripts/cfn-lint.sh
run cargo clippy --workspace --all-targets --locked -- -D warnings
run cargo test --workspace --locked
# Release build (fat LTO) of every Lambda function, with sizes: the artifacts `sam build` deploys.
run scripts/release-build.sh
exit $status
