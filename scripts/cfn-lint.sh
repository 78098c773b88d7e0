#!/usr/bin/env bash
# Lints template.yaml (or the files given) with cfn-lint, pinned, installed on first use into a venv
# under .tools/ (ignored by git). Fails on any error or warning; informational findings are printed
# but do not fail. Used by `make test` and `make cfn-lint`.
set -euo pipefail
cd "$(dirname "$0")/.."

CFN_LINT_VERSION="${CFN_LINT_VERSION:-1.58.0}"
VENV=".tools/cfn-lint-${CFN_LINT_VERSION}"

if [ ! -x "$VENV/bin/cfn-lint" ]; then
    command -v python3 >/dev/null || { echo "cfn-lint.sh: python3 is required" >&2; exit 1; }
    echo "installing cfn-lint ${CFN_LINT_VERSION} into ${VENV}"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "cfn-lint==${CFN_LINT_VERSION}"
fi

[ $# -gt 0 ] || set -- template.yaml
echo "cfn-lint $("$VENV/bin/cfn-lint" --version | awk '{print $2}') on $*"
set +e
"$VENV/bin/cfn-lint" --format parseable -- "$@"
rc=$?
set -e
# cfn-lint's exit status is a bit mask: 2 errors, 4 warnings, 8 informational (1 = it crashed).
if [ $((rc & ~8)) -ne 0 ]; then
    echo "cfn-lint: errors or warnings (exit $rc)" >&2
    exit 1
fi
echo "cfn-lint: no errors or warnings"
