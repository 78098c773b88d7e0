"""DynamoDB capacity units from DynamoDB's documented rules, for the peer drivers (drive.py) and the
cross-check against Turnstile's Rust meter (`shared::dynamo`), standard library only.

The rules (DynamoDB Developer Guide, "Read/write capacity mode" and "Item sizes and formats"):

- item size = sum over attributes of (UTF-8 length of the name + size of the value); a String is its
  UTF-8 length, a Number about 1 byte per 2 significant digits + 1, Binary its length, Boolean and
  Null 1 byte, a List or Map 3 bytes + 1 byte per element + its elements (a Map's keys count like
  names), a set the sum of its elements;
- a write costs 1 write unit per started 1 KB of the item (the larger of the item before and after
  the write), at least 1; a failed conditional write costs the same;
- a read costs 1 read unit per started 4 KB, strongly consistent; 0.5 eventually consistent;
  a missing item still costs the minimum;
- a transaction costs twice as much per item: 2 write units per started KB of each written or
  condition-checked item, 2 read units per started 4 KB of each read item.

DynamoDB Local reports single-item capacity as DynamoDB does, but under-reports transactions (a
5-item TransactWriteItems of small items reports 2.0, DynamoDB bills 10), so transactions are
always computed here from the request, never taken from the response.

What the request alone cannot show: the size of the item an UpdateItem / DeleteItem /
ConditionCheck touches on the server. `units_from_request` counts it as one item under 1 KB (1 unit,
2 in a transaction), the same assumption Turnstile's Rust calculator (`shared::capacity`) makes; it
holds for every limiter benchmarked here (zae-limiter's bucket item is ~450 bytes). Reads whose size
is only in the answer are counted at the minimum (0.5 / 1 / 2 units).
"""

from __future__ import annotations

import base64
import math
from typing import Any

KB = 1024
READ_BLOCK = 4 * KB

TRANSACTIONAL = {"TransactWriteItems", "TransactGetItems"}
READ_OPS = {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}
WRITE_OPS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
# Operations that accept ReturnConsumedCapacity.
CAPACITY_OPS = READ_OPS | WRITE_OPS


def number_size(text: str) -> int:
    """Bytes of a Number: 1 per two significant digits (leading/trailing zeros trimmed) + 1."""
    t = text.strip().lstrip("+-")
    mantissa = t.split("e")[0].split("E")[0]
    digits = mantissa.replace(".", "").strip("0")
    # Zero still has one significant digit (as Turnstile's calculator counts it).
    return math.ceil(max(len(digits), 1) / 2) + 1


def _bytes_len(x: Any) -> int:
    if isinstance(x, (bytes, bytearray)):
        return len(x)
    # Wire JSON carries binary as base64 text.
    return len(base64.b64decode(x))


def value_size(v: dict[str, Any]) -> int:
    """Bytes of one attribute value in DynamoDB JSON (`{"S": "x"}`, `{"N": "1"}`, ...)."""
    (t, x), = v.items()
    if t == "S":
        return len(x.encode("utf-8"))
    if t == "N":
        return number_size(x)
    if t == "B":
        return _bytes_len(x)
    if t in ("BOOL", "NULL"):
        return 1
    if t == "SS":
        return sum(len(s.encode("utf-8")) for s in x)
    if t == "NS":
        return sum(number_size(n) for n in x)
    if t == "BS":
        return sum(_bytes_len(b) for b in x)
    if t == "L":
        return 3 + sum(1 + value_size(e) for e in x)
    if t == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(e) for k, e in x.items())
    raise ValueError(f"unknown attribute type {t!r}")


def item_size(item: dict[str, Any]) -> int:
    """Bytes of an item (or a key, or any map of attribute names to values)."""
    return sum(len(k.encode("utf-8")) + value_size(v) for k, v in item.items())


def write_units(size: int, transactional: bool = False) -> float:
    units = max(1, math.ceil(size / KB))
    return float(units * (2 if transactional else 1))


def read_units(size: int, consistent: bool = False, transactional: bool = False) -> float:
    blocks = max(1, math.ceil(size / READ_BLOCK))
    if transactional:
        return float(2 * blocks)
    return float(blocks) if consistent else blocks / 2


def _written_size(action: dict[str, Any]) -> int:
    """The size an action writes: the whole item for a Put; an Update, Delete or ConditionCheck is
    counted as one item under 1 KB (the item's size on the server is not in the request; every item
    of the limiters benchmarked here is under 1 KB) — the same assumption as `shared::capacity`."""
    if "Item" in action:
        return item_size(action["Item"])
    return 0


def units_from_request(op: str, params: dict[str, Any]) -> tuple[float, float]:
    """(write units, read units) of one request from its shape (see the module note on lower bounds)."""
    if op in ("PutItem", "UpdateItem", "DeleteItem"):
        return write_units(_written_size(params)), 0.0
    if op == "BatchWriteItem":
        w = 0.0
        for reqs in params.get("RequestItems", {}).values():
            for r in reqs:
                if "PutRequest" in r:
                    w += write_units(item_size(r["PutRequest"]["Item"]))
                else:
                    w += write_units(item_size(r["DeleteRequest"]["Key"]))
        return w, 0.0
    if op == "TransactWriteItems":
        w = 0.0
        for it in params.get("TransactItems", []):
            (_, action), = it.items()  # Put / Update / Delete / ConditionCheck
            w += write_units(_written_size(action), transactional=True)
        return w, 0.0
    if op == "GetItem":
        return 0.0, read_units(0, bool(params.get("ConsistentRead")))
    if op == "BatchGetItem":
        r = 0.0
        for spec in params.get("RequestItems", {}).values():
            r += len(spec.get("Keys", [])) * read_units(0, bool(spec.get("ConsistentRead")))
        return 0.0, r
    if op in ("Query", "Scan"):
        return 0.0, read_units(0, bool(params.get("ConsistentRead")))
    if op == "TransactGetItems":
        return 0.0, sum(read_units(0, transactional=True) for _ in params.get("TransactItems", []))
    return 0.0, 0.0


def reported_units(op: str, consumed: Any) -> tuple[float, float] | None:
    """(write, read) units from a response's ConsumedCapacity (a dict, or a list for batch and
    transaction calls); None when the response carries none."""
    if not consumed:
        return None
    items = consumed if isinstance(consumed, list) else [consumed]
    w = r = 0.0
    for c in items:
        if "WriteCapacityUnits" in c or "ReadCapacityUnits" in c:
            w += float(c.get("WriteCapacityUnits", 0.0))
            r += float(c.get("ReadCapacityUnits", 0.0))
        elif op in READ_OPS:
            r += float(c.get("CapacityUnits", 0.0))
        else:
            w += float(c.get("CapacityUnits", 0.0))
    return w, r


# DynamoDB on-demand prices, us-east-1, Standard table class, in effect since 2024-11-01 (AWS cut
# on-demand throughput prices by half that day). Dollars per million request units.
PRICE_DATE = "2024-11-01"
PRICE_REGION = "us-east-1, Standard table class, on-demand"
USD_PER_MILLION_WRITE_UNITS = 0.625
USD_PER_MILLION_READ_UNITS = 0.125


def usd_per_million_decisions(write_units_per_decision: float, read_units_per_decision: float) -> float:
    """Dollars per million decisions: units per decision x price per million units."""
    return (write_units_per_decision * USD_PER_MILLION_WRITE_UNITS
            + read_units_per_decision * USD_PER_MILLION_READ_UNITS)


def check_fixture(path: str) -> list[str]:
    """Runs the shared fixture (bench/capacity-cases.json) through this calculator; returns failures."""
    import json
    with open(path) as fh:
        cases = json.load(fh)["cases"]
    errs = []
    for c in cases:
        got = units_from_request(c["operation"], c["request"])
        want = (float(c["write_units"]), float(c["read_units"]))
        if got != want:
            errs.append(f"{c['name']}: computed {got}, expected {want}")
        if "item_size" in c:
            s = item_size(c["request"].get("Item") or c["request"].get("Key") or {})
            if s != c["item_size"]:
                errs.append(f"{c['name']}: item size {s}, expected {c['item_size']}")
    return errs


if __name__ == "__main__":
    import sys
    failures = check_fixture(sys.argv[1] if len(sys.argv) > 1 else "bench/capacity-cases.json")
    for f in failures:
        print(f"capacity: FAILED {f}", file=sys.stderr)
    print(f"capacity: {'all cases agree' if not failures else f'{len(failures)} case(s) differ'}",
          file=sys.stderr)
    sys.exit(1 if failures else 0)
