#!/usr/bin/env python3
"""Peer drivers for `make bench`: zae-limiter and rate-limiter-py 0.3.0, and our own Python package
(turnstile-py, `--peer tpy`), driven through their own public APIs against the same DynamoDB Local as Turnstile, emitting the same JSON lines as
`turnstile-bench ours` (one per result, on stdout).

    python drive.py --peer zae --endpoint http://127.0.0.1:8001 --decisions 2000
    python drive.py --peer rlp --endpoint http://127.0.0.1:8001 --decisions 2000

Each peer lives in its own virtualenv (rate-limiter-py 0.3.0 pins botocore 1.13, which zae-limiter
cannot share), so this file imports only the peer it is asked for and the standard library.

Workloads
- ``acquire``: one admission of cost 1 on one hot bucket (one entity / account), limit far above the
  decision budget so every decision is an admission, at each concurrency. zae-limiter: asyncio tasks
  on one ``RateLimiter`` (its API is async); rate-limiter-py: threads, one ``rate_limit`` decorator
  (hence one boto3 resource) per thread (its API is synchronous, and boto3 resources are not
  thread-safe).
- ``accuracy``: limit 50 in one window (a 1-hour window, so refill during the test is < 1 token),
  16 workers x 20 attempts at once; count what was admitted.

How each number is obtained (docs/decisions/0803-peer-drivers.md)
- latency: ``time.perf_counter()`` around one decision (the acquire context entered and left),
  closed loop, the same definition as the Rust runner;
- DynamoDB calls: a botocore ``before-send`` event handler on the peer's own client, which fires once
  per HTTP attempt (retries included), the same definition as Turnstile's CallCounter;
- write units: neither library asks DynamoDB for ``ReturnConsumedCapacity``; ``CapacityMeter`` asks
  for it on the peer's behalf in a separate untimed pass after each timed run, its hooks on the
  client only for that pass.

What the timed zae-limiter decisions carry (decision 0807, "Re-check"): the library as its docs show it
(``Repository.builder()...build()``, ``set_limits``, ``async with limiter.acquire(...)``; the table
from the library's own ``create_table()``, DynamoDB Local having no CloudFormation; the keys its docs
export for a local endpoint) plus one ``before-send`` counter. An independent driver written from
zae-limiter's docs read the same p50 as this one on fresh emulators (this ÷ it: median 0.92x over 12
alternated pairs; one pair on the busy 2-core host spans 0.5-1.5x), and the counter, alternated in
and out in blocks within one process, moved neither the p50 (1.02x) nor the client's CPU per
decision (within 4%).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import capacity  # noqa: E402  (standard library only, beside this file)

REGION = "us-east-1"


def log(msg: str) -> None:
    print(f"peers: {msg}", file=sys.stderr, flush=True)


def emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def percentile(sorted_s: list[float], q: float) -> float:
    """Nearest-rank percentile, the same definition as the Rust runner."""
    if not sorted_s:
        return 0.0
    rank = math.ceil(q * len(sorted_s))
    return sorted_s[min(max(rank, 1), len(sorted_s)) - 1]


class CallCounter:
    """Counts botocore ``before-send`` events (one per HTTP attempt), in total and by operation."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 0
        self.by_op: dict[str, int] = {}

    def __call__(self, event_name: str = "", **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1] if event_name else "unknown"
        with self.lock:
            self.total += 1
            self.by_op[op] = self.by_op.get(op, 0) + 1

    def reset(self) -> None:
        with self.lock:
            self.total = 0
            self.by_op = {}

    def snapshot(self) -> tuple[int, dict[str, int]]:
        with self.lock:
            return self.total, dict(sorted(self.by_op.items()))


CALLS_SOURCE = "botocore before-send hook on the peer's client (one per HTTP attempt)"


def restore(counter: "CallCounter", snap: tuple[int, dict[str, int]]) -> None:
    """Puts back the timed run's call counts after the metered pass counted its own."""
    with counter.lock:
        counter.total, counter.by_op = snap[0], dict(snap[1])


class CapacityMeter:
    """Write and read units of the calls a peer's client makes, measured by the same rules as
    Turnstile's meter (decision 0803) but in a **separate untimed pass** after each timed run (same
    concurrency, same bucket, `--meter-decisions` decisions), so the timed run carries no hook beyond
    the call counter and no extra request field: non-transactional calls ask DynamoDB for
    ``ReturnConsumedCapacity=TOTAL`` (added to the request by a ``before-parameter-build`` hook in
    this driver process when the peer did not ask itself; the library is not changed) and take what
    DynamoDB reports (never below the documented minimum of the request's shape: DynamoDB Local
    reports 0 for a Query that matches nothing, DynamoDB bills 0.5); transactions, which DynamoDB
    Local under-reports, and writes refused on their condition (billed, answered without a figure)
    are computed from the request body with DynamoDB's documented rules (capacity.py); throttled and
    otherwise failed calls are not billed and count 0 — the same rules as `shared::dynamo`."""

    def __init__(self, ask: bool = True) -> None:
        self.ask = ask
        # Off during the timed runs (the peer's requests and latency stay exactly as it makes them);
        # on for the separate metered pass (see `metered_pass`).
        self.enabled = False
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.write = 0.0
            self.read = 0.0
            self.reported = 0
            self.computed_calls = 0

    def register(self, events: Any) -> None:
        events.register("before-parameter-build.dynamodb", self.before_build)
        events.register("before-call.dynamodb", self.before_call)
        events.register("after-call.dynamodb", self.after_call)

    def unregister(self, events: Any) -> None:
        events.unregister("before-parameter-build.dynamodb", self.before_build)
        events.unregister("before-call.dynamodb", self.before_call)
        events.unregister("after-call.dynamodb", self.after_call)

    def before_build(self, params: Any = None, model: Any = None, **_: Any) -> None:
        if (self.enabled and self.ask and model is not None and model.name in capacity.CAPACITY_OPS
                and model.name not in capacity.TRANSACTIONAL and isinstance(params, dict)):
            params.setdefault("ReturnConsumedCapacity", "TOTAL")

    def before_call(self, params: Any = None, context: Any = None, **_: Any) -> None:
        # Keep a reference to the wire body (DynamoDB JSON, the shape the shared fixture holds);
        # it is parsed only when the answer carries no usable figure, so the usual call pays nothing.
        if self.enabled and context is not None and isinstance(params, dict):
            context["bench_body"] = params.get("body")

    @staticmethod
    def computed(op: str, context: Any) -> tuple[float, float]:
        body = (context or {}).get("bench_body") or b"{}"
        try:
            req = json.loads(body.decode() if isinstance(body, (bytes, bytearray)) else body)
            return capacity.units_from_request(op, req)
        except (ValueError, KeyError, TypeError, AttributeError):
            return (0.0, 0.0)

    def after_call(self, parsed: Any = None, model: Any = None, context: Any = None, **_: Any) -> None:
        if not self.enabled or model is None:
            return
        op = model.name
        got = None
        error = ((parsed or {}).get("Error") or {}).get("Code", "") if isinstance(parsed, dict) else ""
        if error and not error.endswith(("ConditionalCheckFailedException", "TransactionCanceledException")):
            return  # throttled or otherwise failed: DynamoDB bills nothing (as shared::dynamo counts it)
        if op not in capacity.TRANSACTIONAL and isinstance(parsed, dict):
            got = capacity.reported_units(op, parsed.get("ConsumedCapacity"))
        if got is not None:
            w, r = got
            minimum = capacity.read_units(0) if op in capacity.READ_OPS else 0.0
            if r < minimum:
                # DynamoDB Local reports 0 for a Query that matches nothing; DynamoDB bills the
                # minimum read. Never below the documented minimum of the request's shape.
                r = max(r, self.computed(op, context)[1])
            source = "reported"
        else:
            w, r = self.computed(op, context)
            source = "computed"
        with self.lock:
            self.write += w
            self.read += r
            if source == "reported":
                self.reported += 1
            else:
                self.computed_calls += 1

    def source(self) -> str:
        with self.lock:
            rep, comp = self.reported, self.computed_calls
        if comp == 0 and rep:
            return "reported by DynamoDB (ReturnConsumedCapacity=TOTAL)"
        if rep == 0 and comp:
            return "computed from the requests (DynamoDB's rules)"
        if rep == 0:
            return "no calls"
        return (f"reported by DynamoDB for {rep} calls, computed from the requests (DynamoDB's rules) for "
                f"{comp} (transactions, writes refused on their condition)")

    def per_decision(self, n: int) -> tuple[float | None, float | None]:
        with self.lock:
            return ((self.write / n, self.read / n) if n else (None, None))

    def metered(self, n: int) -> tuple[float | None, float | None, str]:
        """Units per decision of a metered pass of `n` decisions, and where they came from."""
        w, r = self.per_decision(n)
        return w, r, f"{self.source()}; a separate untimed pass of {n} decisions, same concurrency and bucket"


def throughput_line(impl: str, version: str, concurrency: int, samples: list[float], admitted: int,
                    refused: int, errors: int, first_error: str | None, wall: float,
                    counter: CallCounter, warmup: int, units: tuple[float | None, float | None, str],
                    style: str, rnd: int) -> dict[str, Any]:
    s = sorted(samples)
    n = len(s)
    calls, by_op = counter.snapshot()
    wu, ru, capacity_source = units
    ms = 1000.0
    return {
        "kind": "throughput",
        "implementation": impl,
        "version": version,
        "style": style,
        "round": rnd,
        "workload": "acquire",
        "concurrency": concurrency,
        "decisions": n,
        "admitted": admitted,
        "refused": refused,
        "errors": errors,
        "first_error": first_error,
        "p50_ms": percentile(s, 0.50) * ms,
        "p90_ms": percentile(s, 0.90) * ms,
        "p99_ms": percentile(s, 0.99) * ms,
        "max_ms": (s[-1] * ms) if s else 0.0,
        "mean_ms": (sum(s) / n * ms) if n else 0.0,
        "over_1s": sum(1 for x in s if x > 1.0),
        "wall_s": wall,
        "decisions_per_s": (n / wall) if wall > 0 else 0.0,
        "calls_per_decision": (calls / n) if n else 0.0,
        "calls_by_operation": by_op,
        "calls_source": CALLS_SOURCE,
        "write_units_per_decision": wu,
        "read_units_per_decision": ru,
        "capacity_source": capacity_source,
        "warmup_decisions": warmup,
    }


def accuracy_line(impl: str, version: str, limit: int, window_s: int, workers: int, attempts: int,
                  admitted: int, errors: int, first_error: str | None, wall: float, style: str,
                  rnd: int) -> dict[str, Any]:
    total = workers * attempts
    refill = math.floor(limit * wall / window_s)
    allowed = min(limit + refill, total)
    return {
        "kind": "accuracy",
        "implementation": impl,
        "version": version,
        "style": style,
        "round": rnd,
        "workload": "acquire",
        "limit": limit,
        "workers": workers,
        "attempts_per_worker": attempts,
        "attempts": total,
        "admitted": admitted,
        "allowed": allowed,
        "over_admission": admitted - allowed,
        "errors": errors,
        "first_error": first_error,
        "wall_s": wall,
    }


# --------------------------------------------------------------------------------------------------
# Client cost (--client-cost; docs/decisions/0806-client-cost.md): --endpoint is a record-then-replay
# stub (`turnstile-bench stub`) in front of DynamoDB Local. The warm-up is recorded through it, then the
# stub replays those answers at once and the timed decisions (c = 1) cost only this process: user + sys
# CPU from getrusage(RUSAGE_SELF) around them, and the p50.
# --------------------------------------------------------------------------------------------------

CPU_SOURCE = ("getrusage(RUSAGE_SELF) user + sys of the client process around the timed decisions, "
              "/ decisions; answers replayed by a stub in another process")


def stub_control(endpoint: str, action: str) -> dict[str, Any]:
    import urllib.request
    req = urllib.request.Request(f"{endpoint.rstrip('/')}/__stub/{action}",
                                 method="GET" if action == "stats" else "POST", data=None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def cpu_now() -> tuple[float, float]:
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def client_cost_line(impl: str, version: str, args: argparse.Namespace, result: tuple,
                     cpu0: tuple[float, float], cpu1: tuple[float, float], stats: dict[str, Any]) -> dict[str, Any]:
    samples, admitted, refused, errors, first_error, wall = result
    s = sorted(samples)
    n = len(s)
    per = (lambda x: x / n) if n else (lambda x: 0.0)
    user, sys_ = (cpu1[0] - cpu0[0]) * 1e6, (cpu1[1] - cpu0[1]) * 1e6
    return {
        "kind": "client_cost", "implementation": impl, "version": version, "style": args.style,
        "round": args.round, "workload": "acquire", "concurrency": 1, "decisions": n,
        "admitted": admitted, "refused": refused, "errors": errors, "first_error": first_error,
        "cpu_us_per_decision": per(user + sys_), "user_us_per_decision": per(user),
        "sys_us_per_decision": per(sys_),
        "p50_ms": percentile(s, 0.50) * 1000.0, "p90_ms": percentile(s, 0.90) * 1000.0,
        "mean_ms": (sum(s) / n * 1000.0) if n else 0.0, "wall_s": wall,
        "calls_per_decision": per(stats.get("requests", 0)),
        "calls_by_operation": stats.get("by_operation", {}),
        "stub_misses": stats.get("misses", 0),
        "request_bytes_per_decision": per(stats.get("request_bytes", 0)),
        "response_bytes_per_decision": per(stats.get("response_bytes", 0)),
        "warmup_decisions": args.warmup, "cpu_source": CPU_SOURCE,
    }


# --------------------------------------------------------------------------------------------------
# rate-limiter-py 0.3.0 (synchronous, boto3)
# --------------------------------------------------------------------------------------------------

def client_cost(impl: str, version: str, args: argparse.Namespace, run: Callable[[int], tuple]) -> None:
    """A client-cost line: `run(n)` makes n decisions at c = 1, first the warm-up the stub records,
    then the timed ones it replays, with this process's CPU time around them."""
    stub_control(args.endpoint, "record")
    run(max(args.warmup, 1))
    stub_control(args.endpoint, "replay")
    cpu0 = cpu_now()
    result = run(args.decisions)
    cpu1 = cpu_now()
    emit(client_cost_line(impl, version, args, result, cpu0, cpu1, stub_control(args.endpoint, "stats")))


def run_threaded(pool: ThreadPoolExecutor, concurrency: int, total: int, call: Callable[[], Any],
                 refused: type) -> tuple[list[float], int, int, int, str | None, float]:
    """`total` calls of `call` from `concurrency` workers of `pool`, each timed: (samples, admitted,
    refused, errors, the first error, wall seconds). `refused` is the peer's exhausted-capacity
    exception; any other exception is counted and reported, never hidden."""
    nxt = iter(range(total))
    lock = threading.Lock()
    samples: list[float] = []
    tally = {"admitted": 0, "refused": 0, "errors": 0}
    first_error: list[str] = []

    def worker() -> None:
        local: list[float] = []
        a = r = e = 0
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                break
            t0 = time.perf_counter()
            try:
                call()
                a += 1
            except refused:
                r += 1
            except Exception as ex:
                e += 1
                if not first_error:
                    first_error.append(f"{type(ex).__name__}: {ex}")
            local.append(time.perf_counter() - t0)
        with lock:
            samples.extend(local)
            tally["admitted"] += a
            tally["refused"] += r
            tally["errors"] += e

    t0 = time.perf_counter()
    for f in [pool.submit(worker) for _ in range(concurrency)]:
        f.result()
    wall = time.perf_counter() - t0
    return (samples, tally["admitted"], tally["refused"], tally["errors"],
            first_error[0] if first_error else None, wall)


async def run_async(concurrency: int, total: int, call: Callable[[], Awaitable[Any]],
                    refused: type) -> tuple[list[float], int, int, int, str | None, float]:
    """`total` awaited calls of `call` from `concurrency` tasks, each timed; the same tuple and
    counting as `run_threaded`."""
    nxt = iter(range(total))
    samples: list[float] = []
    tally = {"admitted": 0, "refused": 0, "errors": 0}
    first_error: list[str] = []

    async def worker() -> None:
        while next(nxt, None) is not None:
            t0 = time.perf_counter()
            try:
                await call()
                tally["admitted"] += 1
            except refused:
                tally["refused"] += 1
            except Exception as ex:  # counted and reported, never hidden
                tally["errors"] += 1
                if not first_error:
                    first_error.append(f"{type(ex).__name__}: {ex}")
            samples.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return (samples, tally["admitted"], tally["refused"], tally["errors"],
            first_error[0] if first_error else None, wall)


def run_rlp(args: argparse.Namespace) -> None:
    import boto3
    import limiter.managers
    from limiter import rate_limit
    from limiter.exceptions import CapacityExhaustedException

    version = "0.3.0"
    impl = "rate-limiter-py"
    counter = CallCounter()
    meter = CapacityMeter(ask=args.capacity == "reported")

    def resource() -> Any:
        # The library builds its client with `boto3.resource('dynamodb')`; its botocore (1.13) predates
        # AWS_ENDPOINT_URL, so the endpoint is supplied here. Same calls, same tables, only the address.
        res = boto3.resource("dynamodb", endpoint_url=args.endpoint, region_name=REGION,
                             aws_access_key_id="local", aws_secret_access_key="local")
        res.meta.client.meta.events.register("before-send.dynamodb", counter)
        meter.register(res.meta.client.meta.events)
        return res

    limiter.managers.dynamodb = resource  # the library's client factory, imported by name

    base = f"peer-rlp-{uuid.uuid4().hex[:8]}"
    token_table, limit_table = f"{base}-fungible-tokens", f"{base}-limits"
    admin = resource()
    # The tables as the library's README describes them: (resourceName, accountId) keys; the limit
    # table's serviceName index is used only by its limit loader, created for completeness.
    admin.create_table(
        TableName=token_table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "resourceName", "AttributeType": "S"},
                              {"AttributeName": "accountId", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "resourceName", "KeyType": "HASH"},
                   {"AttributeName": "accountId", "KeyType": "RANGE"}])
    admin.create_table(
        TableName=limit_table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "resourceName", "AttributeType": "S"},
                              {"AttributeName": "accountId", "AttributeType": "S"},
                              {"AttributeName": "serviceName", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "resourceName", "KeyType": "HASH"},
                   {"AttributeName": "accountId", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[{
            "IndexName": f"{base}-limits-service-index",
            "KeySchema": [{"AttributeName": "serviceName", "KeyType": "HASH"},
                          {"AttributeName": "resourceName", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "ALL"}}])
    for t in (token_table, limit_table):
        admin.meta.client.get_waiter("table_exists").wait(TableName=t)

    tl = threading.local()

    def decorated(account: str, limit: int, window_s: int) -> Callable[[str], bool]:
        # One decorated function per thread and bucket, as the README shows the decorator used; its
        # manager creates one boto3 resource on first use and reuses it (kept across the warm-up and
        # the timed phase, which run on the same threads).
        key = (account, limit, window_s)
        cache = getattr(tl, "fns", None)
        if cache is None:
            cache = tl.fns = {}
        if key not in cache:
            @rate_limit("bench-resource", limit, window_s, token_table=token_table,
                        limit_table=limit_table, account_id_pos=0)
            def admitted(_account: str) -> bool:
                return True
            cache[key] = admitted
        return cache[key]

    def run(pool: ThreadPoolExecutor, concurrency: int, total: int, account: str, limit: int,
            window_s: int) -> tuple[list[float], int, int, int, str | None, float]:
        fn = decorated(account, limit, window_s)
        return run_threaded(pool, concurrency, total, lambda: fn(account), CapacityExhaustedException)

    if args.client_cost:
        log(f"{impl} client cost ({args.decisions} decisions)")
        account = f"acct-cc-{uuid.uuid4().hex[:6]}"
        limit = (args.decisions + args.warmup) * 10
        with ThreadPoolExecutor(max_workers=1) as pool:
            client_cost(impl, version, args, lambda n: run(pool, 1, n, account, limit, 3600))
        return

    for c in args.concurrency:
        log(f"{impl} acquire at concurrency {c} ({args.decisions} decisions)")
        account = f"acct-c{c}-{uuid.uuid4().hex[:6]}"
        limit = (args.decisions + args.warmup) * 10
        with ThreadPoolExecutor(max_workers=c) as pool:
            run(pool, c, max(args.warmup, c), account, limit, 3600)
            counter.reset()
            samples, a, r, e, fe, wall = run(pool, c, args.decisions, account, limit, 3600)
            calls = counter.snapshot()
            meter.reset()
            meter.enabled = True
            run(pool, c, args.meter_decisions, account, limit, 3600)
            meter.enabled = False
        units = meter.metered(args.meter_decisions)
        restore(counter, calls)
        emit(throughput_line(impl, version, c, samples, a, r, e, fe, wall, counter, args.warmup, units,
                             args.style, args.round))

    log(f"{impl} accuracy (limit {args.accuracy_limit}, {args.accuracy_workers} x {args.accuracy_attempts})")
    account = f"acct-accuracy-{uuid.uuid4().hex[:6]}"
    total = args.accuracy_workers * args.accuracy_attempts
    with ThreadPoolExecutor(max_workers=args.accuracy_workers) as pool:
        _, a, _, e, fe, wall = run(pool, args.accuracy_workers, total, account,
                                   args.accuracy_limit, 3600)
    emit(accuracy_line(impl, version, args.accuracy_limit, 3600, args.accuracy_workers,
                       args.accuracy_attempts, a, e, fe, wall, args.style, args.round))


# --------------------------------------------------------------------------------------------------
# turnstile-py: our own wheel (python/), rate-limiter-py's interface on the Rust core
# --------------------------------------------------------------------------------------------------

def run_tpy(args: argparse.Namespace) -> None:
    """The `turnstile` wheel driven like the peers: `threads` is rate-limiter-py's usage (the
    `rate_limit` decorator, c threads; one decorator for all of them, the package being thread-safe),
    `asyncio` is zae-limiter's (`async with fungible_limiter(...)`, c tasks on one loop). Calls and
    units come from the package's own meter (TURNSTILE_PY_METER=1: the Rust client's counter, which
    also asks DynamoDB for each call's consumed capacity, as our Rust workloads' counter does), in the
    timed run itself; the client-cost phase runs without it (the stub counts the calls)."""
    os.environ["AWS_ENDPOINT_URL"] = args.endpoint
    if not args.client_cost:
        os.environ["TURNSTILE_PY_METER"] = "1"
    base = f"peer-tpy-{uuid.uuid4().hex[:8]}-"
    os.environ["FUNGIBLE_TABLE"], os.environ["LIMIT_TABLE"] = base + "fungible-tokens", base + "limits"
    cli = os.environ.get("TURNSTILE_CLI", "turnstile")
    import subprocess
    subprocess.run([cli, "tables", "create", "--only", "fungible-tokens", "--only", "limits"],
                   check=True, capture_output=True, timeout=300)

    import turnstile
    from turnstile import CapacityExhaustedException, fungible_limiter, rate_limit

    impl, version = "turnstile-py", turnstile.__version__
    counter = CallCounter()

    def take_usage() -> None:
        u = turnstile._native.usage() or {}
        with counter.lock:
            counter.total = u.get("calls", 0)
            counter.by_op = dict(sorted((u.get("by_operation") or {}).items()))
        take_usage.units = (u.get("write_units"), u.get("read_units"))  # type: ignore[attr-defined]

    def run_threads(c: int, total: int, account: str, limit: int) -> tuple:
        @rate_limit("bench-resource", limit, 3600, account_id_pos=0)
        def admitted(_account: str) -> bool:
            return True

        with ThreadPoolExecutor(max_workers=c) as pool:
            return run_threaded(pool, c, total, lambda: admitted(account), CapacityExhaustedException)

    async def run_tasks(c: int, total: int, account: str, limit: int) -> tuple:
        async def take() -> None:
            async with fungible_limiter("bench-resource", account, limit, 3600):
                pass

        return await run_async(c, total, take, CapacityExhaustedException)

    def run(c: int, total: int, account: str, limit: int) -> tuple:
        if args.style == "asyncio":
            return asyncio.run(run_tasks(c, total, account, limit))
        return run_threads(c, total, account, limit)

    if args.client_cost:
        log(f"{impl} ({args.style}) client cost ({args.decisions} decisions)")
        account = f"acct-cc-{uuid.uuid4().hex[:6]}"
        limit = (args.decisions + args.warmup) * 10
        client_cost(impl, version, args, lambda n: run(1, n, account, limit))
        return

    for c in args.concurrency:
        log(f"{impl} ({args.style}) acquire at concurrency {c} ({args.decisions} decisions)")
        account = f"acct-c{c}-{uuid.uuid4().hex[:6]}"
        limit = (args.decisions + args.warmup) * 10
        run(c, max(args.warmup, c), account, limit)
        turnstile._native.reset_usage()
        samples, a, r, e, fe, wall = run(c, args.decisions, account, limit)
        take_usage()
        wu, ru = take_usage.units  # type: ignore[attr-defined]
        n = max(len(samples), 1)
        units = (wu / n if wu is not None else None, ru / n if ru is not None else None,
                 "the package's meter: DynamoDB's reported consumed capacity, transactions and refused "
                 "writes by the documented rules (shared::dynamo::CallCounter)")
        line = throughput_line(impl, version, c, samples, a, r, e, fe, wall, counter, args.warmup, units,
                               args.style, args.round)
        line["calls_source"] = "the package's meter (TURNSTILE_PY_METER=1), one per HTTP attempt"
        emit(line)

    if args.accuracy_workers > 0:
        log(f"{impl} ({args.style}) accuracy (limit {args.accuracy_limit}, "
            f"{args.accuracy_workers} x {args.accuracy_attempts})")
        account = f"acct-accuracy-{uuid.uuid4().hex[:6]}"
        total = args.accuracy_workers * args.accuracy_attempts
        _, a, _, e, fe, wall = run(args.accuracy_workers, total, account, args.accuracy_limit)
        emit(accuracy_line(impl, version, args.accuracy_limit, 3600, args.accuracy_workers,
                           args.accuracy_attempts, a, e, fe, wall, args.style, args.round))


# --------------------------------------------------------------------------------------------------
# zae-limiter (asyncio, aiobotocore)
# --------------------------------------------------------------------------------------------------

def run_zae(args: argparse.Namespace) -> None:
    asyncio.run(_run_zae(args))


async def _run_zae(args: argparse.Namespace) -> None:
    # The environment zae-limiter's docs export for a local endpoint (docs/benchmarks.md: `test` keys,
    # us-east-1); DynamoDB Local runs with -sharedDb, so the keys select nothing.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository
    from zae_limiter import __version__ as version

    impl = "zae-limiter"
    stack = f"peer-zae-{uuid.uuid4().hex[:8]}"
    # `Repository.open()` provisions through CloudFormation when the table is missing, which DynamoDB
    # Local does not have; the library's own `create_table()` makes the same table directly.
    bootstrap = Repository(name=stack, region=REGION, endpoint_url=args.endpoint,
                           _skip_deprecation_warning=True)
    await bootstrap.create_table()
    await bootstrap.close()
    if args.style == "stored":
        # Stored limits: the builder, `set_limits` once per entity, then `acquire(..., consume=...)`
        # with no limits argument (the limits are resolved from the table and cached by the library).
        repo = await Repository.builder().stack(stack).region(REGION).endpoint_url(args.endpoint).build()
    else:
        # Inline limits, the package README's example: `Repository.open`, then
        # `acquire(..., limits=[...], consume=...)` on every call.
        repo = await Repository.open(stack=stack, region=REGION, endpoint_url=args.endpoint)
    counter = CallCounter()
    meter = CapacityMeter(ask=args.capacity == "reported")
    # Observe the repository's own aiobotocore client: one before-send event per HTTP attempt. The
    # meter's hooks are on the client only for the untimed metered pass (`metered_pass`), so the timed
    # decisions carry this counter alone (a no-op-sized handler; see the module docstring).
    client = await repo._get_client()
    client.meta.events.register("before-send.dynamodb", counter)
    limiter = RateLimiter(repository=repo)

    async def metered_pass(c: int, entity: str, extra: dict[str, Any]) -> None:
        meter.reset()
        meter.register(client.meta.events)
        meter.enabled = True
        try:
            await run(c, args.meter_decisions, entity, extra)
        finally:
            meter.enabled = False
            meter.unregister(client.meta.events)

    async def prepare(entity: str, limit: int) -> dict[str, Any]:
        limits = [Limit.per_hour("rph", limit)]
        if args.style == "stored":
            await limiter.set_limits(entity, limits, resource="bench-resource")
            return {}
        return {"limits": limits}

    async def run(concurrency: int, total: int, entity: str,
                  extra: dict[str, Any]) -> tuple[list[float], int, int, int, str | None, float]:
        async def acquire() -> None:
            async with limiter.acquire(entity_id=entity, resource="bench-resource",
                                       consume={"rph": 1}, **extra):
                pass

        return await run_async(concurrency, total, acquire, RateLimitExceeded)

    if args.client_cost:
        log(f"{impl} ({args.style} limits) client cost ({args.decisions} decisions)")
        stub_control(args.endpoint, "record")
        entity = f"entity-cc-{uuid.uuid4().hex[:6]}"
        extra = await prepare(entity, (args.decisions + args.warmup) * 10)
        await run(1, max(args.warmup, 1), entity, extra)
        stub_control(args.endpoint, "replay")
        cpu0 = cpu_now()
        result = await run(1, args.decisions, entity, extra)
        cpu1 = cpu_now()
        emit(client_cost_line(impl, version, args, result, cpu0, cpu1, stub_control(args.endpoint, "stats")))
        await repo.close()
        return

    for c in args.concurrency:
        log(f"{impl} ({args.style} limits) acquire at concurrency {c} ({args.decisions} decisions)")
        entity = f"entity-c{c}-{uuid.uuid4().hex[:6]}"
        extra = await prepare(entity, (args.decisions + args.warmup) * 10)
        await run(c, args.warmup, entity, extra)
        counter.reset()
        samples, a, r, e, fe, wall = await run(c, args.decisions, entity, extra)
        calls = counter.snapshot()
        await metered_pass(c, entity, extra)
        restore(counter, calls)
        emit(throughput_line(impl, version, c, samples, a, r, e, fe, wall, counter, args.warmup,
                             meter.metered(args.meter_decisions), args.style, args.round))

    if args.accuracy_workers > 0:
        log(f"{impl} accuracy (limit {args.accuracy_limit}, {args.accuracy_workers} x {args.accuracy_attempts})")
        entity = f"entity-accuracy-{uuid.uuid4().hex[:6]}"
        total = args.accuracy_workers * args.accuracy_attempts
        extra = await prepare(entity, args.accuracy_limit)
        _, a, _, e, fe, wall = await run(args.accuracy_workers, total, entity, extra)
        emit(accuracy_line(impl, version, args.accuracy_limit, 3600, args.accuracy_workers,
                           args.accuracy_attempts, a, e, fe, wall, args.style, args.round))
    await repo.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer", choices=["zae", "rlp", "tpy"], required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--decisions", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    p.add_argument("--accuracy-limit", type=int, default=50)
    p.add_argument("--accuracy-workers", type=int, default=16)
    p.add_argument("--accuracy-attempts", type=int, default=20)
    p.add_argument("--round", type=int, default=1, help="round number written into every line")
    p.add_argument("--style", default=None,
                   help="zae: `inline` (acquire(limits=...), the package README) or `stored` "
                        "(builder + set_limits + acquire(consume=...)); rlp: `decorator`; "
                        "tpy: `threads` or `asyncio`")
    p.add_argument("--meter-decisions", type=int, default=200,
                   help="decisions of the untimed metered pass after each timed run (write/read units)")
    p.add_argument("--capacity", choices=["reported", "computed"], default="reported",
                   help="reported: ask ReturnConsumedCapacity=TOTAL on non-transactional calls; "
                        "computed: every call from its request shape")
    p.add_argument("--client-cost", action="store_true",
                   help="client cost at c = 1: --endpoint is a record-then-replay stub (turnstile-bench "
                        "stub); one `client_cost` line with CPU us and p50 per decision")
    args = p.parse_args()
    if args.style is None:
        args.style = {"zae": "inline", "rlp": "decorator", "tpy": "threads"}[args.peer]
    # rate-limiter-py logs a warning for every refill that loses a race; keep errors only.
    logging.basicConfig(level=logging.ERROR)
    {"zae": run_zae, "rlp": run_rlp, "tpy": run_tpy}[args.peer](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
