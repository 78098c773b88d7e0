#!/usr/bin/env bash
# The README's dashboard screenshot, from `make dev`'s own demo: against a running `make dev`, it
# opens sockets as the README's walkthrough does (two on an acme session, a third refused, one
# without a ticket refused; three on globex; a burst of messages on initech), then has headless
# Chromium (scripts/chromium.sh installs it) photograph the dashboard into target/dashboard.png.
# Copy it to docs/images/dashboard.png when the page changes.
#
# Env: TURNSTILE_DEV_WS_ADDR (127.0.0.1:3001), TURNSTILE_DEV_HTTP_ADDR (127.0.0.1:3000), as for make dev.
set -euo pipefail
cd "$(dirname "$0")/.."

http="http://${TURNSTILE_DEV_HTTP_ADDR:-127.0.0.1:3000}"
ws="ws://${TURNSTILE_DEV_WS_ADDR:-127.0.0.1:3001}/"
ts="${CARGO_TARGET_DIR:-target}/debug/turnstile"
out="${CARGO_TARGET_DIR:-target}/dashboard.png"
field() { python3 -c "import json,sys; print(json.load(sys.stdin)[\"$1\"])"; }
curl -sf "$http/dashboard/state" >/dev/null || { echo "dev-screenshot: no make dev at $http" >&2; exit 1; }

# Each socket stays open while its stdin does: 60 s, long enough for the photograph.
hold() { local lines=$1; shift; ( { printf '%b' "$lines"; sleep 60; } | "$ts" ws "$@" >/dev/null 2>&1 & ); }

s=$(curl -s -X PUT "$http/session?tenantId=acme&connects=2")
sid=$(echo "$s" | field sessionId); ticket=$(echo "$s" | field ticket)
hold 'hello\nagain\n' --ticket "$ticket" "$ws"
hold 'hi\n' --ticket "$ticket" "$ws"
sleep 2
"$ts" ws --ticket "$ticket" "$ws" </dev/null || true                   # a third: refused (403)
"$ts" ws "$ws?tenantId=acme&sessionId=$sid" </dev/null || true         # no ticket: refused (403)
ticket=$(curl -s -X PUT "$http/session?tenantId=globex&connects=3" | field ticket)
for i in 1 2 3; do hold "m$i\n" --ticket "$ticket" "$ws"; done
ticket=$(curl -s -X PUT "$http/session?tenantId=initech" | field ticket)
hold "$(printf 'burst %s\\n' 1 2 3 4 5 6 7 8)" --ticket "$ticket" "$ws"
sleep 4

mkdir -p "$(dirname "$out")"
timeout 60 "${TURNSTILE_TEST_CHROMIUM:-/usr/bin/chromium}" --headless=new --no-sandbox --disable-gpu \
  --disable-quic --no-first-run --disable-background-networking --disable-component-update \
  --disable-sync --window-size=1400,1500 --virtual-time-budget=5000 --screenshot="$out" "$http/" 2>/dev/null
echo "dev-screenshot: $out" >&2
