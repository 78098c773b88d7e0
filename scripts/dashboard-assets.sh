#!/usr/bin/env bash
# Installs the local dashboard's charting library (Chart.js, pinned by local/dashboard/package.json
# and package-lock.json) into local/dashboard/node_modules with `npm ci`, when it is missing or not
# the pinned version. `turnstile dev` serves the file from there (decision 1001); nothing is
# embedded at build time, so no rebuild follows. `make dev` and `make test` run this.
set -euo pipefail
cd "$(dirname "$0")/../local/dashboard"

lib=node_modules/chart.js/dist/chart.umd.min.js
pinned() { node -p 'require("./package-lock.json").packages["node_modules/chart.js"].version'; }
installed() { node -p 'require("./node_modules/chart.js/package.json").version' 2>/dev/null || true; }

command -v npm >/dev/null 2>&1 || { echo "dashboard-assets: npm is required (install Node.js and npm)" >&2; exit 1; }
want=$(pinned)
if [ -f "$lib" ] && [ "$(installed)" = "$want" ]; then exit 0; fi
echo "dashboard-assets: installing chart.js@$want into local/dashboard/node_modules (npm ci)" >&2
npm ci --ignore-scripts --no-audit --no-fund --silent >&2
[ -f "$lib" ] || { echo "dashboard-assets: npm ci left no $lib" >&2; exit 1; }
