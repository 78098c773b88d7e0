#!/usr/bin/env bash
# Runs the AWS SAM CLI with cargo-lambda (and the zig linker it uses) on PATH, all pinned with every
# dependency's hashes (scripts/requirements/sam.txt, from sam.in: aws-sam-cli 1.170.0, cargo-lambda
# 1.9.2, ziglang 0.15.2) and installed on first use into one venv under .tools/ (ignored by git) by
# scripts/pip-locked.sh: `scripts/sam.sh build ...`, `scripts/sam.sh validate --lint`.
# `scripts/sam.sh --install-only` just installs. Nothing else is installed by hand; a fresh machine
# needs python3 (with venv) and cargo. Used by `make test` (scripts/sam-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=".tools/sam"
scripts/pip-locked.sh "$VENV" scripts/requirements/sam.txt

# cargo-lambda finds zig through the ziglang module of the python on PATH; SAM finds cargo-lambda on PATH.
export PATH="$PWD/$VENV/bin:$PATH"
# No telemetry and no update check from an unattended run.
export SAM_CLI_TELEMETRY=0
export SAM_CLI_BETA_RUST_CARGO_LAMBDA="${SAM_CLI_BETA_RUST_CARGO_LAMBDA:-1}"

[ "${1:-}" != "--install-only" ] || exit 0
# `scripts/sam.sh --exec CMD...` runs another command of the venv's (e.g. `cargo lambda build`) with
# the same PATH and settings.
if [ "${1:-}" = "--exec" ]; then shift; exec "$@"; fi
exec sam "$@"
