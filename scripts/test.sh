#!/usr/bin/env bash
# `make test`: installs what is missing (DynamoDB Local; the dashboard's charting library; cfn-lint,
# aws-sam-cli and cargo-lambda into .tools/ via python3 -m venv), starts a private DynamoDB Local,
# runs every check, and stops DynamoDB Local even when a step fails.
# Exit status: the first failing step's, else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
t_start=$SECONDS

export DYNAMODB_LOCAL_PORT="${DYNAMODB_LOCAL_PORT:-8000}"
export TURNSTILE_TEST_DYNAMODB="http://127.0.0.1:${DYNAMODB_LOCAL_PORT}"
# A second instance for tests that wait for real TTL deletions (see tests/support/lib.rs ttl_endpoint).
# It must be one this run starts, holding only the TTL tests' tables (an instance left running with
# other TTL tables would make DynamoDB Local's TTL sweep slow): take the first port from 8001 on where
# nothing answers.
ttl_port="${DYNAMODB_LOCAL_TTL_PORT:-8001}"
while DYNAMODB_LOCAL_PORT="$ttl_port" scripts/dynamodb-local.sh status >/dev/null 2>&1; do
  ttl_port=$((ttl_port + 1))
done
export DYNAMODB_LOCAL_TTL_PORT="$ttl_port"
export TURNSTILE_TEST_DYNAMODB_TTL="http://127.0.0.1:${DYNAMODB_LOCAL_TTL_PORT}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { echo; echo "==> $*"; }

command -v cargo >/dev/null || { echo "make test: cargo is required (https://rustup.rs)" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

# The dashboard's browser test needs Chromium: installed here when missing; `skip` (said out loud)
# only where it cannot be.
step "Chromium for the dashboard test"
TURNSTILE_TEST_CHROMEDRIVER=$(scripts/chromium.sh)
export TURNSTILE_TEST_CHROMEDRIVER
echo "chromedriver: $TURNSTILE_TEST_CHROMEDRIVER"

# The dashboard's charting library, which its browser test loads (npm ci, pinned by
# local/dashboard/package-lock.json; nothing when already installed).
step "Dashboard charting library"
scripts/dashboard-assets.sh || { echo "FAILED: scripts/dashboard-assets.sh"; exit 1; }

step "DynamoDB Local (ports $DYNAMODB_LOCAL_PORT and $DYNAMODB_LOCAL_TTL_PORT)"
ttl_ddb() { DYNAMODB_LOCAL_PORT="$DYNAMODB_LOCAL_TTL_PORT" scripts/dynamodb-local.sh "$@"; }
# The arm64 release build of every function (fat-LTO links with Debian's toolchain: the largest piece
# of CPU in this check) starts now in the background at the lowest CPU priority, so it takes the
# CPU the checks below leave idle (waits on DynamoDB Local, the emulator's restarts, single-threaded
# links) and never competes with them for it; the deploy step at the end waits for it. Its output
# goes to target/arm64-build.log and is printed there.
mkdir -p target
arm64_log=target/arm64-build.log
rm -f "$arm64_log".{rc,pid,cpu}
# Its own process group (setsid: an early exit stops all of it, by the pid it writes), and not a
# child of this shell (started from a subshell that exits at once), so its CPU is not added to
# whichever step happens to be running when it ends: it writes its own CPU seconds to $arm64_log.cpu.
( setsid bash -c 'echo $$ >"$1.pid"; nice -n 19 scripts/sam-check.sh --build-only >"$1" 2>&1; rc=$?
  times >"$1.cpu"; echo $rc >"$1.rc"' _ "$arm64_log" & )
# The Python venvs of the later steps (scripts/pip-locked.sh: hash-locked, a venv whose lock is
# unchanged is reused), installed now in the background: on a clean clone mostly downloads (~45 s)
# that overlap the build instead of adding to the steps that use them. Those steps wait for it
# first and still run pip-locked.sh themselves (then a no-op, or the install again, failing there
# with its message, when this one failed).
venvs_log=target/python-venvs.log
venvs=(".tools/python-test scripts/requirements/maturin.txt" ".tools/schemathesis scripts/requirements/schemathesis.txt")
[ "${TURNSTILE_BENCH_SMOKE:-1}" = 0 ] ||
  venvs+=("bench/peers/.venv-zae bench/peers/requirements-zae.txt" "bench/peers/.venv-rlp bench/peers/requirements-rlp.txt")
( for v in "${venvs[@]}"; do nice -n 10 scripts/pip-locked.sh $v || exit 1; done ) >"$venvs_log" 2>&1 &
venvs_pid=$!
venvs_wait() {
  wait "$venvs_pid" && return 0
  echo "the background venv install failed (the steps below install again):"; cat "$venvs_log"
}
trap 'kill -- -"$(cat "$arm64_log.pid" 2>/dev/null)" 2>/dev/null; kill "$venvs_pid" 2>/dev/null; rm -f "$times_file"; scripts/dynamodb-local.sh stop; ttl_ddb stop' EXIT
scripts/dynamodb-local.sh start || exit 1
ttl_ddb start || exit 1

status=0
last_rc=0
# Each step's wall time, printed as it ends and again in a table at the end (docs/testing.md keeps
# the measured costs).
# cpu: CPU seconds this script's finished children have used (`times`' second line), so each step's
# CPU is known beside its wall time: the wall time depends on what else the machine runs, the CPU
# hardly (the background build's CPU is counted where it is waited for).
timings=()
# (`times` must run in this shell, not in a $(...) subshell, to see this shell's children.)
times_file=$(mktemp)
cpu_now() {
  times >"$times_file"
  CPU=$(tail -n 1 "$times_file" | python3 -c 'import re,sys; print(round(sum(int(m)*60+float(s) for m,s in re.findall(r"(\d+)m([\d.]+)s", sys.stdin.read())), 1))')
}
run() {
  step "$*"; local t0=$SECONDS c0; cpu_now; c0=$CPU; "$@"; local rc=$? dt=$((SECONDS - t0)) dc
  last_rc=$rc
  cpu_now; dc=$(python3 -c "print(round($CPU - $c0))")
  timings+=("$(printf '%5d s %6s s CPU  %s%s' "$dt" "$dc" "$*" "$([ $rc -eq 0 ] || echo "  (FAILED $rc)")")")
  echo "<== $dt s ($dc s CPU): $*"
  [ $rc -eq 0 ] || { echo "FAILED ($rc): $*"; [ $status -ne 0 ] || status=$rc; }
}
summary() {
  cpu_now; echo; echo "==> step times: wall, CPU (total $((SECONDS - t_start)) s wall, $CPU s CPU)"
  printf '%s\n' "${timings[@]}"
}

run cargo fmt --all -- --check
# The module graph of shared/src: no cycles, no upward imports (docs/layout.md's layers), no file in
# shared/ or functions/ over 600 lines; its fixture self-test first. Under a second.
run scripts/module-graph.py
# Offline: the locks pin every Python package with hashes, and a tampered hash, an unlocked
# dependency or a tampered DynamoDB Local jar is refused.
run scripts/supply-chain-check.sh
run scripts/cfn-lint.sh
# Clippy runs inside the dev build rather than as a `cargo clippy` of its own: cargo-clippy is
# `cargo check` with clippy-driver as the workspace members' compiler, so a separate clippy step
# type-checks every dependency a second time (check mode shares nothing with the build) and every
# member twice, mostly on one core (docs/testing.md). With the same wrapper and arguments on the
# build below, every target `--all-targets` names is linted (-D warnings) as it compiles, once.
# The steps after it keep this environment so cargo finds their build fresh (the wrapper and
# CLIPPY_ARGS are part of each member's fingerprint); the release builds (scripts/sam-check.sh)
# run without it. When the lint build fails, the steps after it build without the wrapper, so the
# tests still run and report.
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if [ -x "$clippy_driver" ]; then
  export RUSTC_WORKSPACE_WRAPPER="$clippy_driver" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  run cargo build --workspace --all-targets --locked
  if [ "$last_rc" -ne 0 ]; then
    unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
    echo "the clippy build failed: the steps below build without clippy"
  fi
else
  run cargo clippy --workspace --all-targets --locked -- -D warnings
fi
run cargo test --workspace --locked
# The Python package (python/, docs/python.md): its dev wheel packed from the extension module of
# the build above, checked, installed into .tools/python-test, and its pytest suite against this
# DynamoDB Local.
run venvs_wait
run scripts/python-test.sh
# --- The decide API against its OpenAPI description (openapi/decide-api.yaml) --------------------
# Schemathesis (hash-locked) generates valid and invalid requests for every operation and checks each
# answer: no 5xx, status, content type and body as the document says, bad input a 4xx JSON naming the
# field. Seeded (37) and bounded (25 examples per operation, one worker): 1,232 cases in 25 s measured
# on a loaded 2-core machine, plus building the turnstile binary the first time (docs/testing.md).
run scripts/schemathesis.sh
# ---------------------------------------------------------------------------------------------------
# The benchmark smoke: a few decisions per workload, peers included, on its own DynamoDB Local
# (port 8011); asserts 0 over-admission and calls/decision so `make bench` never rots. About a minute
# once the peers' venvs exist. TURNSTILE_BENCH_SMOKE=0 skips it. The full `make bench` is never run here.
if [ "${TURNSTILE_BENCH_SMOKE:-1}" != 0 ]; then run scripts/bench.sh smoke; fi
# The deploy path (decisions 0703, 0704): `sam validate --lint`, `sam build` for arm64 (template.yaml's
# default; cargo-lambda, the release profile, rustup's aarch64 target or Debian's cross toolchain from
# scripts/arm64-toolchain.sh), each artifact's architecture, glibc ceiling (2.34) and size (fails above
# 8 MiB / 4 MiB zipped), then each artifact started under qemu-user on its sample events against
# DynamoDB Local. x86_64 is one flag away (`make sam-check ARCH=x86_64`) and built by `make release`.
# The background build's own time overlaps the steps above; this step is how long they waited for it.
arm64_build() {
  while [ ! -s "$arm64_log.rc" ]; do sleep 2; done
  cat "$arm64_log"
  echo "(the background build's own CPU, user and system: $(tail -n 1 "$arm64_log.cpu" 2>/dev/null))"
  return "$(cat "$arm64_log.rc")"
}
run arm64_build
run scripts/sam-check.sh --after-build
summary
exit $status
