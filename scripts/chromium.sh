#!/usr/bin/env bash
# Makes sure Debian's headless Chromium and its chromedriver are here for the dashboard's browser test
# (tests/integration/dashboard.rs), installing them with apt-get when missing and allowed (root).
# Prints the chromedriver to use on stdout: its path, or `skip` (with the reason on stderr, so a run
# that cannot have a browser says so out loud instead of passing silently).
#
# Env: TURNSTILE_TEST_CHROMEDRIVER (a driver to use as is; `skip` to skip on purpose).
set -uo pipefail

if [ -n "${TURNSTILE_TEST_CHROMEDRIVER:-}" ]; then echo "$TURNSTILE_TEST_CHROMEDRIVER"; exit 0; fi

have() { command -v chromedriver >/dev/null 2>&1 && [ -x "${TURNSTILE_TEST_CHROMIUM:-/usr/bin/chromium}" ]; }

if ! have; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "chromium: installing Debian's chromium and chromium-driver (apt-get)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } >&2 \
      || echo "chromium: apt-get install failed" >&2
  else
    echo "chromium: not installed, and this user cannot apt-get install it" >&2
  fi
fi

if have; then
  command -v chromedriver
else
  echo "SKIPPING the dashboard browser test: no Chromium/chromedriver on this machine." >&2
  echo "  Install Debian's chromium and chromium-driver (or set TURNSTILE_TEST_CHROMEDRIVER) to run it." >&2
  echo skip
fi
