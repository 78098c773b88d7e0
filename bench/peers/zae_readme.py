#!/usr/bin/env python3
"""An independent reading of zae-limiter, the way a user following its documentation drives it, to
check the number `make bench` reports for it (scripts/bench.sh runs this on a fresh DynamoDB Local;
bench/report.py fails the smoke run when our driver's c = 1 p50 differs from this one by more than
1.5x, either way).

Nothing of the bench is used here: no call counter, no capacity hook, no shared helpers. The usage:
``Repository.builder()...build()``, ``RateLimiter(repository=repo)``, ``set_limits`` for the entity,
then ``async with limiter.acquire(entity_id, resource, consume={...})`` one after the other (c = 1).
The table is made with the library's own ``create_table()`` first because DynamoDB Local has no
CloudFormation for the builder to provision with.

    python zae_readme.py --endpoint http://127.0.0.1:8010 --decisions 200

Prints one JSON object: p50_ms, p99_ms, decisions_per_s, decisions, warmup, version.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import time
import uuid


async def main(endpoint: str, decisions: int, warmup: int) -> dict:
    # The keys zae-limiter's docs export for a local endpoint (docs/benchmarks.md).
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    from zae_limiter import Limit, RateLimiter, Repository
    from zae_limiter import __version__ as version

    stack = f"readme-{uuid.uuid4().hex[:8]}"
    table = Repository(name=stack, region="us-east-1", endpoint_url=endpoint, _skip_deprecation_warning=True)
    await table.create_table()
    await table.close()

    repo = await Repository.builder().stack(stack).region("us-east-1").endpoint_url(endpoint).build()
    limiter = RateLimiter(repository=repo)
    await limiter.set_limits("api-key-123", [Limit.per_hour("rph", 1_000_000)], resource="gpt-4")

    async def one() -> None:
        async with limiter.acquire(entity_id="api-key-123", resource="gpt-4", consume={"rph": 1}):
            pass

    for _ in range(warmup):
        await one()
    samples = []
    t0 = time.perf_counter()
    for _ in range(decisions):
        t = time.perf_counter()
        await one()
        samples.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    await repo.close()
    samples.sort()
    rank = lambda q: samples[min(max(math.ceil(q * len(samples)), 1), len(samples)) - 1]  # nearest rank
    return {"p50_ms": rank(0.50) * 1000, "p99_ms": rank(0.99) * 1000, "decisions_per_s": decisions / wall,
            "decisions": decisions, "warmup": warmup, "version": version,
            "usage": "Repository.builder()...build(); set_limits; acquire(entity_id, resource, consume=...)"}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--decisions", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--round", type=int, default=1)
    a = p.parse_args()
    print(json.dumps({**asyncio.run(main(a.endpoint, a.decisions, a.warmup)), "round": a.round}))
