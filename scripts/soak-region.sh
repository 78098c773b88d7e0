#!/usr/bin/env bash
# Random fault schedules of the multi-region simulation (decision 4200, tests/region):
#   scripts/soak-region.sh   `make soak-region [REGION_SCHEDULES=N] [WORKERS=K]`: N schedules from seed
#       TURNSTILE_REGION_FIRST_SEED (default 1), K at once, on its own DynamoDB Local (port
#       DYNAMODB_LOCAL_PORT, default 8022; started and stopped here unless running). Prints each
#       violating seed and its first violation, then a summary line; fails on any violation.
set -uo pipefail
cd "$(dirname "$0")/.."
export TURNSTILE_REGION_SCHEDULES="${REGION_SCHEDULES:-1000}"
export TURNSTILE_REGION_WORKERS="${WORKERS:-6}"
export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8022}"
export TURNSTILE_TEST_DYNAMODB="http://127.0.0.1:${DYNAMODB_LOCAL_PORT}"

started_here=0
if ! scripts/dynamodb-local.sh status >/dev/null 2>&1; then
  scripts/dynamodb-local.sh start || exit 1
  started_here=1
fi
trap '[ $started_here = 1 ] && scripts/dynamodb-local.sh stop' EXIT

cargo test -p turnstile-tests --test region --locked soak -- --ignored --nocapture
