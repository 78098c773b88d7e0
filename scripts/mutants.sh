#!/usr/bin/env bash
# `make mutants [MUTANT_SEEDS=N] [MUTANTS=A,B]`: the mutation gate of the simulation (decision 2300).
# Every deliberate bug of `shared::mutation` (the `mutations` feature of the test build) is switched
# on in turn and hunted over at most N seeds (default 40) of its shape, from TURNSTILE_SIM_FIRST_SEED
# (default 0); the run prints the table mutation -> seed -> schedules it took, and fails naming any
# mutation no seed caught. On a private DynamoDB Local (port $DYNAMODB_LOCAL_PORT, default 8020),
# stopped afterwards when started here. Not part of `make test` (minutes, not seconds).
set -uo pipefail
cd "$(dirname "$0")/.."

export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8020}"
export TURNSTILE_TEST_DYNAMODB="http://127.0.0.1:${DYNAMODB_LOCAL_PORT}"
export TURNSTILE_SIM_MUTANT_SEEDS="${MUTANT_SEEDS:-40}"
export TURNSTILE_SIM_MUTANTS="${MUTANTS:-}"

started_here=0
if ! scripts/dynamodb-local.sh status >/dev/null 2>&1; then
  scripts/dynamodb-local.sh start || exit 1
  started_here=1
fi
trap '[ $started_here = 1 ] && scripts/dynamodb-local.sh stop' EXIT

cargo test -p turnstile-tests --test sim --locked mutants -- --ignored --nocapture
