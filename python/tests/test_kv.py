"""The native interface: key-value limits, leases, the state record, and their asyncio twins."""

from __future__ import annotations

import asyncio

from turnstile.kv import AsyncLimiter, Limiter

from conftest import KV_YAML


def test_spend_refund_check(name: str) -> None:
    limiter = Limiter(KV_YAML)
    assert limiter.spend("ApiCallsPerKey", name, 5)["remaining"] == 0
    denied = limiter.spend("ApiCallsPerKey", name)
    assert denied["allowed"] is False and denied["retryAfter"] > 0
    assert limiter.refund("ApiCallsPerKey", name, 2)["allowed"] is True
    assert limiter.check("ApiCallsPerKey", name)["remaining"] == 2


def test_batch_is_all_or_nothing(name: str) -> None:
    limiter = Limiter(KV_YAML)
    ok = limiter.batch([("ApiCallsPerKey", name, 1), ("NewOrdersPerAccount", "12345", 3)])
    assert ok["decision"]["allowed"] is True
    refused = limiter.batch([("ApiCallsPerKey", name, 1), ("NewOrdersPerAccount", "12345", 1)])
    assert refused["decision"]["allowed"] is False and refused["deciding"] == "NewOrdersPerAccount:12345"
    assert limiter.check("ApiCallsPerKey", name)["remaining"] == 4  # the refused batch spent nothing


def test_lease_acquire_adjust_commit(name: str) -> None:
    limiter = Limiter(KV_YAML)
    assert limiter.acquire_lease("ApiCallsPerKey", name, "job-1", 4, ttl=60)["granted"] is True
    assert limiter.check("ApiCallsPerKey", name)["remaining"] == 1
    limiter.adjust_lease("ApiCallsPerKey", name, "job-1", 2)
    assert limiter.check("ApiCallsPerKey", name)["remaining"] == 3
    limiter.commit_lease("ApiCallsPerKey", name, "job-1")
    assert limiter.check("ApiCallsPerKey", name)["remaining"] == 3


def test_state_record(name: str) -> None:
    limiter = Limiter(KV_YAML)
    limiter.spend("ApiCallsPerKey", name, 2)
    state = limiter.state(f"ApiCallsPerKey:{name}")
    assert state["tokensAvailable"] == 3 and state["tokenCapacity"] == 5, state


def test_asyncio_twins(name: str) -> None:
    async def main() -> None:
        limiter = AsyncLimiter(KV_YAML)
        outcomes = await asyncio.gather(*(limiter.spend("ApiCallsPerKey", name) for _ in range(12)))
        assert sum(o["allowed"] for o in outcomes) == 5
        assert (await limiter.refund("ApiCallsPerKey", name))["allowed"] is True
        assert (await limiter.check("ApiCallsPerKey", name))["remaining"] == 1
        assert (await limiter.acquire_lease("ApiCallsPerKey", name, "l", 1))["granted"] is True
        assert (await limiter.release_lease("ApiCallsPerKey", name, "l"))["granted"] is True
        assert (await limiter.state(f"ApiCallsPerKey:{name}"))["tokensAvailable"] >= 1
        await limiter.flush()

    asyncio.run(main())
