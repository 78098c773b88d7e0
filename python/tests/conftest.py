"""The wheel against DynamoDB Local (scripts/python-test.sh): tables made by the `turnstile` CLI under
a fresh prefix, named to the package through rate-limiter-py's own variables."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

ENDPOINT = os.environ.get("TURNSTILE_TEST_DYNAMODB")
CLI = os.environ.get("TURNSTILE_CLI", os.path.join(os.path.dirname(__file__), "..", "..", "target", "debug", "turnstile"))

if not ENDPOINT:
    raise pytest.UsageError("set TURNSTILE_TEST_DYNAMODB (scripts/python-test.sh does) to a DynamoDB Local endpoint")

PREFIX = f"py{uuid.uuid4().hex[:8]}-"
# Set before the first call: the package's client reads the environment once per process.
os.environ.update({
    "AWS_ENDPOINT_URL": ENDPOINT,
    "FUNGIBLE_TABLE": PREFIX + "fungible-tokens",
    "LIMIT_TABLE": PREFIX + "limits",
    "NON_FUNGIBLE_TABLE": PREFIX + "non-fungible-tokens",
    "NON_FUNGIBLE_RES_INDEX": PREFIX + "resource-index",
    "TURNSTILE_BUCKET_TABLE": PREFIX + "buckets",
})
for var in ("LIMITER_TABLES_BASE_NAME", "AWS_ENDPOINT_URL_DYNAMODB", "TURNSTILE_LIMITS_FILE"):
    os.environ.pop(var, None)

KV_YAML = """
names:
  ApiCallsPerKey: { id: 20, format: string }
  NewOrdersPerAccount: { id: 3, format: regId }
defaults:
  ApiCallsPerKey: { burst: 5, count: 5, period: 1h }
  NewOrdersPerAccount: { burst: 3, count: 3, period: 1h }
"""


def cli(*args: str, check: bool = True) -> dict:
    """Runs the CLI with the tests' environment; its JSON answer (a refusal exits non-zero with one)."""
    out = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120)
    if check and not out.stdout.strip():
        raise AssertionError(f"turnstile {' '.join(args)}: exit {out.returncode}\n{out.stderr}")
    return json.loads(out.stdout)


@pytest.fixture(scope="session", autouse=True)
def tables() -> None:
    out = subprocess.run([CLI, "tables", "create", "--only", "fungible-tokens", "--only", "limits",
                          "--only", "non-fungible-tokens", "--only", "buckets"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


@pytest.fixture
def name() -> str:
    """A resource or account name no other test uses."""
    return "r-" + uuid.uuid4().hex[:10]


@pytest.fixture
def kv_file(tmp_path) -> str:
    p = tmp_path / "limits.yaml"
    p.write_text(KV_YAML)
    return str(p)
