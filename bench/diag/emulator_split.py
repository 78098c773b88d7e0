#!/usr/bin/env python3
"""Where a request's time goes on DynamoDB Local: one conditional UpdateItem on one hot item in
several variants (the floor's, ReturnValues, the fungible and GCRA writes' shapes and attribute
counts), each timed against DynamoDB Local and against the record-then-replay stub
(`turnstile-bench stub`) with the same client. The difference of the p50s is the emulator's share
of that request shape (decision 0806). A diagnostic, not part of `make bench`:

    bench/peers/.venv-zae/bin/python bench/diag/emulator_split.py \
        --ddb http://127.0.0.1:8300 --stub http://127.0.0.1:PORT --n 500 --rounds 3

Uses only botocore (in the zae-limiter venv) and the standard library; prints one JSON line per
variant and round, then a table of medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
import uuid

import botocore.session

BIG = "9" * 30  # a :now / bound no state reaches: every condition holds, every write succeeds


def stub_control(stub: str, action: str) -> None:
    req = urllib.request.Request(f"{stub}/__stub/{action}", method="POST", data=b"")
    urllib.request.urlopen(req, timeout=10).read()


def variants(table: str, key: str) -> dict[str, dict]:
    k = {"pk": {"S": key}}
    floor = {"TableName": table, "Key": k, "UpdateExpression": "ADD n :one",
             "ConditionExpression": "attribute_not_exists(n) OR n < :limit",
             "ExpressionAttributeValues": {":one": {"N": "1"}, ":limit": {"N": BIG}}}
    fung_names = {"#t": "tokens", "#r": "lastRefill", "#l": "lastToken"}
    fungible = {"TableName": table, "Key": k, "UpdateExpression": "SET #t = #t - :one, #l = :now",
                "ConditionExpression": "#t >= :one AND #t <= :lim AND #r = :or",
                "ExpressionAttributeNames": fung_names,
                "ExpressionAttributeValues": {":one": {"N": "1"}, ":lim": {"N": BIG}, ":or": {"N": "1"},
                                              ":now": {"N": "1795725947769.508957"}},
                "ReturnValues": "ALL_NEW", "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    g_names = {"#burst": "burst", "#count": "count", "#ln": "limitName", "#lr": "lastRequestAt",
               "#period": "periodNs", "#rc": "requestCount", "#tat": "tat", "#tc": "throttleCount",
               "#ttl": "expiresAt", "#ua": "updatedAt", "#ver": "version", "#ws": "windowStart"}
    g_values = {":burst": {"N": "50"}, ":count": {"N": "50"}, ":ln": {"S": "BenchSpend"},
                ":inc": {"N": "72000000000"}, ":now": {"N": "1795725948487844843"}, ":one": {"N": "1"},
                ":lim": {"N": BIG}, ":period": {"N": "3600000000000"}, ":ttl": {"N": "1795729609"},
                ":zero": {"N": "0"}}
    gcra = {"TableName": table, "Key": k,
            "UpdateExpression": "SET #tat = #tat + :inc, #ttl = :ttl, #ua = :now, #burst = :burst, "
                                "#count = :count, #period = :period, #ln = :ln, #lr = :now, #ws = :now, "
                                "#tc = :zero ADD #ver :one, #rc :one",
            "ConditionExpression": "#tat <= :lim", "ExpressionAttributeNames": g_names,
            "ExpressionAttributeValues": g_values, "ReturnValues": "UPDATED_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    gcra_min = {"TableName": table, "Key": k, "UpdateExpression": "SET #tat = #tat + :inc, #ttl = :ttl",
                "ConditionExpression": "#tat <= :lim",
                "ExpressionAttributeNames": {"#tat": "tat", "#ttl": "expiresAt"},
                "ExpressionAttributeValues": {":inc": g_values[":inc"], ":ttl": g_values[":ttl"], ":lim": {"N": BIG}},
                "ReturnValues": "UPDATED_NEW", "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    out = {
        "floor": floor,
        "floor+ALL_NEW": dict(floor, ReturnValues="ALL_NEW"),
        "floor+ReturnConsumedCapacity": dict(floor, ReturnConsumedCapacity="TOTAL"),
        "fungible (3 attrs, ALL_NEW)": fungible,
        "fungible without ReturnValues": {x: v for x, v in fungible.items() if x != "ReturnValues"},
        "gcra (12 attrs, UPDATED_NEW)": gcra,
        "gcra without ReturnValues": {x: v for x, v in gcra.items() if x != "ReturnValues"},
        "gcra 2 attrs (tat, ttl), UPDATED_NEW": gcra_min,
    }
    return out


def seed(client, table: str, key: str) -> None:
    client.put_item(TableName=table, Item={
        "pk": {"S": key}, "n": {"N": "0"}, "tokens": {"N": "1" + "0" * 20}, "lastRefill": {"N": "1"},
        "tat": {"N": "0"}, "version": {"N": "0"}, "requestCount": {"N": "0"}})


def p50(client, req: dict, n: int) -> float:
    s = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.update_item(**req)
        s.append(time.perf_counter() - t0)
    return statistics.median(s) * 1000.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ddb", required=True)
    p.add_argument("--stub", required=True)
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    sess = botocore.session.get_session()
    mk = lambda url: sess.create_client("dynamodb", endpoint_url=url, region_name="us-east-1",
                                        aws_access_key_id="local", aws_secret_access_key="local")
    ddb, stub = mk(a.ddb), mk(a.stub.rstrip("/"))
    table = f"split-{uuid.uuid4().hex[:8]}"
    ddb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    rows: dict[str, dict[str, list[float]]] = {}
    for rnd in range(1, a.rounds + 1):
        for name in variants(table, "x"):
            key = f"{name}-{rnd}"
            seed(ddb, table, key)
            req = variants(table, key)[name]
            for _ in range(50):  # warm: the emulator's JIT and the connection
                ddb.update_item(**req)
            on_ddb = p50(ddb, req, a.n)
            stub_control(a.stub.rstrip("/"), "record")
            stub.update_item(**req)
            stub_control(a.stub.rstrip("/"), "replay")
            for _ in range(50):
                stub.update_item(**req)
            on_stub = p50(stub, req, a.n)
            body = len(json.dumps(req, separators=(",", ":")))
            r = rows.setdefault(name, {"ddb": [], "stub": [], "body": [body]})
            r["ddb"].append(on_ddb)
            r["stub"].append(on_stub)
            print(json.dumps({"variant": name, "round": rnd, "p50_ddb_ms": on_ddb, "p50_stub_ms": on_stub,
                              "request_bytes": body}), flush=True)
    print("\n| variant | request bytes | p50 on DynamoDB Local ms | p50 on the stub ms | emulator ms (difference) |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows.items():
        d, s = statistics.median(r["ddb"]), statistics.median(r["stub"])
        print(f"| {name} | {r['body'][0]} | {d:.3f} | {s:.3f} | {d - s:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
