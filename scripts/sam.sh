#!/usr/bin/env bash
# Runs the AWS SAM CLI with cargo-lambda (and the zig linker it uses) on PATH, all pinned and installed on
# first use into one venv under .tools/ (ignored by git): `scripts/sam.sh build ...`, `scripts/sam.sh
# validate --lint`. `scripts/sam.sh --install-only` just installs. Nothing else is installed by hand; a
# fresh machine needs python3 (with venv) and cargo. Used by `make test` (scripts/sam-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

SAM_CLI_VERSION="${SAM_CLI_VERSION:-1.170.0}"
CARGO_LAMBDA_VERSION="${CARGO_LAMBDA_VERSION:-1.9.2}"
ZIGLANG_VERSION="${ZIGLANG_VERSION:-0.15.2}"
VENV=".tools/sam-${SAM_CLI_VERSION}-cl${CARGO_LAMBDA_VERSION}-zig${ZIGLANG_VERSION}"

if [ ! -x "$VENV/bin/sam" ] || [ ! -x "$VENV/bin/cargo-lambda" ]; then
    command -v python3 >/dev/null || { echo "sam.sh: python3 is required" >&2; exit 1; }
    echo "installing aws-sam-cli ${SAM_CLI_VERSION}, cargo-lambda ${CARGO_LAMBDA_VERSION}, ziglang ${ZIGLANG_VERSION} into ${VENV}" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
        "aws-sam-cli==${SAM_CLI_VERSION}" "cargo-lambda==${CARGO_LAMBDA_VERSION}" "ziglang==${ZIGLANG_VERSION}"
fi

# cargo-lambda finds zig through the ziglang module of the python on PATH; SAM finds cargo-lambda on PATH.
export PATH="$PWD/$VENV/bin:$PATH"
# No telemetry and no update check from an unattended run.
export SAM_CLI_TELEMETRY=0
export SAM_CLI_BETA_RUST_CARGO_LAMBDA="${SAM_CLI_BETA_RUST_CARGO_LAMBDA:-1}"

[ "${1:-}" != "--install-only" ] || exit 0
exec sam "$@"
