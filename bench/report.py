#!/usr/bin/env python3
"""Aggregates the JSON lines of one `make bench` (or `make bench-smoke`) run into BENCHMARKS.md and
bench/results.json, and checks the invariants that must never rot.

    python3 bench/report.py --dir bench/out/full --md BENCHMARKS.md --json bench/results.json
    python3 bench/report.py --dir bench/out/smoke --check            # smoke: assert, write nothing

Inputs in --dir (written by scripts/bench.sh): ours.jsonl (turnstile-bench ours), peer-zae.jsonl and
peer-rlp.jsonl (bench/peers/drive.py), coldstart.jsonl (turnstile-bench cold-start), meta.json (the
command, dates, profile, phase durations, tool versions, and why a phase was skipped).
Standard library only, so it runs with any python3.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, Callable

PEERS = {"zae": "zae-limiter", "rlp": "rate-limiter-py", "tpy": "turnstile-py"}
STYLES = {"inline": "inline limits: `Repository.open`, `acquire(..., limits=[...], consume=...)` (the package README)",
          "stored": "stored limits: `Repository.builder()...build()`, `set_limits`, `acquire(..., consume=...)`",
          "decorator": "the `rate_limit` decorator (its README)",
          "threads": "our Python package: the `rate_limit` decorator (rate-limiter-py's README), `c` threads",
          "asyncio": "our Python package: `async with fungible_limiter(...)`, `c` asyncio tasks"}
# The smoke run fails when our driver's zae-limiter c = 1 p50 and zae_readme.py's differ by more.
README_CHECK_RATIO = 1.5

# DynamoDB on-demand prices (the same numbers as bench/peers/capacity.py, which the drivers use).
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
import capacity  # noqa: E402  (standard library only)


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        raw = raw.strip()
        if not raw:
            continue
        try:
            out.append(json.loads(raw))
        except json.JSONDecodeError as e:
            raise SystemExit(f"report: {path}:{n} is not JSON ({e})")
    return out


def machine() -> dict[str, Any]:
    m: dict[str, Any] = {"nproc": os.cpu_count(), "kernel": platform.release(),
                         "python": platform.python_version()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                m["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                m["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    return m


def f(x: Any, digits: int = 2) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def at_most(target: str, value: float | None, limit: float, evidence: Callable[[], str]) -> dict[str, str]:
    """A target row for a measured `value` that must stay at most `limit` (`evidence` is asked only
    when it was measured)."""
    if value is None:
        return {"target": target, "status": "not measured", "evidence": "—"}
    return {"target": target, "status": "met" if value <= limit else "NOT MET", "evidence": evidence()}


def fx(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}×"


def ops(d: dict[str, int] | None) -> str:
    """Total calls by operation over the timed decisions."""
    if not d:
        return "—"
    return ", ".join(f"{k} {v:,}" for k, v in d.items())


def answer(posted: str | None) -> str:
    """A short summary of what a cold-started handler posted: status and message, or the policy effect."""
    if not posted:
        return "—"
    try:
        v = json.loads(posted)
    except json.JSONDecodeError:
        v = None
    if isinstance(v, dict):
        if "statusCode" in v:
            body = v.get("body") or ""
            try:
                b = json.loads(body)
                body = b.get("message", body) if isinstance(b, dict) else body
            except (json.JSONDecodeError, TypeError):
                pass
            return f"{v['statusCode']}: {str(body)[:70]}".replace("|", "\\|")
        if "policyDocument" in v:
            st = (v["policyDocument"].get("Statement") or [{}])[0]
            return f"{st.get('Effect', '?')} ({v.get('principalId', '')})"
        if "action" in v and isinstance(v.get("tokens"), list):
            return f"{v['action']} {len(v['tokens'])} token(s) of {v.get('resource_id', '?')}"
    text = posted[:90] + ("…" if len(posted) > 90 else "")
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


# Write units per decision the reservation paths promise (issue 25, decision 0101), at any
# coordinate size: a target in the report and an invariant of the smoke run. The bound row has no
# `resourceId`, so no write reaches the resource index.
RESERVATION_WCU = {"reservation-lifecycle": 4.0, "reservation-at-1000-live": 3.0}

WORKLOAD_NOTES = {
    "floor": "`floor`: one `UpdateItem` `ADD n 1` if `n < limit` on one item, straight through the SDK.",
    "fungible-get-token": "`fungible-get-token`: `FungibleLimiter::get_token` on one shared bucket (no limit row, "
                          "default quota): 1 `UpdateItem` conditioned on the bucket state last seen; a lost race "
                          "returns the winner's state and costs one more `UpdateItem`.",
    "fungible-get-token-per-account": "`fungible-get-token-per-account` (diagnostic): the same call, one bucket "
                                      "per task (warmed in set-up), so no two decisions race.",
    "reservation-lifecycle": "`reservation-lifecycle`: `get_reservation`, `create_token`, then `delete`, as a "
                             "caller uses a unique resource: 4 single-item writes and 1 `GetItem`, no transaction "
                             "(decision 0101): reserve in one shard of the coordinate's ledger under its share, "
                             "the bound row in the resource's partition, the read of the resource's ended marker "
                             "(no write unit), then the shard entry; the release removes the shard entry. Every "
                             "ledger shard holds at most 16 entries (under 1 KB) and the bound row has no "
                             "`resourceId` (no resource-index write), so each write is 1 WCU: 4 per decision.",
    "reservation-at-1000-live": "`reservation-at-1000-live`: `get_reservation` then `create_token` on a "
                                "coordinate already holding 1,000 live reservations (filled before the run): "
                                "the same 3 writes and 1 read as the lifecycle's first three quarters: 3 WCU, "
                                "whatever the coordinate holds.",
    "gcra-spend": "`gcra-spend`: `kv::Limiter::spend` of cost 1 on one bucket: 1 `UpdateItem` "
                  "(`tat = tat + inc` under `tat <= admitLimit`, re-evaluated by DynamoDB, so concurrent "
                  "spends do not race).",
    "cached-rejection": "`cached-rejection`: `get_token` on a bucket of 1 token per hour already emptied in "
                        "set-up: refused from the limiter's memory (`Source::RejectionCache`), 0 calls.",
    "websocket-handlers": "`websocket-handlers`: `authorizer::handle` (1 `BatchGetItem`, tenant cached) → "
                          "`connect::handle` with the authorizer's context (2 conditional `UpdateItem`s: tenant count, "
                          "then session; decision 0306) → `disconnect::handle` (3 `UpdateItem`s: session with its release token, then "
                          "the charged counter and the token's cleanup; decision 2206), events from "
                          "`events/`, 32 sessions of "
                          "one tenant, a new connection id per decision; no Lambda runtime or network between them.",
}


# Why a path can come out below the floor (written from what the runs showed; decision 0802).
FLOOR_NOTES: list[str] = []


def workload_notes(data: dict[str, Any]) -> list[str]:
    return [WORKLOAD_NOTES[s["workload"]] for s in data["specs"]
            if s["available"] and s["workload"] in WORKLOAD_NOTES]


def build(dirpath: Path) -> dict[str, Any]:
    meta = json.loads((dirpath / "meta.json").read_text()) if (dirpath / "meta.json").exists() else {}
    ours = read_lines(dirpath / "ours.jsonl")
    specs, seen = [], set()
    for l in ours:
        if l.get("kind") == "spec" and l["workload"] not in seen:
            seen.add(l["workload"])
            specs.append(l)
    peers = {k: read_lines(dirpath / f"peer-{k}.jsonl") for k in PEERS}
    cold = read_lines(dirpath / "coldstart.jsonl")
    throughput = [l for l in ours if l.get("kind") == "throughput"]
    accuracy = [l for l in ours if l.get("kind") == "accuracy"]
    for lines in peers.values():
        throughput += [l for l in lines if l.get("kind") == "throughput"]
        accuracy += [l for l in lines if l.get("kind") == "accuracy"]
    def one_json(name: str) -> Any:
        try:
            return json.loads((dirpath / name).read_text() or "null") if (dirpath / name).exists() else None
        except json.JSONDecodeError:
            return None
    readings = read_lines(dirpath / "zae-readme.jsonl")
    readme = None
    if readings:
        readme = dict(readings[0])
        for k in ("p50_ms", "p99_ms", "decisions_per_s"):
            vals = [r[k] for r in readings]
            readme[k] = median(vals)
            readme[f"{k}_spread"] = [min(vals), max(vals)]
        readme["rounds"] = len(readings)
        readme["round"] = None
    readme_unprimed = one_json("zae-readme-unprimed.json")
    zae_check = [l for l in read_lines(dirpath / "zae-check.jsonl") if l.get("kind") == "throughput"]
    cc_raw = [l for l in read_lines(dirpath / "client-cost.jsonl") if l.get("kind") == "client_cost"]
    return {"meta": meta, "specs": specs, "raw": throughput, "throughput": aggregate(throughput),
            "accuracy": accuracy, "cold_start": [l for l in cold if l.get("kind") == "cold_start"],
            "peers_run": {PEERS[k]: bool(v) for k, v in peers.items()}, "zae_readme": readme,
            "zae_readme_unprimed": readme_unprimed, "zae_check": zae_check, "zae_readme_rounds": readings,
            "sim": [l for l in read_lines(dirpath / "sim.jsonl") if l.get("kind") == "sim"],
            "client_cost_raw": cc_raw, "client_cost": aggregate_cc(cc_raw)}


def sim_section(data: dict[str, Any]) -> list[str]:
    """The simulation of DynamoDB's per-item write ceiling (turnstile-bench sim, issue 15)."""
    out = ["## Simulation: one limit past one item's write ceiling", ""]
    sims = data.get("sim") or []
    if not sims:
        out += [f"Not run — {data['meta'].get('skipped', {}).get('sim', 'not run')}.", ""]
        return out
    s0 = sims[0]
    out += [
        f"`turnstile-bench sim` puts `turnstile-faultproxy` in front of DynamoDB Local and throttles every item "
        f"past **{s0['per_item_ceiling']} writes/s** with DynamoDB's own `ThrottlingException` (a model of the "
        f"~1,000 WCU/s per partition, scaled down so it runs in seconds). One GCRA limit of "
        f"**{s0['limit_per_sec']}/s** (burst {s0['limit_per_sec']}) is offered **{s0['offered_per_sec']} "
        f"decisions/s** open loop in real time, unsharded and with `shards: N` (decision 1500); the client does "
        f"not retry throttles (the limiter tries another shard). *Ideal* is one GCRA bucket of the same rate with "
        f"no ceiling, on the very same arrival instants; *over-admission* = admitted beyond the ideal (must be 0); "
        f"*extra refusals* = (ideal − admitted) / offered. Arithmetic for real DynamoDB: docs/scaling.md.",
        "",
        "| shards | seconds | offered | admitted | admitted/s | × one item's ceiling | ideal | over-admission "
        "| refused | throttled (decisions) | writes throttled | extra refusals | calls/decision | WCU/decision |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sims:
        out.append(f"| {r['shards']} | {f(r['seconds'])} | {r['offered']} | {r['admitted']} | {f(r['admitted_per_sec'], 1)} "
                   f"| {f(r['ceiling_multiple'], 1)} | {r['ideal_admitted']} | {r['over_admission']} | {r['refused']} "
                   f"| {r['throttled']} | {r['writes_throttled']} | {f(r['extra_refusal_pct'], 1)} % "
                   f"| {f(r['calls_per_decision'])} | {f(r['write_units_per_decision'])} |")
    out += ["", "Unsharded, the one item still takes its ceiling of writes (WCU/decision × offered ≈ "
            f"{s0['per_item_ceiling']} writes/s), but fewer admissions: a spend whose guess of the bucket's case "
            "was stale needs a second write, which the ceiling then throttles. Sharded, a throttled or refusing "
            "shard sends the decision to a second one (the calls/decision above 1).", ""]
    return out


def readme_check(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Our driver's zae-limiter c = 1 p50 (each usage style) beside zae_readme.py's on a fresh emulator.
    A round's driver reading and its readme reading run one after the other, so they share the host's
    load; the check judges the median of those per-pair ratios (a busy minute of a shared host moves both
    sides of a pair, while medians taken over the whole run can pair a busy reading with a quiet one).
    The medians of each side are reported beside it."""
    rd = data.get("zae_readme")
    out = []
    if not rd:
        return out
    readme_by_round = {r.get("round"): r["p50_ms"] for r in data.get("zae_readme_rounds", [])}
    for r in data["throughput"]:
        if r["implementation"] == "zae-limiter" and r["concurrency"] == 1:
            # `r` aggregates the rounds' rows, so `same` holds at least one reading.
            rows = [x for x in data["raw"] + data.get("zae_check", [])
                    if x["implementation"] == "zae-limiter" and x["concurrency"] == 1 and x.get("style") == r.get("style")]
            same = [x["p50_ms"] for x in rows]
            pairs = [ratio(x["p50_ms"], readme_by_round[x.get("round")]) for x in rows
                     if x.get("round") in readme_by_round]
            pairs = [q for q in pairs if q is not None]
            ours = median(same)
            q = median(pairs) if pairs else ratio(ours, rd["p50_ms"])
            out.append({"style": r.get("style"), "ours_p50_ms": ours, "readme_p50_ms": rd["p50_ms"],
                        "ours_readings": len(same), "readme_readings": rd.get("rounds", 1),
                        "ours_p50_spread": [min(same), max(same)], "pair_ratios": pairs,
                        "ratio": q, "within": q is not None and 1 / README_CHECK_RATIO <= q <= README_CHECK_RATIO})
    return out


def pair_list(c: dict[str, Any]) -> str:
    return ", ".join(f"{q:.2f}" for q in c["pair_ratios"]) or "none"


def find(rows: list[dict[str, Any]], impl: str, workload: str, c: int,
         style: str | None = None) -> dict[str, Any] | None:
    for r in rows:
        if (r["implementation"] == impl and r["workload"] == workload and r["concurrency"] == c
                and (style is None or r.get("style") == style)):
            return r
    return None


def median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


MEDIAN_FIELDS = ["p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms", "decisions_per_s", "calls_per_decision",
                 "write_units_per_decision", "read_units_per_decision", "wall_s"]
SUM_FIELDS = ["decisions", "admitted", "refused", "errors", "over_1s"]


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (implementation, style, workload, concurrency): the median of its rounds for every
    measured number, sums for the counts, and the spread (min, max over the rounds) of p50, p99 and
    decisions/s."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["implementation"], r.get("style"), r["workload"], r["concurrency"]), []).append(r)
    out = []
    for (impl, style, workload, c), rs in groups.items():
        rs = sorted(rs, key=lambda r: r.get("round", 1))
        a: dict[str, Any] = {k: v for k, v in rs[0].items() if k not in MEDIAN_FIELDS + SUM_FIELDS}
        for k in MEDIAN_FIELDS:
            a[k] = median([r.get(k) for r in rs])
        for k in SUM_FIELDS:
            a[k] = sum(r.get(k) or 0 for r in rs)
        a["rounds"] = len(rs)
        a["round"] = None
        for k in ("p50_ms", "p99_ms", "decisions_per_s"):
            vals = [r[k] for r in rs if r.get(k) is not None]
            a[f"{k}_spread"] = [min(vals), max(vals)] if vals else None
        by_op: dict[str, int] = {}
        for r in rs:
            for op, n in (r.get("calls_by_operation") or {}).items():
                by_op[op] = by_op.get(op, 0) + n
        a["calls_by_operation"] = dict(sorted(by_op.items()))
        a["first_error"] = next((r.get("first_error") for r in rs if r.get("first_error")), None)
        a["usd_per_million_decisions"] = usd(a)
        out.append(a)
    order = {impl: i for i, impl in enumerate(["turnstile", *PEERS.values()])}
    out.sort(key=lambda r: (order.get(r["implementation"], 9), r.get("style") or "", r["concurrency"]))
    return out


CC_MEDIAN_FIELDS = ["cpu_us_per_decision", "user_us_per_decision", "sys_us_per_decision", "p50_ms", "p90_ms",
                    "mean_ms", "calls_per_decision", "request_bytes_per_decision", "response_bytes_per_decision"]
CC_SUM_FIELDS = ["decisions", "admitted", "refused", "errors", "stub_misses"]
# The client-cost targets (issue 25): ours within this multiple of the floor's client CPU, and the
# Python peers at least this many times ours.
CC_FLOOR_RATIO = 1.2
CC_PEER_FACTOR = 10.0


def aggregate_cc(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (implementation, style, workload) of the client-cost phase: the median of its
    rounds for every measured number, sums for the counts, the spread of CPU and p50."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["implementation"], r.get("style"), r["workload"]), []).append(r)
    out = []
    for rs in groups.values():
        a: dict[str, Any] = {k: v for k, v in rs[0].items() if k not in CC_MEDIAN_FIELDS + CC_SUM_FIELDS}
        for k in CC_MEDIAN_FIELDS:
            a[k] = median([r.get(k) for r in rs])
        for k in CC_SUM_FIELDS:
            a[k] = sum(r.get(k) or 0 for r in rs)
        for k in ("cpu_us_per_decision", "p50_ms"):
            vals = [r[k] for r in rs if r.get(k) is not None]
            a[f"{k}_spread"] = [min(vals), max(vals)] if vals else None
        a["rounds"], a["round"] = len(rs), None
        a["first_error"] = next((r.get("first_error") for r in rs if r.get("first_error")), None)
        out.append(a)
    order = {impl: i for i, impl in enumerate(["turnstile", *PEERS.values()])}
    out.sort(key=lambda r: (order.get(r["implementation"], 9), r.get("style") or ""))
    return out


def cc_targets(data: dict[str, Any]) -> list[dict[str, str]]:
    """Client cost (issue 25): each single-call workload's client CPU per decision within 1.2x the
    floor's, and each Python peer's at least 10x ours."""
    cc = data.get("client_cost") or []
    if not cc:
        return []
    out = []
    ours = {r["workload"]: r for r in cc if r["implementation"] == "turnstile"}
    floor = ours.get("floor")
    single = [s["workload"] for s in data["specs"] if s["single_call"] and s["workload"] != "floor" and s["available"]]
    for wl in single:
        r = ours.get(wl)
        q = ratio(r["cpu_us_per_decision"], floor["cpu_us_per_decision"]) if r and floor else None
        out.append(at_most(f"client CPU/decision ≤ {CC_FLOOR_RATIO:g} × floor for `{wl}`", q, CC_FLOOR_RATIO,
                           lambda: f"{f(r['cpu_us_per_decision'], 1)} vs {f(floor['cpu_us_per_decision'], 1)} "
                                   f"µs: {fx(q)} (p50 {f(r['p50_ms'], 3)} vs {f(floor['p50_ms'], 3)} ms)"))
    # turnstile-py is ours (the same core from Python): it has targets of its own (python_targets).
    peers = [r for r in cc if r["implementation"] not in ("turnstile", "turnstile-py")]
    for wl in single:
        r = ours.get(wl)
        if not r or not peers:
            continue
        ev = [f"{peer_label(p)} {fx(ratio(p['cpu_us_per_decision'], r['cpu_us_per_decision']))}" for p in peers]
        ok = all((ratio(p["cpu_us_per_decision"], r["cpu_us_per_decision"]) or 0) >= CC_PEER_FACTOR for p in peers)
        out.append({"target": f"client CPU/decision of `{wl}` ≥ {CC_PEER_FACTOR:g}× below each Python peer's",
                    "status": "met" if ok else "NOT MET", "evidence": "; ".join(ev)})
    return out


def cc_section(data: dict[str, Any]) -> list[str]:
    """The client-cost table (decision 0806)."""
    cc = data.get("client_cost") or []
    out = ["## Client cost, apart from the emulator", ""]
    if not cc:
        out += [f"Not run — {data['meta'].get('skipped', {}).get('client_cost', 'not run')}.", ""]
        return out
    meta = data["meta"]
    out += [
        "Every implementation at c = 1 against a record-then-replay stub (`turnstile-bench stub`, another process; "
        f"ours built with the `{meta.get('client_cost_profile', meta.get('profile'))}` profile): "
        f"its {f(meta.get('client_cost_warmup'))} warm-up decisions go through to DynamoDB Local while the stub records "
        f"each answer, then its {f(meta.get('client_cost_decisions'))} timed decisions get those real answers back at "
        "once (byte for byte, `x-amz-crc32` included), so each stays on its success path and the time and CPU are the "
        "client's alone. *CPU* is user + sys of the client process (`getrusage(RUSAGE_SELF)` around the timed "
        "decisions) ÷ decisions; *p50* is per decision in the client (it includes a loopback round trip to the "
        "stub). *Calls* and *bytes* are counted by the stub; *misses* are requests no recorded answer matched "
        "(forwarded instead; 0 means the timed run never reached the emulator). Median of the "
        f"{f(meta.get('client_cost_rounds', meta.get('rounds')))} interleaved rounds, spread in "
        "brackets; *× floor* is CPU over the floor's.",
        "",
        "| implementation | workload | CPU µs/decision | user / sys µs | × floor | p50 ms | calls/decision "
        "| request / response bytes per decision | decisions | errors | misses |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    floor = next((r for r in cc if r["implementation"] == "turnstile" and r["workload"] == "floor"), None)
    for r in cc:
        sp = r.get("cpu_us_per_decision_spread")
        spr = f" ({sp[0]:,.1f}–{sp[1]:,.1f})" if sp and r.get("rounds", 1) > 1 else ""
        sp50 = r.get("p50_ms_spread")
        spr50 = f" ({sp50[0]:,.3f}–{sp50[1]:,.3f})" if sp50 and r.get("rounds", 1) > 1 else ""
        q = ratio(r["cpu_us_per_decision"], floor["cpu_us_per_decision"]) if floor else None
        out.append(f"| {peer_label(r)} | {r['workload']} | {f(r['cpu_us_per_decision'], 1)}{spr} "
                   f"| {f(r['user_us_per_decision'], 1)} / {f(r['sys_us_per_decision'], 1)} | {fx(q)} "
                   f"| {f(r['p50_ms'], 3)}{spr50} | {f(r['calls_per_decision'])} "
                   f"| {f(r['request_bytes_per_decision'], 0)} / {f(r['response_bytes_per_decision'], 0)} "
                   f"| {f(r['decisions'])} | {f(r['errors'])} | {f(r['stub_misses'])} |")
    out.append("")
    notes = [n for wl, n in CC_NOTES.items() if any(r["workload"] == wl for r in cc)]
    out += notes + ([""] if notes else [])
    return out


# What a client-cost row includes beyond the client (written from the workloads' code).
CC_NOTES = {
    "local-stack-connects": "- `local-stack-*`: the client process also runs the local stack (HTTP/WebSocket "
                            "gateway and handlers) in process, so its CPU is the whole stack's, not a client's.",
    "websocket-handlers-conflicts": "- `*-conflicts`: the client process also runs the fault proxy (in process, in "
                                    "front of the stub), whose CPU is counted with the client's.",
}


# The decide API's all-in price per million decisions (issue 37): DynamoDB from the measured write and
# read units (capacity's prices), plus Lambda and the front door at the AWS list prices below
# (us-east-1, the same region as capacity's). Lambda's billed duration cannot be measured without
# AWS: it is the handler's CPU plus its DynamoDB round trip; DECIDE_BILLED_MS is an assumption,
# stated beside the figure with what each further millisecond costs.
LAMBDA_USD_PER_MILLION_REQUESTS = 0.20
LAMBDA_USD_PER_GB_SECOND_ARM64 = 0.0000133334
HTTP_API_USD_PER_MILLION_REQUESTS = 1.00  # first 300 million a month
FUNCTION_URL_USD_PER_MILLION_REQUESTS = 0.0  # billed as the Lambda request only
DECIDE_BILLED_MS = 10
DECIDE_USD_TARGET = 1.00
DECIDE_CPU_FACTOR = 2.0
DECIDE_ROUTES = [("function URL (AWS_IAM)", FUNCTION_URL_USD_PER_MILLION_REQUESTS),
                 ("HTTP API `ANY /v1/{proxy+}`", HTTP_API_USD_PER_MILLION_REQUESTS)]


def lambda_memory_mb() -> int | None:
    """The functions' memory as template.yaml's Globals set it (the decide function keeps it)."""
    text = (Path(__file__).resolve().parent.parent / "template.yaml").read_text()
    glob = text.split("\nGlobals:", 1)[-1].split("\nResources:", 1)[0]
    for line in glob.splitlines():
        if line.strip().startswith("MemorySize:"):
            return int(line.split(":", 1)[1].strip())
    return None


def decide_usd(spend: dict[str, Any] | None) -> list[tuple[str, float | None, str]]:
    """(route, $ per million spends all in, how it adds up) for each front door."""
    mem = lambda_memory_mb()
    db = usd(spend) if spend else None
    if db is None or mem is None:
        return [(route, None, "not measured") for route, _ in DECIDE_ROUTES]
    per_ms = mem / 1024 * 0.001 * LAMBDA_USD_PER_GB_SECOND_ARM64 * 1e6
    duration = DECIDE_BILLED_MS * per_ms
    out = []
    for route, door in DECIDE_ROUTES:
        total = db + LAMBDA_USD_PER_MILLION_REQUESTS + duration + door
        out.append((route, total, f"DynamoDB ${db:.3f} + Lambda requests ${LAMBDA_USD_PER_MILLION_REQUESTS:.2f} + "
                                  f"duration ${duration:.3f} ({DECIDE_BILLED_MS} ms at {mem} MB arm64; ${per_ms:.4f} per "
                                  f"further ms) + front door ${door:.2f}"))
    return out


def decide_parts(data: dict[str, Any]) -> dict[str, Any]:
    tp = [r for r in data["throughput"] if r["implementation"] == "turnstile"]
    cc = {r["workload"]: r for r in data.get("client_cost") or [] if r["implementation"] == "turnstile"}
    return {"spend": find(tp, "turnstile", "local-stack-decide-spend", 1),
            "handler": cc.get("decide-handler-spend"), "library": cc.get("gcra-spend")}


def decide_targets(data: dict[str, Any]) -> list[dict[str, str]]:
    """The decide API's targets: 1 call and 1 WCU per spend, the handler's CPU within 2x the library
    call's, the cheapest route within $1.00 per million all in."""
    d = decide_parts(data)
    out = []
    sp = d["spend"]
    if sp is None:
        out.append({"target": "1 call and 1 WCU per decide API spend", "status": "not measured", "evidence": "—"})
    else:
        ok = abs(sp["calls_per_decision"] - 1) < 1e-9 and abs((sp.get("write_units_per_decision") or 0) - 1) < 1e-9
        out.append({"target": "1 call and 1 WCU per decide API spend", "status": "met" if ok else "NOT MET",
                    "evidence": f"`local-stack-decide-spend` at c = 1: {f(sp['calls_per_decision'])} calls, "
                                f"{f(sp.get('write_units_per_decision'))} WCU per decision"})
    h, lib = d["handler"], d["library"]
    q = ratio(h["cpu_us_per_decision"], lib["cpu_us_per_decision"]) if h and lib else None
    out.append(at_most(f"decide handler CPU/decision ≤ {DECIDE_CPU_FACTOR:g} × the in-process client's",
                       q, DECIDE_CPU_FACTOR,
                       lambda: f"`decide-handler-spend` {f(h['cpu_us_per_decision'], 1)} vs `gcra-spend` "
                               f"{f(lib['cpu_us_per_decision'], 1)} µs: {fx(q)}"))
    routes = [r for r in decide_usd(sp) if r[1] is not None]
    best = min(routes, key=lambda r: r[1]) if routes else None
    out.append(at_most(f"cheapest decide route ≤ ${DECIDE_USD_TARGET:.2f} per million decisions all in",
                       best[1] if best else None, DECIDE_USD_TARGET,
                       lambda: f"{best[0]}: ${best[1]:.2f} ({best[2]})"))
    return out


def decide_section(data: dict[str, Any]) -> list[str]:
    """The decide API beside the library call it serves."""
    d = decide_parts(data)
    tp = [r for r in data["throughput"] if r["implementation"] == "turnstile"]
    out = ["## The decide API beside the library", "",
           "The same spend three ways: `gcra-spend` is the library call in process; `decide-handler-spend` is the "
           "decide API's handler alone (the payload 2.0 event's JSON read, `decide_api::handle`, the answer written "
           "as JSON: what the Lambda runtime runs, no HTTP); `local-stack-decide-spend` (and `-take`) go through "
           "`turnstile dev`'s HTTP API with a kept-alive connection per worker, so they add the local gateway and "
           "an HTTP client, all in one process. CPU from the client-cost phase (the stub answers DynamoDB).", "",
           "| workload | p50 ms c = 1 / 8 / 32 | p99 ms c = 1 / 8 / 32 | decisions/s c = 1 / 8 / 32 | calls/decision "
           "| WCU/decision | CPU µs/decision |",
           "|---|---|---|---|---:|---:|---:|"]
    cc = {r["workload"]: r for r in data.get("client_cost") or [] if r["implementation"] == "turnstile"}
    for wl in ["gcra-spend", "decide-handler-spend", "local-stack-decide-spend", "fungible-get-token-per-account",
               "local-stack-decide-take"]:
        rows = [find(tp, "turnstile", wl, c) for c in (1, 8, 32)]
        if not any(rows):
            continue
        col = lambda k, dg=2: " / ".join(f(r[k], dg) if r else "—" for r in rows)
        first = next(r for r in rows if r)
        out.append(f"| `{wl}` | {col('p50_ms')} | {col('p99_ms')} | {col('decisions_per_s', 0)} "
                   f"| {f(first['calls_per_decision'])} | {f(first.get('write_units_per_decision'))} "
                   f"| {f(cc[wl]['cpu_us_per_decision'], 1) if wl in cc else '—'} |")
    out += ["", "Per million warm spends, all in (DynamoDB + Lambda + the front door), at AWS list prices "
            f"({capacity.PRICE_REGION.split(',')[0]}): Lambda ${LAMBDA_USD_PER_MILLION_REQUESTS:.2f} per million requests "
            f"and ${LAMBDA_USD_PER_GB_SECOND_ARM64} per GB-second on arm64; HTTP API "
            f"${HTTP_API_USD_PER_MILLION_REQUESTS:.2f} per million requests; a function URL adds nothing to the "
            f"Lambda request. **The billed duration ({DECIDE_BILLED_MS} ms) is an assumption**: the handler's CPU is "
            "measured above, its DynamoDB round trip in AWS is not.", "",
            "| route | $ per million decisions | how it adds up |", "|---|---:|---|"]
    for route, total, how in decide_usd(d["spend"]):
        out.append(f"| {route} | {'—' if total is None else f'${total:.2f}'} | {how} |")
    out.append("")
    return out


def usd(r: dict[str, Any]) -> float | None:
    w, rd = r.get("write_units_per_decision"), r.get("read_units_per_decision")
    if w is None and rd is None:
        return None
    return capacity.usd_per_million_decisions(w or 0.0, rd or 0.0)


def spread(r: dict[str, Any], k: str, digits: int = 2) -> str:
    sp = r.get(f"{k}_spread")
    if not sp or r.get("rounds", 1) < 2:
        return ""
    return f" ({sp[0]:,.{digits}f}–{sp[1]:,.{digits}f})"


def short_source(src: str | None) -> str:
    """The capacity source in a few words (the full text is in results.json)."""
    if not src:
        return "—"
    if src.startswith("shared::dynamo"):
        return "our meter in the timed run: DynamoDB's report; rules for transactions and refused writes"
    return src


def peer_label(r: dict[str, Any]) -> str:
    return r["implementation"] + (f" ({r['style']})" if r.get("style") else "")


def targets(data: dict[str, Any]) -> list[dict[str, str]]:
    """Each target of issue #8 with its status: met / NOT MET / not yet measurable, and why."""
    out = []
    specs = {s["workload"]: s for s in data["specs"]}
    tp = [r for r in data["throughput"] if r["implementation"] == "turnstile"]
    pending = [s["workload"] for s in data["specs"] if not s["available"]]

    # Calls per decision.
    for s in data["specs"]:
        if s["expected_calls"] is None:
            continue
        name = f"calls/decision = {s['expected_calls']:g} for `{s['workload']}`"
        rows = [r for r in tp if r["workload"] == s["workload"]]
        if not s["available"]:
            out.append({"target": name, "status": "not yet measurable", "evidence": "workload not yet available"})
        elif rows:
            exact = lambda r: abs(r["calls_per_decision"] - s["expected_calls"]) < 1e-9
            ev = "measured " + ", ".join(f"{round(r['calls_per_decision'], 3)} at c = {r['concurrency']}" for r in rows)
            if all(exact(r) for r in rows):
                status = "met"
            elif s.get("races") and all(exact(r) for r in rows if r["concurrency"] == 1):
                status = "met at c = 1 only"
                ev += (f"; uncontended it is {s['expected_calls']:g} as designed; with c tasks on one shared item "
                       "each lost race (a write conditioned on the state seen: the bucket, or a ledger shard "
                       "filled meanwhile) costs one more UpdateItem")
            else:
                status = "NOT MET"
            out.append({"target": name, "status": status, "evidence": ev})

    # Write units per decision of the reservation paths (issue 25): flat in the coordinate's size.
    for w, most in RESERVATION_WCU.items():
        rows = [r for r in tp if r["workload"] == w and r.get("write_units_per_decision") is not None]
        name = f"WCU/decision ≤ {most:g} for `{w}`"
        if not rows:
            out.append({"target": name, "status": "not yet measurable", "evidence": "not run"})
            continue
        ok = all(r["write_units_per_decision"] <= most + 1e-9 for r in rows if r["concurrency"] == 1)
        out.append({"target": name + " at c = 1", "status": "met" if ok else "NOT MET",
                    "evidence": "measured " + ", ".join(
                        f"{round(r['write_units_per_decision'], 3)} at c = {r['concurrency']}" for r in rows)
                    + "; at c > 1 a caller meeting a shard filled meanwhile pays a failed conditional write"})

    # p50 within 1.2x the floor for every single-call workload (the floor itself excluded).
    for s in data["specs"]:
        if not s["single_call"] or s["workload"] == "floor":
            continue
        name = f"p50 ≤ 1.2 × floor for `{s['workload']}`"
        if not s["available"]:
            out.append({"target": name, "status": "not yet measurable", "evidence": "workload not yet available"})
            continue
        ev, ok = [], True
        for r in tp:
            if r["workload"] != s["workload"]:
                continue
            fl = find(tp, "turnstile", "floor", r["concurrency"])
            q = ratio(r["p50_ms"], fl["p50_ms"] if fl else None)
            extra = (f" ({r['calls_per_decision']:.2f} calls/decision)"
                     if s.get("races") and r["concurrency"] > 1 else "")
            ev.append(f"c={r['concurrency']}: {fx(q)}{extra}")
            ok = ok and q is not None and q <= 1.2
        out.append({"target": name, "status": "met" if ok and ev else "NOT MET", "evidence": "; ".join(ev)})

    # Ahead of zae-limiter at 8 and 32 (our limiter workloads, not the floor).
    zae = [r for r in data["throughput"] if r["implementation"] == "zae-limiter"]
    limiters = [s["workload"] for s in data["specs"]
                if s["peer_workload"] and s["workload"] != "floor" and s["available"]]
    name = "ahead of zae-limiter in decisions/s and p99 at c = 8 and 32"
    if not zae:
        out.append({"target": name, "status": "not yet measurable", "evidence": "zae-limiter was not run"})
    elif not limiters:
        wanted = [s["workload"] for s in data["specs"] if s["peer_workload"] and s["workload"] != "floor"]
        out.append({"target": name, "status": "not yet measurable",
                    "evidence": f"our limiter workloads ({', '.join(wanted)}) are not yet available; "
                                "the floor is compared below as the lower bound"})
    else:
        for w in limiters:
            ev, ok = [], True
            for c, style in [(c, st) for c in (8, 32) for st in sorted({z.get("style") for z in zae})]:
                ours, theirs = find(tp, "turnstile", w, c), find(zae, "zae-limiter", "acquire", c, style)
                if not ours or not theirs:
                    continue
                dps, p99 = (ours["decisions_per_s"] > theirs["decisions_per_s"], ours["p99_ms"] < theirs["p99_ms"])
                ok = ok and dps and p99
                ev.append(f"c={c} vs {style}: {fx(ratio(ours['decisions_per_s'], theirs['decisions_per_s']))} decisions/s"
                          f"{'' if dps else ' (behind)'}, p99 {f(ours['p99_ms'])} vs {f(theirs['p99_ms'])} ms"
                          f"{'' if p99 else ' (behind)'}")
            out.append({"target": f"{name} for `{w}`", "status": "met" if ok and ev else "NOT MET",
                        "evidence": "; ".join(ev)})

    # Zero over-admission for ours.
    acc = [a for a in data["accuracy"] if a["implementation"] == "turnstile"]
    bad = [a for a in acc if a["over_admission"] != 0]
    over_tp = [r for r in tp if r["admitted"] + r["refused"] + r["errors"] != r["decisions"]]
    out.append({"target": "0 over-admission everywhere (ours)",
                "status": "met" if acc and not bad and not over_tp else ("NOT MET" if acc else "not yet measurable"),
                "evidence": "; ".join(
                    f"{w}: admitted " + ", ".join(f"{a['admitted']}/{a['allowed']}" for a in acc if a["workload"] == w)
                    + " (admitted/allowed per round)" for w in dict.fromkeys(a["workload"] for a in acc))
                            + (f" (accuracy not yet measurable for {', '.join(w for w in pending if specs[w]['accuracy'])})"
                               if any(specs[w]['accuracy'] for w in pending) else "")})
    out += cc_targets(data)
    out += decide_targets(data)
    out += python_targets(data)
    return out


def python_targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 40's targets for our Python package against zae-limiter, the Python peer: 0
    over-admission; client CPU per decision at least 5x below; decisions/s at least 2x at c = 8."""
    out: list[dict[str, Any]] = []
    acc = [a for a in data["accuracy"] if a["implementation"] == "turnstile-py"]
    if acc:
        bad = [a for a in acc if a["over_admission"] != 0]
        out.append({"target": "turnstile-py: 0 over-admission", "status": "NOT MET" if bad else "met",
                    "evidence": ", ".join(f"{a.get('style')}: {a['admitted']}/{a['allowed']}" for a in acc)
                                + " (admitted/allowed)"})
    cc = data.get("client_cost") or []
    tpy_cc = [r for r in cc if r["implementation"] == "turnstile-py"]
    zae_cc = [r for r in cc if r["implementation"] == "zae-limiter"]
    if tpy_cc and zae_cc:
        best_zae = min(r["cpu_us_per_decision"] for r in zae_cc)
        ev, ok = [], True
        for r in tpy_cc:
            q = ratio(best_zae, r["cpu_us_per_decision"])
            ok = ok and q is not None and q >= 5
            ev.append(f"{r.get('style')}: {f(r['cpu_us_per_decision'])} µs vs zae-limiter's best "
                      f"{f(best_zae)} µs ({fx(q)} below)")
        out.append({"target": "turnstile-py: client CPU per decision at least 5x below zae-limiter's",
                    "status": "met" if ok else "NOT MET", "evidence": "; ".join(ev)})
    tp = data["throughput"]
    tpy8 = [r for r in tp if r["implementation"] == "turnstile-py" and r["concurrency"] == 8]
    zae8 = [r for r in tp if r["implementation"] == "zae-limiter" and r["concurrency"] == 8]
    if tpy8 and zae8:
        best_zae = max(r["decisions_per_s"] for r in zae8)
        ev, ok = [], True
        for r in tpy8:
            q = ratio(r["decisions_per_s"], best_zae)
            ok = ok and q is not None and q >= 2
            ev.append(f"{r.get('style')}: {f(r['decisions_per_s'])}/s vs zae-limiter's best {f(best_zae)}/s ({fx(q)})")
        # What DynamoDB Local itself serves at c = 8: a target above the floor's ratio is out of
        # reach on this endpoint whatever the client does.
        floor8 = [r for r in tp if r["implementation"] == "turnstile" and r.get("workload") == "floor"
                  and r["concurrency"] == 8]
        if floor8:
            qf = ratio(floor8[0]["decisions_per_s"], best_zae)
            ev.append(f"the floor (one bare `UpdateItem` from Rust) {f(floor8[0]['decisions_per_s'])}/s "
                      f"({fx(qf)}): the most any client gets from DynamoDB Local here")
        out.append({"target": "turnstile-py: decisions/s at least 2x zae-limiter's at c = 8",
                    "status": "met" if ok else "NOT MET", "evidence": "; ".join(ev)})
    return out


def markdown(data: dict[str, Any], mach: dict[str, Any]) -> str:
    meta = data["meta"]
    L: list[str] = []
    w = L.append
    w("# Benchmarks")
    w("")
    w(f"Generated by `{meta.get('command', 'make bench')}` on {meta.get('finished_utc', '?')} (UTC); "
      "do not edit by hand — rerun the command. Raw numbers: [`bench/results.json`](bench/results.json). "
      "How it is measured and why: [bench/README.md](bench/README.md) and `docs/decisions/080*.md`.")
    w("")
    w("**Read these numbers as relative, not absolute.** Everything runs on one small machine against "
      "DynamoDB Local (a Java process on the same cores), not DynamoDB: absolute latencies are far from "
      "what AWS gives, and the load average below says how busy the machine was. What carries over is the "
      "comparison under identical conditions: same endpoint, same machine, same run.")
    w("")
    w("## Machine and run")
    w("")
    w("| | |")
    w("|---|---|")
    for k, v in [("CPU", mach.get("cpu")), ("cores (nproc)", mach.get("nproc")),
                 ("memory", f"{mach.get('memory_gib')} GiB"), ("kernel", mach.get("kernel")),
                 ("load average at start (1/5/15 min)", meta.get("loadavg_start")),
                 ("load average at end", meta.get("loadavg_end")),
                 ("rustc", meta.get("rustc")), ("build profile (harness)", meta.get("profile")),
                 ("build profile (cold-start binaries)", meta.get("coldstart_profile", meta.get("profile"))),
                 ("build profile (client-cost harness)", meta.get("client_cost_profile", meta.get("profile"))),
                 ("Java (DynamoDB Local)", meta.get("java")), ("DynamoDB Local", meta.get("ddb_local")),
                 ("Python (peers)", meta.get("python")),
                 ("rounds (interleaved; each unit on a fresh DynamoDB Local)", meta.get("rounds", 1)),
                 ("priming requests per fresh emulator", meta.get("prime_requests")),
                 ("decisions per run (ours / peers)", f"{f(meta.get('decisions'))} / {f(meta.get('peer_decisions', meta.get('decisions')))}"),
                 ("warm-up decisions per run", meta.get("warmup")),
                 ("concurrency", meta.get("concurrency")),
                 ("started / finished (UTC)", f"{meta.get('started_utc')} / {meta.get('finished_utc')}"),
                 ("phase durations (s)", ", ".join(f"{k} {v}" for k, v in meta.get("durations", {}).items()))]:
        w(f"| {k} | {f(v)} |")
    w("")

    w("## Targets (issue #8)")
    w("")
    w("| target | status | evidence |")
    w("|---|---|---|")
    for t in targets(data):
        w(f"| {t['target']} | **{t['status']}** | {t['evidence']} |")
    w("")

    tp = data["throughput"]
    ours = [r for r in tp if r["implementation"] == "turnstile"]
    w("## Turnstile workloads")
    w("")
    rounds = meta.get("rounds", 1)
    w(f"Each workload ran {rounds} time(s), interleaved with the peers (all our workloads, zae-limiter in each usage "
      "style, rate-limiter-py, then again), every time on a DynamoDB Local started fresh for it and primed the same way "
      "(`turnstile-bench prime`: the same requests of every kind on a scratch table). Numbers are the **median of the "
      "rounds**; in brackets the spread (lowest–highest round). Closed loop: `c` tasks each send the next decision when "
      "the previous one returns, on one bucket (one item) unless the workload's note below says otherwise. Latency is "
      "per decision, measured in the client. Calls are counted by `shared::dynamo::CallCounter` on the client (one "
      "per HTTP attempt, retries included), summed over the rounds. Write and read units per decision and dollars: "
      "see *Cost per decision* below.")
    w("")
    w("| workload | c | decisions | p50 ms | p99 ms | max ms | decisions > 1 s | decisions/s | calls/decision | calls by operation (total) | WCU/decision | RCU/decision | $/M decisions | admitted | refused | errors |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for s in data["specs"]:
        rows = [r for r in ours if r["workload"] == s["workload"]]
        if not s["available"]:
            w(f"| {s['workload']} | — | — | *not yet available* | | | | | | | | | | | | |")
            continue
        for r in rows:
            w(f"| {s['workload']} | {r['concurrency']} | {f(r['decisions'])} | {f(r['p50_ms'])}{spread(r, 'p50_ms')} "
              f"| {f(r['p99_ms'])}{spread(r, 'p99_ms')} | {f(r['max_ms'])} | {f(r.get('over_1s'))} "
              f"| {f(r['decisions_per_s'], 0)}{spread(r, 'decisions_per_s', 0)} | {f(r['calls_per_decision'], 3)} "
              f"| {ops(r['calls_by_operation'])} | {f(r.get('write_units_per_decision'))} "
              f"| {f(r.get('read_units_per_decision'))} | {f(r.get('usd_per_million_decisions'), 3)} "
              f"| {f(r['admitted'])} | {f(r['refused'])} | {f(r['errors'])} |")
    w("")
    failed = [r for r in ours if r["errors"]]
    if failed:
        w("**Errors** (decisions that ended in an error instead of an answer; counted in *errors*, not in "
          "*admitted* or *refused*):")
        w("")
        for r in failed:
            w(f"- `{r['workload']}` at c = {r['concurrency']}: {r['errors']} of {f(r['decisions'])} — first: "
              f"{r.get('first_error') or '?'}")
        w("")
    def bullets(title: str, items: list[str]) -> None:
        if items:
            w(title)
            w("")
            L.extend(f"- {i}" for i in items)
            w("")

    bullets("What each workload does (one decision), and what its calls are:", workload_notes(data))
    bullets("Not yet available (no numbers are shown for them, and none are invented):",
            [f"`{s['workload']}` — {s['title']}: {s['pending_reason']}." for s in data["specs"]
             if not s["available"]])

    w("## Concurrent accuracy: limit 50 in one window, 16 workers × 20 attempts")
    w("")
    w("All 320 attempts start together on one fresh bucket. *Allowed* is the limit plus whatever the "
      "window refills during the test (a one-hour window: under one token). Over-admission = admitted − allowed. "
      "For `reservation-lifecycle` the limit is the coordinate's capacity (the test binds and does not "
      "release); for "
      "`websocket-handlers` it is the tenant's `tenantPerMinute` (a fixed one-minute window; the test starts "
      "early in a minute so no window boundary falls inside it) and *admitted* counts `$connect` 200s.")
    w("")
    w("| implementation | workload | round | admitted | allowed | over-admission | errors | wall s |")
    w("|---|---|---:|---:|---:|---:|---:|---:|")
    for a in data["accuracy"]:
        impl = a["implementation"] + (f" {a['version']}" if a.get("version") else "") + (
            f" ({a['style']})" if a.get("style") else "")
        w(f"| {impl} | {a['workload']} | {a.get('round', 1)} | {a['admitted']} | {a['allowed']} | **{a['over_admission']}** "
          f"| {a['errors']} | {f(a['wall_s'])} |")
    for s in data["specs"]:
        if s["accuracy"] and not s["available"]:
            w(f"| turnstile | {s['workload']} | | *not yet available* | | | | |")
    w("")

    w("## Peers, same conditions")
    w("")
    w("Each peer through its own public API (bench/peers/drive.py), in the same rounds, each time on a fresh DynamoDB "
      "Local primed like ours: one admission of cost 1 on one hot bucket, limit far above the budget. zae-limiter "
      "in two usage styles its documentation shows — "
      + "; ".join(f"*{k}*: {v}" for k, v in STYLES.items() if k != "decorator")
      + " — `c` asyncio tasks on one limiter; rate-limiter-py 0.3.0: the `rate_limit` decorator, `c` threads. Calls "
      "are counted by a botocore `before-send` hook on the peer's own client (one per HTTP attempt); write and read "
      "units by hooks in the driver process, in a separate untimed pass (see *Cost per decision*). Median of the "
      "rounds, spread in brackets.")
    w("")
    for key, impl in PEERS.items():
        rows = [r for r in tp if r["implementation"] == impl]
        if not rows:
            why = data["meta"].get("skipped", {}).get(key, "not run")
            w(f"**{impl}**: not run — {why}.")
            w("")
            continue
        for style in dict.fromkeys(r.get("style") for r in rows):
            srows = [r for r in rows if r.get("style") == style]
            w(f"**{impl} {srows[0].get('version', '')}** — {STYLES.get(style, style or '')}")
            w("")
            w("| c | decisions | p50 ms | p99 ms | max ms | decisions > 1 s | decisions/s | calls/decision | calls by operation (total) | WCU/decision | RCU/decision | $/M decisions | admitted | errors |")
            w("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
            for r in srows:
                w(f"| {r['concurrency']} | {f(r['decisions'])} | {f(r['p50_ms'])}{spread(r, 'p50_ms')} "
                  f"| {f(r['p99_ms'])}{spread(r, 'p99_ms')} | {f(r['max_ms'])} "
                  f"| {f(r.get('over_1s'))} | {f(r['decisions_per_s'], 0)}{spread(r, 'decisions_per_s', 0)} "
                  f"| {f(r['calls_per_decision'], 3)} | {ops(r['calls_by_operation'])} "
                  f"| {f(r.get('write_units_per_decision'))} | {f(r.get('read_units_per_decision'))} "
                  f"| {f(r.get('usd_per_million_decisions'), 3)} | {f(r['admitted'])} | {f(r['errors'])} |")
            w("")
    checks = readme_check(data)
    rd = data.get("zae_readme")
    w("### Checking the zae-limiter reading")
    w("")
    if rd:
        w(f"`bench/peers/zae_readme.py` drives zae-limiter {rd.get('version', '')} with nothing of ours (no hooks, no "
          f"counters, no shared code): {rd.get('usage')}, c = 1, {rd.get('warmup')} untimed then {rd.get('decisions')} "
          "timed decisions, as a unit of every round (on a DynamoDB Local started fresh for it and primed like every "
          "unit) — so only the driver differs. When the rounds are fewer than the check's pairs "
          f"(`BENCH_README_PAIRS`, {data['meta'].get('readme_pairs', 1)} in this run), further pairs run after them "
          "(our driver at c = 1 in the *stored* style, then this script, each on a fresh primed emulator), so one "
          f"busy moment of the host cannot decide the check. Median of its {rd.get('rounds', 1)} reading(s): p50 "
          f"**{f(rd['p50_ms'])} ms**{spread(rd, 'p50_ms')}, {f(rd['decisions_per_s'], 0)} decisions/s. Each driver reading "
          "runs right beside a reading of this script (same round or pair), so both share the host's load at that "
          "moment; the smoke run fails when the median of those per-pair ratios, in the same usage style (*stored*), "
          f"is beyond {README_CHECK_RATIO}× either way.")
        ru = data.get("zae_readme_unprimed")
        if ru:
            w("")
            w(f"The same script on a fresh emulator **not** primed (what a first try from outside sees: the emulator's "
              f"JIT still cold), once at the end of the run, measured p50 {f(ru['p50_ms'])} ms, "
              f"{f(ru['decisions_per_s'], 0)} decisions/s: beside the primed reading above, what the emulator's state "
              "alone does to the number on this machine in this run (reported, not checked).")
        w("")
        w(f"| our driver's style | readings | our c = 1 p50 ms (median) | zae_readme.py p50 ms (median of "
          f"{rd.get('rounds', 1)}) | ratio per adjacent pair | median of pairs | within {README_CHECK_RATIO}× |")
        w("|---|---:|---:|---:|---|---:|---|")
        for c in checks:
            sp = c["ours_p50_spread"]
            sp_txt = f" ({f(sp[0])}–{f(sp[1])})" if c["ours_readings"] > 1 else ""
            w(f"| {c['style']} | {c['ours_readings']} | {f(c['ours_p50_ms'])}{sp_txt} | {f(c['readme_p50_ms'])}"
              f"{spread(rd, 'p50_ms')} | {pair_list(c)} | {fx(c['ratio'])} | {'yes' if c['within'] else '**no**'} |")
    else:
        w("Not run (zae-limiter was not run, or `zae_readme.py` failed).")
    w("")

    comparable = [s for s in data["specs"] if s["peer_workload"] and s["available"]]
    peer_impls = [impl for impl in PEERS.values() if any(r["implementation"] == impl for r in tp)]
    if comparable and peer_impls:
        w("### Ratios (Turnstile ÷ peer for decisions/s; peer ÷ Turnstile for latency and cost: above 1× means Turnstile is ahead)")
        w("")
        w("The floor is not a rate limiter — it is the cheapest possible conditional write, the lower bound "
          "any DynamoDB limiter pays; its rows show how far each peer is from that bound. The limiter rows "
          "compare like with like: one admission of cost 1 on one hot bucket. Each ratio is taken between the medians "
          "of the rounds (the spreads are in the tables above).")
        w("")
        w("| ours | peer | c | decisions/s ratio | p50 ratio | p99 ratio | $/M decisions ratio |")
        w("|---|---|---:|---:|---:|---:|---:|")
        for s in comparable:
            for impl in peer_impls:
                styles = list(dict.fromkeys(r.get("style") for r in tp if r["implementation"] == impl))
                for style in styles:
                    for r in [r for r in ours if r["workload"] == s["workload"]]:
                        p = find(tp, impl, "acquire", r["concurrency"], style)
                        if not p:
                            continue
                        w(f"| {s['workload']} | {peer_label(p)} | {r['concurrency']} "
                          f"| {fx(ratio(r['decisions_per_s'], p['decisions_per_s']))} "
                          f"| {fx(ratio(p['p50_ms'], r['p50_ms']))} | {fx(ratio(p['p99_ms'], r['p99_ms']))} "
                          f"| {fx(ratio(p.get('usd_per_million_decisions'), r.get('usd_per_million_decisions')))} |")
        w("")

    w("## Cost per decision (DynamoDB on-demand)")
    w("")
    w(f"Write units (WCU) and read units (RCU) per decision, and dollars per million decisions at DynamoDB on-demand "
      f"prices: **${capacity.USD_PER_MILLION_WRITE_UNITS} per million write request units, "
      f"${capacity.USD_PER_MILLION_READ_UNITS} per million read request units** ({capacity.PRICE_REGION}; AWS's price "
      f"list in effect since {capacity.PRICE_DATE}, when on-demand throughput prices were halved; storage, streams and "
      "backups are not included). How the units are obtained: non-transactional calls ask DynamoDB for "
      "`ReturnConsumedCapacity=TOTAL` in the bench (ours through the meter in `shared::dynamo`, during the timed run; the "
      "peers' through botocore hooks in the driver process, their library unchanged, during a separate untimed pass "
      "of 200 decisions at the same concurrency, so their timed runs carry no meter) and take what DynamoDB Local reports — it reports "
      "single-item calls as DynamoDB does, index writes included — never below the documented minimum of the "
      "request's shape (it reports 0 for a Query that matches nothing; DynamoDB bills 0.5). **Transactions are computed**, "
      "because DynamoDB Local under-reports them (a 5-item `TransactWriteItems` of small items reports 2.0; DynamoDB "
      "bills 10): per item, per started 1 KB written (4 KB read), **×2 for a transaction**. The calculators (Rust in "
      "`shared::dynamo`, Python in `bench/peers/capacity.py`) are checked against the same cases "
      "(`bench/capacity-cases.json`) by a Rust unit test and by every bench run. Median of the rounds.")
    w("")
    w("| implementation | workload | c | calls/decision | of which transactional | WCU/decision | RCU/decision | $/M decisions | how the units were obtained |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in tp:
        if r["concurrency"] != 1:
            continue
        n = r["decisions"] or 1
        tx = sum(v for k, v in (r.get("calls_by_operation") or {}).items() if k.startswith("Transact")) / n
        w(f"| {peer_label(r)} | {r['workload']} | {r['concurrency']} | {f(r['calls_per_decision'], 3)} | {f(tx, 3)} "
          f"| {f(r.get('write_units_per_decision'))} | {f(r.get('read_units_per_decision'))} "
          f"| {f(r.get('usd_per_million_decisions'), 3)} | {short_source(r.get('capacity_source'))} |")
    w("")
    w("c = 1 is the uncontended cost; the tables above give it at every concurrency (on one hot bucket a lost race "
      "is one more conditional write, and a failed conditional write is billed like a successful one).")
    w("")

    w("## The floor")
    w("")
    w("`floor` is the cheapest correct request for the same decision: one conditional `UpdateItem` (`ADD n :one` if "
      "`n < :limit`) on the client every Turnstile path uses, asking for nothing extra (no `ReturnValues`, no "
      "`ReturnConsumedCapacity`; the bench's meter adds the same `ReturnConsumedCapacity` to it as to every path of ours). "
      "A path can still come out below it, since a p50 difference of a few percent is within one run's noise; where "
      "one does by more than the rounds' spread, the reason is given below the table.")
    w("")
    w("| c | floor p50 ms | " + " | ".join(f"{s['workload']} p50 ms" for s in data["specs"]
                                             if s["single_call"] and s["workload"] != "floor" and s["available"]) + " |")
    single = [s["workload"] for s in data["specs"] if s["single_call"] and s["workload"] != "floor" and s["available"]]
    w("|---:|---:|" + "---:|" * len(single))
    for fl in [r for r in ours if r["workload"] == "floor"]:
        cells = []
        for wl in single:
            r = find(ours, "turnstile", wl, fl["concurrency"])
            cells.append("—" if not r else f"{f(r['p50_ms'])} ({fx(ratio(r['p50_ms'], fl['p50_ms']))})")
        w(f"| {fl['concurrency']} | {f(fl['p50_ms'])}{spread(fl, 'p50_ms')} | " + " | ".join(cells) + " |")
    w("")
    below = []
    for fl in [r for r in ours if r["workload"] == "floor"]:
        for wl in single:
            r = find(ours, "turnstile", wl, fl["concurrency"])
            if r and r["p50_ms"] is not None and fl["p50_ms"] and r["p50_ms"] < fl["p50_ms"]:
                lo_fl = (fl.get("p50_ms_spread") or [fl["p50_ms"]])[0]
                hi_r = (r.get("p50_ms_spread") or [r["p50_ms"]])[1]
                below.append(f"`{wl}` at c = {fl['concurrency']} ({f(r['p50_ms'])} vs {f(fl['p50_ms'])} ms; "
                             + ("within the rounds' spread" if hi_r >= lo_fl else "outside the rounds' spread") + ")")
    if below:
        w("Below the floor's median p50 in this run: " + "; ".join(below) + ".")
    else:
        w("No path's median p50 is below the floor's at any concurrency in this run.")
    for line in FLOOR_NOTES:
        w(line)
    w("")

    L.extend(cc_section(data))
    L.extend(decide_section(data))

    w("## Cold start of each function binary")
    w("")
    cold = data["cold_start"]
    if not cold:
        w(f"Not run — {data['meta'].get('skipped', {}).get('cold_start', 'not run')}.")
    else:
        prof = data["meta"].get("coldstart_profile", data["meta"].get("profile", "?"))
        note = ("" if prof == "release" else
                f" These binaries are the `{prof}` build, not the shipping `release` build (fat LTO): sizes and "
                "start times of the shipped binaries can differ; `BENCH_COLDSTART_PROFILE=release make bench` measures those.")
        w("Time from spawning the process until it has handled its first invocation (posted a response or an "
          "error to a minimal Lambda Runtime API on loopback), after one untimed start so the binary is in the "
          "page cache. *Init* is process start → first `GET /next`. Every handler is real: each start handles "
          "the function's representative sample event from `events/<function>/` against DynamoDB Local tables "
          "the harness seeded (tenant `tenant-1`, its live session `session-1`; before each `$disconnect` and "
          "`$default` start the sample's connection is admitted, before each token-remover start a token is bound "
          "to the sample's EMR cluster; the functions that close connections get a local Management API; the decide API runs as deployed with "
          "backend roles named, IAM callers bound by role session name). The reconciler is not timed: its first "
          "invocation waits out its grace (15 s at the least) by design. "
          "*Outcome* says whether the handler posted a response or an error; *answer* is what the last run posted." + note)
        w("")
        w("| function | size on disk | runs | init median ms | first invocation median ms | min | max | outcome | event | answer |")
        w("|---|---:|---:|---:|---:|---:|---:|---|---|---|")
        for c in cold:
            outs = sorted(set(c["outcomes"]))
            w(f"| {c['function']} | {c['size_bytes'] / 1024 / 1024:.1f} MiB | {c['runs']} | {f(c['init_ms_median'])} "
              f"| {f(c['first_invocation_ms_median'])} | {f(c['first_invocation_ms_min'])} "
              f"| {f(c['first_invocation_ms_max'])} | {', '.join(outs)} "
              f"| {Path(c['event']).parent.name + '/' + Path(c['event']).name if '/' in c['event'] else c['event']} "
              f"| {answer(c.get('posted'))} |")
    w("")
    # Hand-measured before/after comparisons of the shipped build (e.g. issue 13's size trim) are kept
    # in bench/coldstart-history.md so a rerun does not drop them.
    history = Path(__file__).parent / "coldstart-history.md"
    if history.is_file():
        w(history.read_text().rstrip())
        w("")
    for line in sim_section(data):
        w(line)
    # The random-fault-schedule soaks (`make soak`, decision 2300) take an hour and run apart from
    # `make bench`; their summaries are kept in bench/soak-history.md and quoted here.
    soaks = Path(__file__).parent / "soak-history.md"
    if soaks.is_file():
        w(soaks.read_text().rstrip())
        w("")
    w("## Caveats")
    w("")
    w("- DynamoDB Local shares the cores with the harness and the peers; it serialises writes to one item "
      "differently from DynamoDB's partitions, so hot-item numbers at high concurrency say more about the "
      "client than about DynamoDB.")
    w("- zae-limiter runs on aiobotocore with its default connection pool (10 connections; `Repository` takes "
      "no client config), so at c = 32 requests queue in its client for a connection; that is how the library "
      "ships. When some of its decisions wait far longer than the rest, the *decisions > 1 s* and *max* "
      "columns show how many and how long; waiting for a pooled connection is the likely cause, not isolated "
      "further here. rate-limiter-py is synchronous; each of its "
      "threads has its own boto3 resource. Both run under CPython's GIL in one process; ours is one Rust "
      "process on tokio's multi-threaded runtime.")
    w("- No measured Turnstile path uses a transaction any more (decisions 0101, 0306), so DynamoDB's "
      "`TransactionConflict`, which DynamoDB Local never produces, cannot add calls to them; the "
      "`*-conflicts` rows run the same paths behind `turnstile-faultproxy` with conflicts injected to show it.")
    w("- `fungible-get-token` on one hot bucket: `get_token` retries a lost race at once with the state the "
      "failed write returned (only transaction conflicts pause), so with c tasks on one bucket each round has "
      "one winner and a task can lose many rounds in a row; after 64 lost races it gives up with an error "
      "(\"contended: no definite outcome\"). Its calls/decision, its p99 and any *errors* above come from "
      "that; the per-account row is the same call without a shared bucket.")
    w("- The reservation rows write to ledger shards of at most 16 entries (decision 0101), so their WCU "
      "column is flat in the coordinate's size: the lifecycle's 4 and the 1,000-live row's 3 are what "
      "DynamoDB Local reports for these single-item writes (the bound row, in the resource's partition, "
      "has no `resourceId`, so the resource index is not written).")
    w("- The authorizer's pre-check reads the session and the tenant counter (`BatchGetItem`, strongly "
      "consistent, each under 4 KB): the 2 RCU per decision of the WebSocket rows.")
    w("- rate-limiter-py 0.3.0's `get_token` is a limit query, a conditional decrement and a separate refill "
      "write (its calls/decision above). Its source writes the refill time as `lastRefill` but reads it back "
      "as `last_refill`, so every call computes the refill from time 0 and refills the bucket to the limit; "
      "the accuracy table shows what that does under concurrency.")
    w("")
    return "\n".join(L)


def check(data: dict[str, Any]) -> list[str]:
    """The invariants the smoke run asserts (timing-independent)."""
    errs = []
    specs = {s["workload"]: s for s in data["specs"]}
    if not specs:
        errs.append("no workload specs in ours.jsonl (turnstile-bench ours did not run)")
    for s in specs.values():
        if s["available"] and not any(r["workload"] == s["workload"] and r["implementation"] == "turnstile"
                                      for r in data["throughput"]):
            errs.append(f"{s['workload']}: available but produced no throughput line")
    for r in data["raw"]:
        if r["implementation"] != "turnstile":
            continue
        s = specs.get(r["workload"])
        tag = f"{r['workload']} c={r['concurrency']} round {r.get('round', 1)}"
        if r["errors"]:
            errs.append(f"{tag}: {r['errors']} errors (first: {r['first_error']})")
        if s and s.get("refuses"):
            if r["refused"] != r["decisions"]:
                errs.append(f"{tag}: refused {r['refused']} of {r['decisions']} on a bucket known to be empty")
        elif r["admitted"] != r["decisions"]:
            errs.append(f"{tag}: admitted {r['admitted']} of {r['decisions']} under a limit above the budget")
        if s and s["expected_calls"] is not None:
            if s.get("races") and r["concurrency"] > 1:
                # Lost races on the shared item cost extra calls by design: reported, bounded below.
                if r["calls_per_decision"] < s["expected_calls"] - 1e-9:
                    errs.append(f"{tag}: {r['calls_per_decision']} calls/decision, below the {s['expected_calls']} "
                                "a decision needs")
            elif abs(r["calls_per_decision"] - s["expected_calls"]) > 1e-9:
                errs.append(f"{tag}: {r['calls_per_decision']} calls/decision, expected {s['expected_calls']}")
        most = RESERVATION_WCU.get(r["workload"])
        # Concurrent callers on one coordinate can meet a shard filled meanwhile: a failed
        # conditional write is billed too, so the promise is the uncontended one (c = 1).
        if most is not None and r["concurrency"] == 1 and (r.get("write_units_per_decision") or 0) > most + 1e-9:
            errs.append(f"{tag}: {r['write_units_per_decision']} WCU/decision, above {most:g}")
    for a in data["accuracy"]:
        if a["implementation"] == "turnstile" and (a["over_admission"] != 0 or a["errors"]):
            errs.append(f"accuracy {a['workload']}: over-admission {a['over_admission']}, errors {a['errors']}")
        if a["implementation"] == "turnstile" and a["admitted"] != a["allowed"]:
            errs.append(f"accuracy {a['workload']}: admitted {a['admitted']}, allowed {a['allowed']} (under-admission)")
    # Our Python package keeps the core's promises: exact, no errors, every admission under a limit
    # above the budget admitted, one call per warm decision (its driver's warm-up makes them warm).
    for r in data["raw"]:
        if r["implementation"] != "turnstile-py":
            continue
        tag = f"turnstile-py ({r.get('style')}) c={r['concurrency']} round {r.get('round', 1)}"
        if r["errors"]:
            errs.append(f"{tag}: {r['errors']} errors (first: {r['first_error']})")
        if r["admitted"] != r["decisions"]:
            errs.append(f"{tag}: admitted {r['admitted']} of {r['decisions']} under a limit above the budget")
        if r["concurrency"] == 1 and abs(r.get("calls_per_decision", 0) - 1.0) > 1e-9:
            errs.append(f"{tag}: {r.get('calls_per_decision')} calls/decision, expected 1 (warm)")
    for a in data["accuracy"]:
        if a["implementation"] == "turnstile-py" and (a["over_admission"] != 0 or a["errors"]
                                                       or a["admitted"] != a["allowed"]):
            errs.append(f"accuracy turnstile-py ({a.get('style')}): admitted {a['admitted']}, allowed "
                        f"{a['allowed']}, errors {a['errors']}")
    for key, impl in PEERS.items():
        if key in data["meta"].get("peers_requested", []) and not data["peers_run"].get(impl):
            errs.append(f"peer {impl}: requested but produced no lines (driver broken?)")
    for c in readme_check(data):
        if c["style"] == "stored" and not c["within"]:
            errs.append(f"zae-limiter c = 1 p50, our driver (stored) ÷ zae_readme.py: median of "
                        f"{len(c['pair_ratios'])} adjacent pairs {c['ratio']:.2f}x (pairs {pair_list(c)}; medians "
                        f"{c['ours_p50_ms']:.2f} vs {c['readme_p50_ms']:.2f} ms), outside {README_CHECK_RATIO}x")
    if "zae" in data["meta"].get("peers_requested", []) and not data.get("zae_readme"):
        errs.append("zae_readme.py produced no reading")
    for r in data["raw"]:
        if r["decisions"] and r.get("calls_per_decision", 0) > 0 and r.get("write_units_per_decision") is None \
                and r.get("read_units_per_decision") is None:
            errs.append(f"{peer_label(r)} {r['workload']} c={r['concurrency']}: no write/read units measured")
    for r in data.get("sim") or []:
        if r["over_admission"] != 0:
            errs.append(f"sim shards={r['shards']}: over-admitted {r['over_admission']} beyond the ideal")
        if r["shards"] > 1 and data["meta"].get("mode") == "full" and r["ceiling_multiple"] < 10:
            errs.append(f"sim shards={r['shards']}: {r['ceiling_multiple']:.1f}x one item's ceiling, below 10x")
    if data["meta"].get("mode") and not data.get("sim") and "sim" not in data["meta"].get("skipped", {}):
        errs.append("sim: produced no lines")
    errs += cc_check(data)
    for c in data["cold_start"]:
        if c["first_invocation_ms_median"] is None:
            errs.append(f"cold start {c['function']}: never handled an invocation ({c['outcomes']})")
        elif any(o != "response" for o in c["outcomes"]):
            # Every handler is real and its tables are seeded: an error answer is a failure now.
            errs.append(f"cold start {c['function']}: {c['outcomes']} (posted: {c.get('posted')})")
    return errs


def cc_check(data: dict[str, Any]) -> list[str]:
    """Client cost: every unit ran without errors on its success path, entirely from the stub."""
    errs = []
    raw = data.get("client_cost_raw") or []
    if data["meta"].get("mode") and not raw and "client_cost" not in data["meta"].get("skipped", {}):
        return ["client cost: produced no lines"]
    if not raw:
        return errs
    specs = {s["workload"]: s for s in data["specs"]}
    for s in specs.values():
        if s["available"] and not any(r["implementation"] == "turnstile" and r["workload"] == s["workload"] for r in raw):
            errs.append(f"client cost {s['workload']}: available but produced no line")
    for key, impl in PEERS.items():
        if key in data["meta"].get("peers_requested", []) and not any(r["implementation"] == impl for r in raw):
            errs.append(f"client cost {impl}: requested but produced no line")
    for r in raw:
        tag = f"client cost {peer_label(r)} {r['workload']} round {r.get('round', 1)}"
        s = specs.get(r["workload"]) if r["implementation"] == "turnstile" else None
        if r["errors"]:
            errs.append(f"{tag}: {r['errors']} errors (first: {r['first_error']})")
        if r["stub_misses"]:
            errs.append(f"{tag}: {r['stub_misses']} requests the stub had no answer for (reached the emulator)")
        if not r["decisions"] or r["cpu_us_per_decision"] <= 0:
            errs.append(f"{tag}: no CPU time measured over {r['decisions']} decisions")
        want = r["decisions"] if not (s and s.get("refuses")) else 0
        if r["admitted"] != want:
            errs.append(f"{tag}: admitted {r['admitted']} of {r['decisions']} (expected {want})")
        if s and s["expected_calls"] is not None and abs(r["calls_per_decision"] - s["expected_calls"]) > 1e-9:
            errs.append(f"{tag}: {r['calls_per_decision']} calls/decision against the stub, expected "
                        f"{s['expected_calls']} (off its success path?)")
    return errs


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True, type=Path)
    p.add_argument("--md", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--check", action="store_true", help="assert the invariants; non-zero exit on failure")
    args = p.parse_args()
    data = build(args.dir)
    mach = machine()
    if args.json:
        out = {"generated_by": data["meta"].get("command"), "machine": mach, "meta": data["meta"],
               "prices": {"usd_per_million_write_units": capacity.USD_PER_MILLION_WRITE_UNITS,
                          "usd_per_million_read_units": capacity.USD_PER_MILLION_READ_UNITS,
                          "region": capacity.PRICE_REGION, "in_effect_since": capacity.PRICE_DATE},
               "workloads": data["specs"], "throughput": data["throughput"], "rounds": data["raw"],
               "accuracy": data["accuracy"], "zae_readme": data.get("zae_readme"),
               "zae_readme_unprimed": data.get("zae_readme_unprimed"),
               "zae_readme_rounds": read_lines(args.dir / "zae-readme.jsonl"),
               "zae_readme_check": readme_check(data),
               "zae_check_pairs": data.get("zae_check"), "cold_start": data["cold_start"], "targets": targets(data),
               "sim": data.get("sim"), "client_cost": data.get("client_cost"),
               "client_cost_rounds": data.get("client_cost_raw")}
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    if args.md:
        args.md.write_text(markdown(data, mach) + "\n")
    status = 0
    for t in targets(data):
        print(f"report: target [{t['status']}] {t['target']} — {t['evidence']}", file=sys.stderr)
    for c in readme_check(data):
        print(f"report: zae-limiter c=1 p50, our driver ({c['style']}, median of {c['ours_readings']}) "
              f"{c['ours_p50_ms']:.2f} ms vs zae_readme.py (median of {c['readme_readings']}) "
              f"{c['readme_p50_ms']:.2f} ms; per adjacent pair {pair_list(c)}: median {c['ratio']:.2f}x", file=sys.stderr)
    if args.check:
        errs = check(data)
        for e in errs:
            print(f"report: FAILED {e}", file=sys.stderr)
        if errs:
            status = 1
        else:
            print("report: all invariants hold", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
