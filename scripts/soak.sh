#!/usr/bin/env bash
# `make soak SECONDS=N [SCHEDULES=M] [WORKERS=K]`: random fault schedules (decision 2300) for N
# seconds (default 600) or until M schedules have run, K at once (default 6), on a
# private DynamoDB Local (port $DYNAMODB_LOCAL_PORT, default 8020), stopped afterwards. The summary
# (schedules, steps, DynamoDB calls, faults by kind, violations) goes to $TURNSTILE_SIM_SUMMARY
# (default target/sim-soak.md); a violation prints its seed and schedule and fails the run.
# TURNSTILE_SIM_FIRST_SEED picks the first seed (default 1000: the make-test seeds are 0..12).
set -uo pipefail
cd "$(dirname "$0")/.."

export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8020}"
export TURNSTILE_TEST_DYNAMODB="http://127.0.0.1:${DYNAMODB_LOCAL_PORT}"
export TURNSTILE_SIM_SECONDS="${SECONDS_TO_RUN:-600}"
export TURNSTILE_SIM_SUMMARY="${TURNSTILE_SIM_SUMMARY:-$PWD/target/sim-soak.md}"

started_here=0
if ! scripts/dynamodb-local.sh status >/dev/null 2>&1; then
  scripts/dynamodb-local.sh start || exit 1
  started_here=1
fi
trap '[ $started_here = 1 ] && scripts/dynamodb-local.sh stop' EXIT

cargo test -p turnstile-tests --test sim --locked soak -- --ignored --nocapture
