#!/usr/bin/env bash
# Lints template.yaml (or the files given) with cfn-lint, pinned with every dependency's hashes
# (scripts/requirements/cfn-lint.txt, from cfn-lint.in) and installed on first use into a venv under
# .tools/ (ignored by git) by scripts/pip-locked.sh. Fails on any error or warning; informational
# findings are printed but do not fail. Used by `make test` and `make cfn-lint`.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=".tools/cfn-lint"
scripts/pip-locked.sh "$VENV" scripts/requirements/cfn-lint.txt

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
