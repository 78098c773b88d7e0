#!/usr/bin/env bash
# Two builds of the `turnstile` wheel against zae-limiter, interleaved in the same rounds, measured the
# way scripts/bench.sh measures the peers: throughput units each on a fresh DynamoDB Local primed
# alike (bench/peers/drive.py, c = $AB_CONCURRENCY), then the client-cost phase (one stub,
# `turnstile-bench stub`, interleaved rounds). A diagnostic for changes to python/, not part of
# `make bench`:
#
#   bench/diag/tpy_ab.sh VENV_A VENV_B OUT_DIR
#
# VENV_A/B: virtualenvs each with one wheel installed (e.g. `maturin build --profile wheel`, then
# `pip install --no-deps` into a fresh venv). zae-limiter runs from bench/peers/.venv-zae (made by
# `make bench` or scripts/pip-locked.sh). Env: AB_PORT (8120), AB_ROUNDS (3), AB_CC_ROUNDS (3),
# AB_DECISIONS (1000), AB_WARMUP (1000), AB_CONCURRENCY (8), AB_CC_DECISIONS (2000), AB_PRIME (2000),
# AB_ZAE ("inline stored"; "" to leave zae-limiter out). Prints one summary line per unit and round;
# the JSON lines are in OUT_DIR/throughput.jsonl and OUT_DIR/client-cost.jsonl.
set -euo pipefail
[ $# -eq 3 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
cd "$(dirname "$0")/../.."
root=$(pwd)
venv_a=$(cd "$1" && pwd) venv_b=$(cd "$2" && pwd) out=$3
mkdir -p "$out"
port="${AB_PORT:-8120}"; endpoint="http://127.0.0.1:$port"
rounds="${AB_ROUNDS:-3}"; cc_rounds="${AB_CC_ROUNDS:-3}"; decisions="${AB_DECISIONS:-1000}"
warmup="${AB_WARMUP:-1000}"; conc="${AB_CONCURRENCY:-8}"; cc_decisions="${AB_CC_DECISIONS:-2000}"
prime="${AB_PRIME:-2000}"; zae_styles="${AB_ZAE-inline stored}"
bench_bin="$root/target/debug/turnstile-bench"
export TURNSTILE_CLI="$root/target/debug/turnstile" DYNAMODB_LOCAL_PORT="$port"
[ -x "$bench_bin" ] && [ -x "$TURNSTILE_CLI" ] || cargo build --locked -p turnstile-bench -p turnstile-cli
trap 'scripts/dynamodb-local.sh stop >/dev/null 2>&1; [ -n "${stub_pid:-}" ] && kill "$stub_pid" 2>/dev/null' EXIT

units=(); for s in $zae_styles; do units+=("zae:$s:$root/bench/peers/.venv-zae"); done
for s in threads asyncio; do units+=("tpy:$s:$venv_a" "tpy:$s:$venv_b"); done
tag() { case "$3" in "$venv_a") echo "A" ;; "$venv_b") echo "B" ;; *) echo "-" ;; esac; }
fresh() {
  scripts/dynamodb-local.sh stop >/dev/null 2>&1 || true
  scripts/dynamodb-local.sh start >/dev/null
  [ "${1:-prime}" = raw ] || "$bench_bin" prime --endpoint "$endpoint" --requests "$prime" >/dev/null
}
summary() {
  python3 -c '
import json, sys
tag = sys.argv[1]
for l in sys.stdin:
    r = json.loads(l); r["ab"] = tag; print(json.dumps(r), file=open(sys.argv[2], "a"))
    who = "%s %s (%s) round %s" % (tag, r["implementation"], r["style"], r["round"])
    if r["kind"] == "throughput":
        print("%s c=%s: %.0f/s p50 %.2f ms errors %s" % (who, r["concurrency"], r["decisions_per_s"], r["p50_ms"], r["errors"]))
    elif r["kind"] == "client_cost":
        print("%s: %.1f us CPU/decision p50 %.3f ms errors %s" % (who, r["cpu_us_per_decision"], r["p50_ms"], r["errors"]))
    elif r["kind"] == "accuracy":
        print("%s accuracy: %s/%s" % (who, r["admitted"], r["allowed"]))
' "$1" "$2"
}

for round in $(seq 1 "$rounds"); do
  for u in "${units[@]}"; do
    IFS=: read -r peer style venv <<<"$u"
    fresh
    "$venv/bin/python" bench/peers/drive.py --peer "$peer" --style "$style" --endpoint "$endpoint" \
      --decisions "$decisions" --warmup "$warmup" --concurrency "$conc" --round "$round" 2>/dev/null \
      | summary "$(tag "$peer" "$style" "$venv")" "$out/throughput.jsonl"
  done
done

fresh raw
rm -f "$out/stub.addr"
"$bench_bin" stub --upstream "$endpoint" --addr-file "$out/stub.addr" >/dev/null 2>"$out/stub.log" &
stub_pid=$!
for _ in $(seq 1 100); do [ -s "$out/stub.addr" ] && break; sleep 0.1; done
stub=$(cat "$out/stub.addr")
for round in $(seq 1 "$cc_rounds"); do
  for u in "${units[@]}"; do
    IFS=: read -r peer style venv <<<"$u"
    "$venv/bin/python" bench/peers/drive.py --peer "$peer" --style "$style" --endpoint "$stub" --client-cost \
      --decisions "$cc_decisions" --warmup 100 --round "$round" 2>/dev/null \
      | summary "$(tag "$peer" "$style" "$venv")" "$out/client-cost.jsonl"
  done
done
