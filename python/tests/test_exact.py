"""Exact under concurrency, judged by what the callers saw (admissions counted client-side)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from turnstile import CapacityExhaustedException, fungible_limiter, non_fungible_limiter, rate_limit

WORKERS, ATTEMPTS, LIMIT, WINDOW = 16, 20, 50, 3600


def test_16_threads_x_20_attempts_on_a_limit_of_50_admit_exactly_50(name: str) -> None:
    @rate_limit(name, LIMIT, WINDOW)
    def call(account_id: str) -> None:
        pass

    start = threading.Barrier(WORKERS)

    def worker() -> int:
        start.wait()
        admitted = 0
        for _ in range(ATTEMPTS):
            try:
                call(account_id="acct")
                admitted += 1
            except CapacityExhaustedException:
                pass
        return admitted

    with ThreadPoolExecutor(WORKERS) as pool:
        counts = list(pool.map(lambda _: worker(), range(WORKERS)))
    assert sum(counts) == LIMIT, counts


def test_16_asyncio_tasks_x_20_attempts_admit_exactly_50(name: str) -> None:
    async def worker() -> int:
        admitted = 0
        for _ in range(ATTEMPTS):
            try:
                async with fungible_limiter(name, "acct", LIMIT, WINDOW):
                    admitted += 1
            except CapacityExhaustedException:
                pass
        return admitted

    async def main() -> list:
        return await asyncio.gather(*(worker() for _ in range(WORKERS)))

    counts = asyncio.run(main())
    assert sum(counts) == LIMIT, counts


def test_async_decorator_admits_exactly_the_limit(name: str) -> None:
    @rate_limit(name, 7, WINDOW)
    async def call(account_id: str) -> str:
        return account_id

    async def attempt() -> bool:
        try:
            return await call(account_id="acct") == "acct"
        except CapacityExhaustedException:
            return False

    async def main() -> list:
        return await asyncio.gather(*(attempt() for _ in range(40)))

    assert sum(asyncio.run(main())) == 7


def test_reservation_capacity_10_under_concurrent_context_managers_holds_10(name: str) -> None:
    capacity, workers = 10, 16
    attempted = threading.Barrier(workers)
    lock = threading.Lock()
    held = {"now": 0, "max": 0, "admitted": 0}

    def worker(i: int) -> None:
        for attempt in range(2):
            try:
                with non_fungible_limiter(name, "acct", capacity) as reservation:
                    with lock:
                        held["now"] += 1
                        held["admitted"] += 1
                        held["max"] = max(held["max"], held["now"])
                    reservation.create_token(f"cluster-{i}-{attempt}")
                    if attempt == 1:
                        break
            except CapacityExhaustedException:
                pass
        attempted.wait()  # every holder keeps its unit until all have tried

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(worker, range(workers)))
    assert held["admitted"] == capacity, held
    assert held["max"] == capacity, held


def test_reservations_from_asyncio_hold_the_capacity(name: str) -> None:
    async def attempt(i: int) -> bool:
        try:
            async with non_fungible_limiter(name, "acct", 4) as reservation:
                await reservation.create_token_async(f"c-{i}")
                return True
        except CapacityExhaustedException:
            return False

    async def main() -> list:
        return await asyncio.gather(*(attempt(i) for i in range(12)))

    assert sum(asyncio.run(main())) == 4
