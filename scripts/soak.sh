#!/usr/bin/env bash
# The simulation's long runs (decision 2300), each on a private DynamoDB Local (port
# $DYNAMODB_LOCAL_PORT, default 8020; stopped afterwards when started here):
#   scripts/soak.sh [soak]   `make soak SECONDS=N [SCHEDULES=M] [WORKERS=K]`: random fault schedules
#       for N seconds (default 600) or until M schedules have run, K at once (default 6). The
#       summary (schedules, steps, DynamoDB calls, faults by kind, violations) goes to
#       $TURNSTILE_SIM_SUMMARY (default target/sim-soak.md); a violation prints its seed and schedule
#       and fails the run. TURNSTILE_SIM_FIRST_SEED picks the first seed (default 1000: the make-test
#       seeds are 0..12).
#   scripts/soak.sh mutants  `make mutants [MUTANT_SEEDS=N] [MUTANTS=A,B]`: the mutation gate. Every
#       deliberate bug of `shared::mutation` (the test build's `mutations` feature) is switched on in
#       turn and hunted over at most N seeds (default 40) of its shape, from TURNSTILE_SIM_FIRST_SEED
#       (default 0); prints the table mutation -> seed -> schedules it took and fails naming any
#       mutation no seed caught. Not part of `make test` (minutes, not seconds).
#   scripts/soak.sh region   `make soak-region [REGION_SCHEDULES=N] [WORKERS=K]`: N schedules (default
#       1000) of the multi-region simulation (decision 4200, tests/region) from seed
#       TURNSTILE_REGION_FIRST_SEED (default 1), K at once (default 6), on port 8022 by default.
#       Prints each violating seed and its first violation, then a summary line; fails on any violation.
set -uo pipefail
cd "$(dirname "$0")/.."

run="${1:-soak}"
case "$run" in
  soak)
    export TURNSTILE_SIM_SECONDS="${SECONDS_TO_RUN:-600}"
    export TURNSTILE_SIM_SUMMARY="${TURNSTILE_SIM_SUMMARY:-$PWD/target/sim-soak.md}" ;;
  mutants)
    export TURNSTILE_SIM_MUTANT_SEEDS="${MUTANT_SEEDS:-40}"
    export TURNSTILE_SIM_MUTANTS="${MUTANTS:-}" ;;
  region)
    export TURNSTILE_REGION_SCHEDULES="${REGION_SCHEDULES:-1000}"
    export TURNSTILE_REGION_WORKERS="${WORKERS:-6}"
    export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8022}" ;;
  *) echo "usage: $0 [soak|mutants|region]" >&2; exit 2 ;;
esac
export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8020}"
export TURNSTILE_TEST_DYNAMODB="http://127.0.0.1:${DYNAMODB_LOCAL_PORT}"

started_here=0
if ! scripts/dynamodb-local.sh status >/dev/null 2>&1; then
  scripts/dynamodb-local.sh start || exit 1
  started_here=1
fi
trap '[ $started_here = 1 ] && scripts/dynamodb-local.sh stop' EXIT

if [ "$run" = region ]; then
  cargo test -p turnstile-tests --test region --locked soak -- --ignored --nocapture
else
  cargo test -p turnstile-tests --test sim --locked "$run" -- --ignored --nocapture
fi
