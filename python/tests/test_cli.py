"""The same bucket from Python and from the CLI: one store, one answer."""

from __future__ import annotations

from turnstile import fungible_limiter
from turnstile.kv import Limiter

from conftest import cli


def test_a_token_bucket_agrees_between_python_and_the_cli(name: str) -> None:
    limiter = fungible_limiter(name, "acct", 5, 3600)
    for left in (4, 3, 2):
        assert limiter.get_token().remaining == left
    taken = cli("token", "take", name, "acct", "--limit", "5", "--window", "3600")
    assert taken["granted"] is True and taken["remaining"] == 1, taken
    assert limiter.get_token().remaining == 0
    refused = cli("token", "take", name, "acct", "--limit", "5", "--window", "3600")
    assert refused["granted"] is False, refused


def test_a_kv_bucket_agrees_between_python_and_the_cli(name: str, kv_file: str) -> None:
    limiter = Limiter(path=kv_file)
    assert limiter.spend("ApiCallsPerKey", name, 2)["remaining"] == 3
    spent = cli("kv", "spend", "ApiCallsPerKey", name, "--cost", "2", "--config", kv_file)
    assert spent["allowed"] is True and spent["remaining"] == 1, spent
    state = limiter.state(f"ApiCallsPerKey:{name}")
    assert state["tokensAvailable"] == 1, state
    assert limiter.spend("ApiCallsPerKey", name, 2)["allowed"] is False
