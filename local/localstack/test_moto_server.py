"""Tests of local/localstack/moto_server.py (its patches of moto) with boto3.

Run with the venv's python (moto and boto3 come from local/requirements.txt):

  .venv/bin/python -m unittest local/localstack/test_moto_server.py

Each test class starts its own servers on free 127.0.0.1 ports and stops them:

* `Differential` runs one seeded random sequence of DynamoDB operations (conditional
  puts, updates and deletes, transactions that commit or are cancelled, batch writes,
  gets, queries) against plain moto_server and against moto_server.py, and requires the
  same answers, the same final items and the same stream (read from TRIM_HORIZON), so
  the patches keep moto's semantics (the sequence includes the store's own request
  shapes: counter commits, task updates with nested outputs, every ReturnValues, Query
  pages with begins_with, Limit and ExclusiveStartKey); on moto_server.py it also
  requires that a LATEST iterator polled throughout sees exactly those records (plain
  moto's goes deaf after the first cancelled transaction).
* `Patched` checks the rollback of cancelled transactions item by item, stream
  retention (MOTO_STREAM_RETENTION_SECS=3), the TTL sweeper (MOTO_TTL_SWEEP_SECS=1),
  expired iterators and argument checking.
* `Units` tests StreamLog and iterator expiry in-process.
* `SpeedUnits` compares, in-process, the speed patches' shortcuts with the moto code
  they stand for: the fast JSON serializer and the cached member lookups against moto's
  serializer on random values of every DynamoDB / Streams output shape the store meets
  (odd values included, which the fast path must leave to moto), and the item size and
  result-dict shortcuts against moto's functions on random AttributeValue trees.
* `SpeedUpdates` runs the same ~190 update requests (valid ones, and ones each of moto's
  validators refuses; single and in transactions; each expression twice) in two fresh
  interpreters, speed patches on and off, and requires the same answers and items, parse
  trees left unchanged by their users, and the static checks actually skipped.
* `OpStatsLine` checks the MOTO_OP_STATS_SECS report and the MOTO_SPEEDUPS knob check.
* `S3Differential` runs one seeded random sequence of S3 operations shaped like the
  shuffle's (PUTs of 0 B to 6 MiB, overwrites, GETs, ranged GETs of every Range form,
  HEADs, paginated LISTs with and without a delimiter, DeleteObject, DeleteObjects with
  missing keys, multipart uploads completed or aborted) against both servers and
  requires the same answers and the same final listing.
* `S3Memory` puts, reads and deletes 1 MiB objects round after round on moto_server.py
  and requires its RSS (/proc/PID/status VmRSS) to come back near where it started, and
  its open files too (objects over 5 MiB live in temporary files); it also checks that
  POST /moto-api/reset still empties S3.
* `S3Release` checks in a fresh interpreter, with the patches applied, that moto frees
  each object (the FakeKey object, not just its buffer) once DeleteObject,
  DeleteObjects, an overwrite or a completed / aborted multipart upload drops it.
"""

import hashlib
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import types
import unittest
import urllib.error
import urllib.request
from collections import deque

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ next to moto_server.py
BIN = os.path.dirname(sys.executable)
SERVER = os.path.join(HERE, "moto_server.py")
PLAIN_MOTO = os.path.join(BIN, "moto_server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A moto server process on a free port; stopped by close()."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # A file, not a pipe: moto logs every request to stderr, and a pipe nobody reads
        # fills after some 600 requests and blocks the server.
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            command + ["-H", "127.0.0.1", "-p", str(self.port)],
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.seek(0)
                    raise RuntimeError(f"{command} did not start: {self.log.read().decode()}")
                time.sleep(0.1)

    def client(self, service: str):
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=Config(retries={"max_attempts": 1}),
        )

    def rss_mib(self) -> float:
        """The server's resident set size (VmRSS of /proc/PID/status), in MiB."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmRSS for pid {self.proc.pid}")

    def open_files(self) -> int:
        """Files (not sockets or pipes) the server has open."""
        fds = f"/proc/{self.proc.pid}/fd"
        targets = []
        for fd in os.listdir(fds):
            try:
                targets.append(os.readlink(f"{fds}/{fd}"))
            except FileNotFoundError:  # closed meanwhile
                pass
        return sum(1 for t in targets if t.startswith("/"))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def create_table(ddb, name: str) -> None:
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )
    ddb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"}
    )


def shard_of(streams, table: str) -> tuple[str, str]:
    arn = streams.list_streams(TableName=table)["Streams"][0]["StreamArn"]
    return arn, streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]


def iterator(streams, table: str, kind: str, seq: str | None = None) -> str:
    arn, shard = shard_of(streams, table)
    kwargs = {"StreamArn": arn, "ShardId": shard, "ShardIteratorType": kind}
    if seq is not None:
        kwargs["SequenceNumber"] = seq
    return streams.get_shard_iterator(**kwargs)["ShardIterator"]


def read_all(streams, it: str) -> tuple[list[dict], str]:
    """Reads until GetRecords returns nothing; returns the records and the next iterator."""
    records = []
    while True:
        out = streams.get_records(ShardIterator=it, Limit=100)
        it = out["NextShardIterator"]
        if not out["Records"]:
            return records, it
        records.extend(out["Records"])


def essence(record: dict) -> tuple:
    """What must match between servers: not eventID or the creation time."""
    d = record["dynamodb"]
    return (
        record["eventName"],
        d["SequenceNumber"],
        repr(d["Keys"]),
        repr(d.get("NewImage")),
        repr(record.get("userIdentity")),
    )


def s(v) -> dict:
    return {"S": str(v)}


def n(v) -> dict:
    return {"N": str(v)}


def key(pk, sk) -> dict:
    return {"pk": s(pk), "sk": s(sk)}


def random_operations(seed: int, count: int):
    """A deterministic list of (operation, kwargs) over a small key space.

    Besides plain puts, updates, deletes, transactions, batches, gets and queries, it
    sends what the store (aws/src/store/) sends: counter commits (`SET #r = if_not_exists(#r, :s)
    - :one ... ADD #done :p` if `NOT contains(#done, :pn)`, ReturnValues UPDATED_NEW),
    task updates with nested outputs (maps, lists, binary, sets, BOOL, NULL; SET, REMOVE,
    if_not_exists; every ReturnValues), DeleteItem with ALL_OLD, BatchGetItem, and Query
    pages (begins_with, Limit, ExclusiveStartKey before, on and after items, both
    directions).
    """
    rng = random.Random(seed)
    keys = [(p, q) for p in "AB" for q in ("1", "2", "3", "4", "T#1", "T#2")]
    ops = []

    def condition(kwargs: dict) -> None:
        choice = rng.randrange(5)
        if choice == 0:
            kwargs["ConditionExpression"] = "attribute_not_exists(pk)"
        elif choice == 1:
            kwargs["ConditionExpression"] = "attribute_exists(pk)"
        elif choice == 2:
            kwargs["ConditionExpression"] = "attribute_not_exists(c) OR c < :lim"
            kwargs.setdefault("ExpressionAttributeValues", {})[":lim"] = n(rng.randrange(1, 4))

    def update(k) -> dict:
        kwargs = {
            "Key": key(*k),
            "UpdateExpression": "SET v = :v ADD c :one",
            "ExpressionAttributeValues": {":v": s(rng.randrange(100)), ":one": n(1)},
        }
        condition(kwargs)
        return kwargs

    def put(k) -> dict:
        kwargs = {"Item": {**key(*k), "v": s(rng.randrange(100)), "m": {"M": {"l": {"L": [n(1), s("x")]}}}}}
        condition(kwargs)
        return kwargs

    def delete(k) -> dict:
        kwargs = {"Key": key(*k)}
        condition(kwargs)
        return kwargs

    def count_commit(k) -> dict:
        p = rng.randrange(4)
        return {
            "Key": key(*k),
            "UpdateExpression": "SET #r = if_not_exists(#r, :start) - :one, #t = :now ADD #done :p",
            "ConditionExpression": "attribute_not_exists(#done) OR NOT contains(#done, :pn)",
            "ExpressionAttributeNames": {"#r": "remaining", "#t": "last_ms", "#done": "done"},
            "ExpressionAttributeValues": {":start": n(4), ":one": n(1), ":now": n(rng.randrange(10**12)),
                                          ":p": {"NS": [str(p)]}, ":pn": n(p)},
            "ReturnValues": "UPDATED_NEW",
        }

    def output() -> dict:
        return {"M": {
            "ends": {"L": [n(rng.randrange(10**6)) for _ in range(rng.randrange(4))]},
            "object": s(f"shuffle/{rng.randrange(100)}"),
            "blob": {"B": bytes([rng.randrange(256) for _ in range(3)])},
            "ok": {"BOOL": bool(rng.randrange(2))},
            "none": {"NULL": True},
            "tags": {"SS": sorted({f"t{rng.randrange(5)}" for _ in range(2)})},
            "deep": {"M": {"x": {"L": [{"M": {"y": n(rng.randrange(9))}}, s("")]}}},
        }}

    def task_update(k) -> dict:
        kwargs = {
            "Key": key(*k),
            "UpdateExpression": "SET #s = :s, #o = :o, #a = if_not_exists(#a, :one) REMOVE #e",
            "ExpressionAttributeNames": {"#s": "state", "#o": "output", "#a": "attempt", "#e": "error"},
            "ExpressionAttributeValues": {":s": s(rng.choice(["RUNNING", "SUCCEEDED"])), ":o": output(), ":one": n(1)},
            "ReturnValues": rng.choice(["NONE", "ALL_NEW", "ALL_OLD", "UPDATED_NEW", "UPDATED_OLD"]),
        }
        if rng.randrange(2):
            kwargs["ConditionExpression"] = "attribute_not_exists(pk) OR #s <> :done"
            kwargs["ExpressionAttributeValues"][":done"] = s("SUCCEEDED")
        return kwargs

    for _ in range(count):
        kind = rng.randrange(15)
        k = rng.choice(keys)
        if kind == 0:
            ops.append(("put_item", put(k)))
        elif kind == 1:
            ops.append(("update_item", update(k)))
        elif kind == 2:
            ops.append(("delete_item", delete(k)))
        elif kind in (3, 4, 5):
            chosen = rng.sample(keys, rng.randrange(1, 4))
            if rng.randrange(10) == 0:
                chosen.append(chosen[0])  # the same item twice: ValidationException
            items = []
            for c in chosen:
                which = rng.choice(["Update", "Update", "Put", "Delete", "ConditionCheck"])
                body = {"Update": update, "Put": put, "Delete": delete, "ConditionCheck": delete}[which](c)
                if which == "ConditionCheck" and "ConditionExpression" not in body:
                    body["ConditionExpression"] = "attribute_exists(pk)"
                items.append({which: body})
            ops.append(("transact_write_items", {"TransactItems": items}))
        elif kind == 6:
            chosen = rng.sample(keys, rng.randrange(1, 5))
            requests = [
                {"PutRequest": {"Item": {**key(*c), "v": s("batch")}}}
                if rng.randrange(2)
                else {"DeleteRequest": {"Key": key(*c)}}
                for c in chosen
            ]
            ops.append(("batch_write_item", {"RequestItems": requests}))
        elif kind == 7:
            ops.append(("get_item", {"Key": key(*k), "ConsistentRead": True}))
        elif kind == 8:
            ops.append(("query", {
                "KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b",
                "ExpressionAttributeValues": {":p": s(k[0]), ":a": s("2"), ":b": s("4")},
                "ScanIndexForward": bool(rng.randrange(2)),
                "ConsistentRead": True,
            }))
        elif kind == 9:
            ops.append(("update_item", count_commit(k)))
        elif kind == 10:
            ops.append(("update_item", task_update(k)))
        elif kind == 11:
            kwargs = delete(k)
            kwargs["ReturnValues"] = "ALL_OLD"
            ops.append(("delete_item", kwargs))
        elif kind == 12:
            kwargs = {
                "KeyConditionExpression": "pk = :p AND begins_with(sk, :pre)",
                "ExpressionAttributeValues": {":p": s(k[0]), ":pre": s(rng.choice(["T#", "T", "1", "2", "X"]))},
                "ScanIndexForward": bool(rng.randrange(2)),
                "ConsistentRead": True,
                "Limit": rng.randrange(1, 4),
            }
            if rng.randrange(3):
                # On an item, or between, before or after all of them (a page boundary).
                start = rng.choice(["0", "1", "2", "25", "4", "5", "T#1", "T#15", "T#2", "U"])
                # Now and then the other partition's key (moto does not refuse it).
                kwargs["ExclusiveStartKey"] = key(k[0] if rng.randrange(3) else {"A": "B", "B": "A"}[k[0]], start)
            ops.append(("query", kwargs))
        elif kind == 13:
            chosen = rng.sample(keys, rng.randrange(1, 5))
            ops.append(("batch_get_item", {"RequestItems": {"Keys": [key(*c) for c in chosen], "ConsistentRead": True}}))
        else:
            ops.append(("put_item", {"Item": {**key(*k), "state": s("PENDING"), "output": output(),
                                              "counts": {"NS": ["1", "2.5", "-3"]}, "raw": {"BS": [b"a", b"bc"]}}}))
    return ops


def run_operation(ddb, table: str, op: str, kwargs: dict):
    """Runs one operation; returns what must match between servers."""
    import copy

    kwargs = copy.deepcopy(kwargs)
    if op in ("batch_write_item", "batch_get_item"):
        kwargs["RequestItems"] = {table: kwargs["RequestItems"]}
    elif op == "transact_write_items":
        for item in kwargs["TransactItems"]:
            next(iter(item.values()))["TableName"] = table
    else:
        kwargs["TableName"] = table
    try:
        out = getattr(ddb, op)(**kwargs)
    except ddb.exceptions.TransactionCanceledException as e:
        return ("cancelled", [r.get("Code") for r in e.response["CancellationReasons"]])
    except ddb.exceptions.ClientError as e:
        return ("error", e.response["Error"]["Code"], e.response["Error"].get("Message"))
    out.pop("ResponseMetadata", None)
    return ("ok", repr(out))


class Differential(unittest.TestCase):
    """moto_server.py answers exactly like plain moto_server for one client."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(PLAIN_MOTO):
            raise unittest.SkipTest(f"no {PLAIN_MOTO}")
        cls.plain = Server([PLAIN_MOTO])
        cls.patched = Server([sys.executable, SERVER], {"MOTO_TTL_SWEEP_SECS": "0"})

    @classmethod
    def tearDownClass(cls):
        cls.plain.close()
        cls.patched.close()

    def test_random_operations_same_answers_items_and_stream(self):
        table = "diff"
        results = {}
        for name, server in (("plain", self.plain), ("patched", self.patched)):
            ddb, streams = server.client("dynamodb"), server.client("dynamodbstreams")
            create_table(ddb, table)
            latest = iterator(streams, table, "LATEST")
            polled = []
            answers = []
            for i, (op, kwargs) in enumerate(random_operations(seed=7, count=900)):
                answers.append(run_operation(ddb, table, op, kwargs))
                if name == "patched" and i % 10 == 0:
                    got, latest = read_all(streams, latest)
                    polled.extend(got)
            items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
            stream, _ = read_all(streams, iterator(streams, table, "TRIM_HORIZON"))
            if name == "patched":
                got, _ = read_all(streams, latest)
                polled.extend(got)
                self.assertEqual([essence(r) for r in polled], [essence(r) for r in stream],
                                 "a LATEST iterator polled meanwhile must see exactly the stream")
            results[name] = (answers, sorted(repr(i) for i in items), [essence(r) for r in stream])
        plain, patched = results["plain"], results["patched"]
        kinds = [a[0] for a in plain[0]]
        self.assertGreater(kinds.count("cancelled"), 20, "the sequence must cancel transactions")
        self.assertGreater(kinds.count("error"), 5, "the sequence must fail conditions")
        ops = random_operations(seed=7, count=900)
        queries = [a[1] for (op, kw), a in zip(ops, plain[0]) if op == "query" and a[0] == "ok"]
        self.assertTrue(any("'LastEvaluatedKey'" in q for q in queries), "no Query page ended early")
        self.assertTrue(any("'Count': 0" in q for q in queries), "no Query page came back empty")
        self.assertTrue(any("'Count': 3" in q for q in queries), "no Query page came back full")
        updated = [a for (op, kw), a in zip(ops, plain[0]) if op == "update_item" and "ReturnValues" in kw]
        self.assertTrue(any(a[0] == "ok" and "'done'" in a[1] for a in updated), "no counter commit answered")
        self.assertTrue(any(a[0] == "error" for a in updated), "no counter commit refused")
        self.assertTrue(any(a[0] == "ok" and "'B': b" in a[1] for a in plain[0]), "no binary value came back")
        for i, (a, b) in enumerate(zip(plain[0], patched[0])):
            self.assertEqual(a, b, f"answer to operation {i}")
        self.assertEqual(plain[1], patched[1], "final items")
        self.assertEqual(plain[2], patched[2], "stream records")


class Patched(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(
            [sys.executable, SERVER], {"MOTO_STREAM_RETENTION_SECS": "3", "MOTO_TTL_SWEEP_SECS": "1"}
        )
        cls.ddb = cls.server.client("dynamodb")
        cls.streams = cls.server.client("dynamodbstreams")

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def table(self, name: str) -> str:
        create_table(self.ddb, name)
        return name

    def item(self, table: str, pk: str, sk: str):
        return self.ddb.get_item(TableName=table, Key=key(pk, sk), ConsistentRead=True).get("Item")

    def test_cancelled_transaction_restores_exactly_the_items_it_touched(self):
        t = self.table("rollback")
        self.ddb.put_item(TableName=t, Item={**key("J", "STAGE"), "remaining": n(2), "plan": s("p")})
        self.ddb.put_item(TableName=t, Item={**key("J", "TASK1"), "state": s("SUCCEEDED")})
        self.ddb.put_item(TableName=t, Item={**key("J", "DEL"), "x": n(1)})
        self.ddb.put_item(TableName=t, Item={**key("J", "OTHER"), "x": n(1)})
        it = iterator(self.streams, t, "LATEST")
        before = {sk: self.item(t, "J", sk) for sk in ("STAGE", "TASK1", "DEL", "OTHER")}
        with self.assertRaises(self.ddb.exceptions.TransactionCanceledException) as cm:
            self.ddb.transact_write_items(TransactItems=[
                {"Update": {"TableName": t, "Key": key("J", "STAGE"), "UpdateExpression": "ADD remaining :m",
                            "ExpressionAttributeValues": {":m": n(-1)}}},
                {"Put": {"TableName": t, "Item": {**key("J", "NEW"), "a": s("b")}}},
                {"Delete": {"TableName": t, "Key": key("J", "DEL")}},
                {"Update": {"TableName": t, "Key": key("J", "TASK1"), "UpdateExpression": "SET #s = :s",
                            "ConditionExpression": "attribute_not_exists(pk) OR #s <> :s",
                            "ExpressionAttributeNames": {"#s": "state"},
                            "ExpressionAttributeValues": {":s": s("SUCCEEDED")}}},
            ])
        codes = [r["Code"] for r in cm.exception.response["CancellationReasons"]]
        self.assertEqual(codes, ["None", "None", "None", "ConditionalCheckFailed"])
        for sk, item in before.items():
            self.assertEqual(self.item(t, "J", sk), item, sk)
        self.assertIsNone(self.item(t, "J", "NEW"))
        records, it = read_all(self.streams, it)
        self.assertEqual(records, [], "a cancelled transaction emits no stream records")
        # The same iterator chain still sees what comes next.
        self.ddb.transact_write_items(TransactItems=[
            {"Update": {"TableName": t, "Key": key("J", "STAGE"), "UpdateExpression": "ADD remaining :m",
                        "ExpressionAttributeValues": {":m": n(-1)}}},
            {"Update": {"TableName": t, "Key": key("J", "TASK2"), "UpdateExpression": "SET #s = :s",
                        "ConditionExpression": "attribute_not_exists(pk) OR #s <> :s",
                        "ExpressionAttributeNames": {"#s": "state"},
                        "ExpressionAttributeValues": {":s": s("SUCCEEDED")}}},
        ])
        records, _ = read_all(self.streams, it)
        images = [(r["eventName"], r["dynamodb"].get("NewImage", {})) for r in records]
        self.assertEqual(images[0], ("MODIFY", {**key("J", "STAGE"), "remaining": n(1), "plan": s("p")}))
        self.assertEqual(images[-1], ("INSERT", {**key("J", "TASK2"), "state": s("SUCCEEDED")}))

    def test_ttl_sweeper_deletes_expired_numbers_with_a_service_remove_record(self):
        t = self.table("ttl")
        it = iterator(self.streams, t, "LATEST")
        now = int(time.time())
        items = {
            "expired": n(now - 5),
            "future": n(now + 3600),
            "string": s(now - 5),
            "ancient": n(1000),  # more than five years ago: DynamoDB ignores it
            "list": {"L": [n(now - 5)]},
        }
        for sk, value in items.items():
            self.ddb.put_item(TableName=t, Item={**key("T", sk), "expires_at": value})
        self.ddb.put_item(TableName=t, Item={**key("T", "none")})
        deadline = time.monotonic() + 10
        while self.item(t, "T", "expired") is not None:
            self.assertLess(time.monotonic(), deadline, "TTL sweeper did not delete the expired item")
            time.sleep(0.2)
        left = self.ddb.query(TableName=t, KeyConditionExpression="pk = :p",
                              ExpressionAttributeValues={":p": s("T")})["Items"]
        self.assertEqual(sorted(i["sk"]["S"] for i in left), ["ancient", "future", "list", "none", "string"])
        records, _ = read_all(self.streams, it)
        removes = [r for r in records if r["eventName"] == "REMOVE"]
        self.assertEqual(len(removes), 1)
        self.assertEqual(removes[0]["dynamodb"]["Keys"], key("T", "expired"))
        self.assertEqual(removes[0]["userIdentity"], {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"})
        # A user's delete carries no userIdentity.
        self.ddb.delete_item(TableName=t, Key=key("T", "future"))
        records, _ = read_all(self.streams, iterator(self.streams, t, "TRIM_HORIZON"))
        self.assertNotIn("userIdentity", records[-1])

    def test_stream_records_past_retention_are_trimmed(self):
        t = self.table("retention")
        self.ddb.put_item(TableName=t, Item=key("R", "old"))
        old_it = iterator(self.streams, t, "TRIM_HORIZON")
        first_seq = read_all(self.streams, iterator(self.streams, t, "TRIM_HORIZON"))[0][0]["dynamodb"]["SequenceNumber"]
        time.sleep(3.5)
        self.ddb.put_item(TableName=t, Item=key("R", "new"))
        with self.assertRaises(self.streams.exceptions.TrimmedDataAccessException):
            self.streams.get_records(ShardIterator=old_it)
        with self.assertRaises(self.streams.exceptions.TrimmedDataAccessException):
            iterator(self.streams, t, "AT_SEQUENCE_NUMBER", first_seq)
        records, _ = read_all(self.streams, iterator(self.streams, t, "TRIM_HORIZON"))
        self.assertEqual([r["dynamodb"]["Keys"]["sk"]["S"] for r in records], ["new"])
        # AFTER the trimmed record is the oldest kept one: still readable.
        records, _ = read_all(self.streams, iterator(self.streams, t, "AFTER_SEQUENCE_NUMBER", first_seq))
        self.assertEqual([r["dynamodb"]["Keys"]["sk"]["S"] for r in records], ["new"])
        self.assertGreater(int(records[0]["dynamodb"]["SequenceNumber"]), int(first_seq))

    def test_unknown_iterator_is_expired(self):
        with self.assertRaises(self.streams.exceptions.ExpiredIteratorException):
            self.streams.get_records(ShardIterator="arn:aws:dynamodb:us-east-1:123456789012:table/x/stream/y|1|nope")

    def test_query_reads_its_partition_in_order(self):
        t = self.table("query")
        for p in ("A", "B", "C"):
            for sk in ("3", "1", "2"):
                self.ddb.put_item(TableName=t, Item={**key(p, sk), "v": s(p + sk)})
        out = self.ddb.query(TableName=t, KeyConditionExpression="pk = :p",
                             ExpressionAttributeValues={":p": s("B")}, ScanIndexForward=False, Limit=2)
        self.assertEqual([i["v"]["S"] for i in out["Items"]], ["B3", "B2"])
        self.assertEqual(out["LastEvaluatedKey"], key("B", "2"))
        out = self.ddb.query(TableName=t, KeyConditionExpression="pk = :p",
                             ExpressionAttributeValues={":p": s("missing")})
        self.assertEqual(out["Items"], [])

    def test_bad_knob_is_refused_by_name(self):
        proc = subprocess.run(
            [sys.executable, SERVER, "-p", str(free_port())],
            env={**os.environ, "MOTO_STREAM_RETENTION_SECS": "soon"},
            capture_output=True, text=True, timeout=60,
        )
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("MOTO_STREAM_RETENTION_SECS must be a number > 0", proc.stderr)


class Units(unittest.TestCase):
    def test_stream_log_keeps_logical_indices_across_trims_and_truncation(self):
        import moto_server

        log = moto_server.StreamLog(retention_secs=1000)
        for i in range(200):
            log.append(i)
        self.assertEqual((len(log), log[5:8], log[-1]), (200, [5, 6, 7], 199))
        # Age the first 150 records past the retention.
        log._entries[:150] = [(t - 2000, r) for t, r in log._entries[:150]]
        log.trim()
        self.assertEqual((len(log), log.first, log.kept()), (200, 150, 50))
        self.assertEqual(log[150:153], [150, 151, 152])
        self.assertEqual(log[195:400], [195, 196, 197, 198, 199])
        with self.assertRaises(IndexError):
            log[149]
        log.append(200)
        log.truncate(198)
        self.assertEqual((len(log), log[196:300]), (198, [196, 197]))
        log.append("x")
        self.assertEqual(log[198], "x")

    def test_iterators_expire_oldest_first(self):
        import moto_server

        now = time.monotonic()
        lifetime = moto_server.ITERATOR_LIFETIME_SECS
        backend = types.SimpleNamespace(shard_iterators={}, _iterators_by_age=deque())
        for age, name in ((lifetime + 10, "old"), (lifetime + 1, "older-ish"), (1, "fresh")):
            it = types.SimpleNamespace(issued=now - age)
            backend.shard_iterators[name] = it
            backend._iterators_by_age.append((it.issued, name))
        moto_server._expire_iterators(backend)
        self.assertEqual(list(backend.shard_iterators), ["fresh"])
        self.assertEqual(len(backend._iterators_by_age), 1)


# --- speed patches (9-12) ------------------------------------------------------------


def outcome(fn):
    """("ok", answer) or ("raised", exception type, message): what must match."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared, not handled
        return ("raised", type(e).__name__, str(e))


def random_shaped(shape, rng, depth=0):
    """A value for a botocore shape: mostly what moto's code puts there, sometimes not."""
    import datetime

    kind = shape.type_name
    roll = rng.random()
    if roll < 0.01:
        return None
    if roll < 0.02:  # the wrong kind of value
        return rng.choice([7, "x", 1.5, (1, 2), ["a"], {"k": "v"}, b"raw", True])
    if kind == "structure":
        out = {}
        for name, member in shape.members.items():
            if depth < 7 and rng.random() < (0.6 if depth < 3 else 0.3):
                out[name] = random_shaped(member, rng, depth + 1)
        if rng.random() < 0.1:
            out["NotAMember"] = "left out"
        return out
    if kind == "list":
        return [random_shaped(shape.member, rng, depth + 1) for _ in range(rng.randrange(4 if depth < 7 else 1))]
    if kind == "map":
        size = rng.randrange(4 if depth < 7 else 1)
        return {f"k{i}": random_shaped(shape.value, rng, depth + 1) for i in range(size)}
    if kind == "string":
        return rng.choice(["", "abc", "ünïcode ☃", "12", 5, 0])
    if kind == "blob":
        return rng.choice([b"", b"\x00\xffbin", "text", bytearray(b"ba")])
    if kind == "timestamp":
        return rng.choice([datetime.datetime(2026, 1, 2, 3, 4, 5), datetime.datetime(2026, 1, 2, 3, 4, 5, 678901),
                           1700000000, 1700000000.25])
    if kind in ("integer", "long"):
        return rng.choice([0, 7, -3, "42", 2.0, True])
    if kind in ("float", "double"):
        return rng.choice([0.5, 3, "1.25"])
    if kind == "boolean":
        return rng.choice([True, False, 0])
    return "x"


class SpeedUnits(unittest.TestCase):
    """Patches 9 and 12 against moto's own code, in this process (where moto is unpatched)."""

    OPERATIONS = {
        "dynamodb": ["GetItem", "Query", "Scan", "UpdateItem", "PutItem", "DeleteItem", "BatchGetItem",
                     "BatchWriteItem", "TransactGetItems", "TransactWriteItems", "DescribeTable", "CreateTable",
                     "ListTables", "DescribeTimeToLive"],
        "dynamodbstreams": ["GetRecords", "DescribeStream", "ListStreams", "GetShardIterator"],
    }

    def test_serializer_shortcuts_write_what_moto_writes(self):
        import json

        import moto_server
        from moto.core import serialize
        from moto.core.utils import get_service_model

        def serializer(op):
            return serialize.JSONSerializer(operation_model=op, pretty_print=False,
                                            value_picker=serialize.XFormedAttributePicker(response_transformers={}))

        rng = random.Random(3)
        fast = fell_back = cached_picks = 0
        for service, operations in self.OPERATIONS.items():
            model = get_service_model(service)
            for name in operations:
                op = model.operation_model(name)
                for _ in range(150):
                    value = random_shaped(op.output_shape, rng)
                    if type(value) is not dict:
                        continue
                    expected = outcome(lambda: serializer(op).serialize(value)["body"])
                    # The fast path: where it answers, it must answer what moto does.
                    got = outcome(lambda: json.dumps(moto_server._fast(op.output_shape)(value, serializer(op))))
                    if got[0] == "ok":
                        self.assertEqual(got, expected, f"{name}: fast path on {value!r}")
                        fast += 1
                    else:
                        fell_back += 1
                    # moto's own walk with the cached member lookups (the fallback).
                    original = serialize.ResponseSerializer.get_value
                    serialize.ResponseSerializer.get_value = moto_server._get_value
                    try:
                        cached = outcome(lambda: serializer(op).serialize(value)["body"])
                    finally:
                        serialize.ResponseSerializer.get_value = original
                    self.assertEqual(cached, expected, f"{name}: cached lookups on {value!r}")
                    cached_picks += 1
        self.assertGreater(fast, 4 * fell_back, "the fast path must answer most of these")
        self.assertGreater(fell_back, 10, "the sample must include values the fast path leaves to moto")
        self.assertGreater(cached_picks, 2000)
        self.assertTrue(moto_server.json_serializer_is_mirrored())

    def test_sizes_and_result_dicts_are_moto_s(self):
        import datetime

        import moto_server
        from moto.dynamodb.models.dynamo_type import DynamoType

        rng = random.Random(5)

        def attribute(depth):
            kinds = ["S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS"] + (["L", "M"] * 2 if depth < 4 else [])
            kind = rng.choice(kinds)
            if kind == "S":
                return {"S": rng.choice(["", "a", "ünï ☃"])}
            if kind == "N":
                return {"N": rng.choice(["0", "-1.5", "123456789012345678901234567890"])}
            if kind == "B":
                return {"B": rng.choice([b"\x00\x01", "AAE="])}
            if kind == "BOOL":
                return {"BOOL": rng.choice([True, False])}
            if kind == "NULL":
                return {"NULL": True}
            if kind == "SS":
                return {"SS": ["a", "bb"]}
            if kind == "NS":
                return {"NS": ["1", "22.5"]}
            if kind == "BS":
                return {"BS": [b"a", "Yg=="]}
            if kind == "L":
                return {"L": [attribute(depth + 1) for _ in range(rng.randrange(4))]}
            return {"M": {f"k{i}": attribute(depth + 1) for i in range(rng.randrange(4))}}

        irregular = 0
        for _ in range(600):
            value = DynamoType(attribute(0))
            if rng.random() < 0.2 and value.type in ("L", "M"):
                # Not what DynamoType's constructor makes: a raw dict among the DynamoTypes.
                raw = attribute(3)
                if value.type == "L":
                    value.value.append(raw)
                else:
                    value.value["raw"] = raw
                irregular += 1
            self.assertEqual(outcome(lambda: moto_server._dynamo_size(value)),
                             outcome(lambda: moto_server._moto_dynamo_size(value)), repr(value))
            when = datetime.datetime(2026, 1, 2, 3, 4, 5)
            for obj in (value, {"Items": [{"a": value}], "Count": 1, "When": when}, [value, b"x", None, 1.5, "s"]):
                self.assertEqual(repr(outcome(lambda: moto_server._dynamo_to_dict(obj))),
                                 repr(outcome(lambda: moto_server._moto_dynamo_to_dict(obj))), repr(obj))
        self.assertGreater(irregular, 30)


# Run in a fresh interpreter with the patches, speedups on (argv[2] == "1") or off:
# the same update requests through moto's WSGI app, the answers and items printed.
UPDATE_SCRIPT = textwrap.dedent("""
    import io, json, sys
    sys.path.insert(0, sys.argv[1])
    sys.dont_write_bytecode = True
    import moto_server
    print(moto_server.apply_patches(86400, speedups=sys.argv[2] == "1"), file=sys.stderr)
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from moto.dynamodb.parsing.validators import ActionCountValidator
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    app = moto_server.SerializeDynamoDB(DomainDispatcherApplication(create_backend_app))
    static_runs = [0]
    traverse = ActionCountValidator.traverse
    def counting(self, node):
        static_runs[0] += 1
        return traverse(self, node)
    ActionCountValidator.traverse = counting

    def call(op, body):
        data = json.dumps(body).encode()
        env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
               "SERVER_PORT": "5000", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(data), "wsgi.errors": sys.stderr, "CONTENT_LENGTH": str(len(data)),
               "CONTENT_TYPE": "application/x-amz-json-1.0", "HTTP_HOST": "127.0.0.1:5000",
               "HTTP_X_AMZ_TARGET": "DynamoDB_20120810." + op,
               "HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, "
                                     "SignedHeaders=host, Signature=0"}
        status = []
        try:
            out = b"".join(app(env, lambda s, h, e=None: status.append(s)))
        except Exception as e:  # moto lets a few errors escape (a 500 from the server)
            return "raised", type(e).__name__, str(e)
        return status[0], json.loads(out) if out else None

    call("CreateTable", {"TableName": "t", "BillingMode": "PAY_PER_REQUEST",
         "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"},
                                  {"AttributeName": "sk", "AttributeType": "S"}],
         "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]})
    N = lambda v: {"N": str(v)}
    S = lambda v: {"S": v}
    cases = [
        ("SET a = :v", {}, {":v": S("x")}),
        ("SET #r = if_not_exists(#r, :s) - :one, #t = :t ADD #d :p", {"#r": "remaining", "#t": "t", "#d": "done"},
         {":s": N(3), ":one": N(1), ":t": N(5), ":p": {"NS": ["1"]}}),
        ("SET #s = :s, #o = :o REMOVE #e", {"#s": "state", "#o": "output", "#e": "error"},
         {":s": S("OK"), ":o": {"M": {"l": {"L": [N(1), {"B": "AAE="}]}, "n": {"NULL": True}}}}),
        ("SET l = list_append(if_not_exists(l, :empty), :more)", {},
         {":empty": {"L": []}, ":more": {"L": [N(1), N(2)]}}),
        ("REMOVE l[1], l[0]", {}, {}),
        ("SET m.x = :v", {}, {":v": N(1)}),
        ("ADD c :one, ss :set", {}, {":one": N(1), ":set": {"SS": ["a", "b"]}}),
        ("DELETE ss :set", {}, {":set": {"SS": ["a"]}}),
        ("SET a = :v, a = :w", {}, {":v": N(1), ":w": N(2)}),
        ("SET a.b = :v, a = :w", {}, {":v": N(1), ":w": N(2)}),
        ("SET pk = :v", {}, {":v": S("other")}),
        ("SET #k = :v", {"#k": "sk"}, {":v": S("other")}),
        ("SET a = :v SET b = :w", {}, {":v": N(1), ":w": N(2)}),
        ("ADD c :one ADD d :one", {}, {":one": N(1)}),
        ("SET #missing = :v", {}, {":v": N(1)}),
        ("SET a = :v", {"#unused": "u"}, {":v": N(1)}),
        ("SET n = n - :one", {}, {":one": N(1)}),
        ("SET n = if_not_exists(n, :ten) + :one", {}, {":ten": N(10), ":one": N(1)}),
        ("SET a = :undefined", {}, {":v": N(1)}),
        ("SET x = :v,", {}, {":v": N(1)}),
        ("REMOVE a, b SET c = :v ADD d :one DELETE ss :set", {}, {":v": N(1), ":one": N(1), ":set": {"SS": ["b"]}}),
    ]
    for round_ in range(2):
        for i, (expr, names, values) in enumerate(cases):
            for sk in ("fresh%d-%d" % (round_, i), "shared"):
                body = {"TableName": "t", "Key": {"pk": S("P"), "sk": S(sk)}, "UpdateExpression": expr,
                        "ReturnValues": "ALL_NEW"}
                if names:
                    body["ExpressionAttributeNames"] = names
                if values:
                    body["ExpressionAttributeValues"] = values
                print(json.dumps([round_, i, sk, call("UpdateItem", body)]))
                print(json.dumps(call("GetItem", {"TableName": "t", "Key": {"pk": S("P"), "sk": S(sk)},
                                                  "ConsistentRead": True})))
        # The same in transactions (two Updates each, one cancelled now and then).
        for i, (expr, names, values) in enumerate(cases[:8]):
            items = []
            for sk in ("tx%d" % i, "shared"):
                update = {"TableName": "t", "Key": {"pk": S("P"), "sk": S(sk)}, "UpdateExpression": expr}
                if names:
                    update["ExpressionAttributeNames"] = names
                if values:
                    update["ExpressionAttributeValues"] = values
                items.append({"Update": update})
            items[1]["Update"]["ConditionExpression"] = "attribute_exists(pk)" if i % 3 else "attribute_not_exists(pk)"
            print(json.dumps([round_, "tx", i, call("TransactWriteItems", {"TransactItems": items})]))
    print(json.dumps(call("Query", {"TableName": "t", "KeyConditionExpression": "pk = :p",
                                    "ExpressionAttributeValues": {":p": S("P")}})))
    def dump(x):
        if isinstance(x, list):
            return [dump(v) for v in x]
        if hasattr(x, "__dict__"):
            return (type(x).__name__, {k: dump(v) for k, v in vars(x).items() if k != "parent"})
        return repr(x)
    unchanged = all(
        dump(moto_server._moto_make_update_expression(UpdateExpressionParser, text)) == dump(tree)
        and moto_server._linked(tree, None)
        for text, tree in moto_server._parsed_update_expressions.items())
    print(json.dumps({"static_runs": static_runs[0], "cached": len(moto_server._parsed_update_expressions),
                      "cached_trees_unchanged": unchanged}), file=sys.stderr)
""")


class SpeedUpdates(unittest.TestCase):
    """Patch 11 changes no answer to an update, valid or not, and really skips work."""

    def run_script(self, speedups: str):
        proc = subprocess.run([sys.executable, "-c", UPDATE_SCRIPT, HERE, speedups], capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        stats = [line for line in proc.stderr.splitlines() if line.startswith("{")]
        return proc.stdout.splitlines(), eval(stats[-1].replace("true", "True").replace("false", "False"))  # noqa: S307

    def test_same_answers_with_and_without_speedups(self):
        fast, fast_stats = self.run_script("1")
        slow, slow_stats = self.run_script("0")
        self.assertEqual(len(fast), len(slow))
        for a, b in zip(fast, slow):
            self.assertEqual(a, b)
        joined = "\n".join(slow)
        for error in ("ValidationException", "ConditionalCheckFailed", "TransactionCanceledException"):
            self.assertIn(error, joined, "the cases must include this kind of failure")
        self.assertEqual(slow_stats["cached"], 0)
        self.assertGreater(fast_stats["cached"], 15)
        self.assertTrue(fast_stats["cached_trees_unchanged"], "a cached parse tree changed")
        # The static checks ran once per text, names and table (and again for failures).
        self.assertLess(fast_stats["static_runs"], slow_stats["static_runs"] / 2, (fast_stats, slow_stats))


class OpStatsLine(unittest.TestCase):
    def test_op_stats_are_printed(self):
        server = Server([sys.executable, SERVER], {"MOTO_TTL_SWEEP_SECS": "0", "MOTO_OP_STATS_SECS": "0.5"})
        try:
            ddb = server.client("dynamodb")
            create_table(ddb, "stats")
            for i in range(3):
                ddb.put_item(TableName="stats", Item=key("P", str(i)))
                ddb.get_item(TableName="stats", Key=key("P", str(i)), ConsistentRead=True)
            deadline = time.monotonic() + 10
            while True:
                time.sleep(0.6)
                server.log.seek(0)
                log = server.log.read().decode()
                counts = {}
                for line in re.findall(r"DynamoDB under the lock [0-9.]+ s in 0.5 s: (.*)", log):
                    for op, count in re.findall(r"(\w+) (\d+) x [0-9.]+ ms \(max [0-9.]+, wait [0-9.]+\)", line):
                        counts[op] = counts.get(op, 0) + int(count)
                if counts.get("GetItem") == 3 or time.monotonic() > deadline:
                    break
            self.assertIn("speed patches (9-12) installed", log)
            self.assertEqual((counts.get("PutItem"), counts.get("GetItem")), (3, 3), log)
        finally:
            server.close()

    def test_bad_speedups_knob_is_refused(self):
        proc = subprocess.run(
            [sys.executable, SERVER, "-p", str(free_port())],
            env={**os.environ, "MOTO_SPEEDUPS": "yes"}, capture_output=True, text=True, timeout=60,
        )
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("MOTO_SPEEDUPS must be 0 or 1", proc.stderr)


# --- S3 ---------------------------------------------------------------------------------

MIB = 1 << 20
# moto keeps an object up to 5 MiB - 1 KiB in memory, bigger ones in a temporary file
# (moto.settings.get_s3_default_key_buffer_size); 6 MiB covers the second kind.
S3_SIZES = [0, 1, 100, 64 * 1024, MIB + 3, 6 * MIB]
S3_SIZE_WEIGHTS = [2, 2, 4, 6, 3, 1]


def payload(tag: str, size: int) -> bytes:
    """Deterministic bytes of `size` for `tag` (different tags, different bytes)."""
    block = hashlib.sha256(tag.encode()).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


def s3_random_operations(seed: int, count: int):
    """A deterministic list of (operation, kwargs) over job-prefixed keys, like the shuffle's."""
    rng = random.Random(seed)
    keys = [f"lambdafusion/jobs/j{j}/stage-{s}/task-{t}/attempt-1.arrows"
            for j in range(2) for s in range(2) for t in range(3)] + ["lambdafusion/jobs/j0/result"]
    ops = []
    for i in range(count):
        kind = rng.randrange(20)
        k = rng.choice(keys)
        if kind < 5:
            size = rng.choices(S3_SIZES, S3_SIZE_WEIGHTS)[0]
            ops.append(("put", {"Key": k, "tag": f"{seed}/{i}", "size": size}))
        elif kind < 7:
            ops.append(("get", {"Key": k}))
        elif kind < 11:
            a, b = rng.randrange(0, 2 * MIB), rng.randrange(0, 2 * MIB)
            ops.append(("get", {"Key": k, "Range": rng.choice([
                f"bytes={min(a, b)}-{max(a, b)}",   # a slice (may run past the end)
                f"bytes={a % 70000}-{a % 70000 + 999}",
                f"bytes={a}-",                      # to the end
                f"bytes=-{b % 5000 + 1}",           # the last n bytes
                "bytes=0-0",
                f"bytes={b}-{a}",                   # begin after end: the whole object
                "bytes=-0",                         # InvalidRange
            ])}))
        elif kind < 12:
            ops.append(("head", {"Key": k}))
        elif kind < 15:
            prefix = rng.choice(["lambdafusion/jobs/", "lambdafusion/jobs/j0/", "lambdafusion/jobs/j1/stage-1/",
                                 "lambdafusion/jobs/j2/", ""])
            kwargs = {"Prefix": prefix, "MaxKeys": rng.choice([1, 3, 1000])}
            if rng.randrange(3) == 0:
                kwargs["Delimiter"] = "/"
            ops.append(("list", kwargs))
        elif kind < 17:
            ops.append(("delete", {"Key": k}))
        elif kind < 19:
            chosen = rng.sample(keys, rng.randrange(1, 6))
            ops.append(("delete_many", {"Keys": chosen}))
        else:
            ops.append(("multipart", {"Key": k, "tag": f"{seed}/{i}", "complete": rng.randrange(3) > 0,
                                      "last": rng.choice([1, 70000])}))
    return ops


def s3_error(e) -> tuple:
    err = e.response["Error"]
    return ("error", e.response["ResponseMetadata"]["HTTPStatusCode"], err.get("Code"), err.get("Message"))


def s3_run(s3, bucket: str, op: str, kwargs: dict):
    """Runs one S3 operation; returns what must match between servers."""
    from botocore.exceptions import ClientError

    try:
        if op == "put":
            out = s3.put_object(Bucket=bucket, Key=kwargs["Key"], Body=payload(kwargs["tag"], kwargs["size"]))
            return ("ok", out["ETag"])
        if op == "get":
            extra = {"Range": kwargs["Range"]} if "Range" in kwargs else {}
            out = s3.get_object(Bucket=bucket, Key=kwargs["Key"], **extra)
            body = out["Body"].read()
            return ("ok", out["ResponseMetadata"]["HTTPStatusCode"], hashlib.sha256(body).hexdigest(), len(body),
                    out["ContentLength"], out.get("ContentRange"), out["ETag"])
        if op == "head":
            out = s3.head_object(Bucket=bucket, Key=kwargs["Key"])
            return ("ok", out["ContentLength"], out["ETag"])
        if op == "list":
            pages = []
            token = None
            while True:
                extra = {"ContinuationToken": token} if token else {}
                out = s3.list_objects_v2(Bucket=bucket, **kwargs, **extra)
                pages.append((
                    [(o["Key"], o["Size"], o["ETag"]) for o in out.get("Contents", [])],
                    [p["Prefix"] for p in out.get("CommonPrefixes", [])],
                    out["KeyCount"], out["IsTruncated"], out.get("NextContinuationToken"),
                ))
                token = out.get("NextContinuationToken")
                if not out["IsTruncated"]:
                    return ("ok", pages)
        if op == "delete":
            out = s3.delete_object(Bucket=bucket, Key=kwargs["Key"])
            return ("ok", out["ResponseMetadata"]["HTTPStatusCode"])
        if op == "delete_many":
            out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in kwargs["Keys"]]})
            return ("ok", sorted(d["Key"] for d in out.get("Deleted", [])), out.get("Errors", []))
        if op == "multipart":
            key = kwargs["Key"]
            upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            parts = []
            for number, size in ((1, 5 * MIB), (2, kwargs["last"])):
                body = payload(f"{kwargs['tag']}/{number}", size)
                etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body)["ETag"]
                parts.append({"PartNumber": number, "ETag": etag})
            listed = s3.list_parts(Bucket=bucket, Key=key, UploadId=upload)["Parts"]
            listed = [(p["PartNumber"], p["Size"], p["ETag"]) for p in listed]
            if not kwargs["complete"]:
                s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
                return ("aborted", listed)
            out = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                               MultipartUpload={"Parts": parts})
            return ("completed", listed, out["ETag"])
    except ClientError as e:
        return s3_error(e)
    raise AssertionError(f"unknown operation {op}")


class S3Differential(unittest.TestCase):
    """moto_server.py answers S3 requests exactly like plain moto_server."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(PLAIN_MOTO):
            raise unittest.SkipTest(f"no {PLAIN_MOTO}")
        cls.plain = Server([PLAIN_MOTO])
        cls.patched = Server([sys.executable, SERVER], {"MOTO_TTL_SWEEP_SECS": "0"})

    @classmethod
    def tearDownClass(cls):
        cls.plain.close()
        cls.patched.close()

    def test_random_operations_same_answers_and_listing(self):
        bucket = "lambdafusion"
        ops = s3_random_operations(seed=11, count=400)
        results = {}
        for name, server in (("plain", self.plain), ("patched", self.patched)):
            s3 = server.client("s3")
            s3.create_bucket(Bucket=bucket)
            answers = [s3_run(s3, bucket, op, kwargs) for op, kwargs in ops]
            final = s3_run(s3, bucket, "list", {"Prefix": "", "MaxKeys": 1000})
            results[name] = (answers, final)
        plain, patched = results["plain"], results["patched"]
        outcomes = [(op, a[0], a[1] if a[0] in ("ok", "error") else None) for (op, _), a in zip(ops, plain[0])]
        # The sequence must exercise what it claims to.
        self.assertTrue(any(op == "get" and a[0] == "ok" and a[1] == 206 for (op, _), a in zip(ops, plain[0])),
                        "no ranged GET answered 206")
        self.assertIn(("get", "error", 404), outcomes, "no GET of a deleted or missing key")
        self.assertIn(("get", "error", 416), outcomes, "no unsatisfiable Range")
        self.assertTrue(any(a[0] == "completed" for a in plain[0]), "no completed multipart upload")
        self.assertTrue(any(a[0] == "aborted" for a in plain[0]), "no aborted multipart upload")
        self.assertTrue(any(op == "list" and a[0] == "ok" and len(a[1]) > 2 for (op, _), a in zip(ops, plain[0])),
                        "no paginated LIST")
        self.assertTrue(any(op == "get" and a[0] == "ok" and a[3] > 5 * MIB for (op, _), a in zip(ops, plain[0])),
                        "no GET of an object kept in a temporary file")
        for i, (a, b) in enumerate(zip(plain[0], patched[0])):
            self.assertEqual(a, b, f"answer to S3 operation {i}: {ops[i]}")
        self.assertEqual(plain[1], patched[1], "final listing")
        self.assertTrue(plain[1][1][0][0], "the final listing must not be empty")


class S3Memory(unittest.TestCase):
    """moto_server.py gives the memory of deleted and overwritten objects back."""

    ROUNDS = 4
    OBJECTS = 100  # 1 MiB each: 100 MiB live at the peak of a round

    @classmethod
    def setUpClass(cls):
        cls.server = Server([sys.executable, SERVER], {"MOTO_TTL_SWEEP_SECS": "0"})
        cls.s3 = cls.server.client("s3")

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def test_put_read_delete_rounds_return_rss_and_files(self):
        s3, bucket = self.s3, "memory"
        s3.create_bucket(Bucket=bucket)
        body = payload("memory", MIB)
        # Warm up moto (imports, first requests) before the baseline.
        s3.put_object(Bucket=bucket, Key="warm", Body=body)
        s3.get_object(Bucket=bucket, Key="warm", Range="bytes=0-9")["Body"].read()
        s3.delete_object(Bucket=bucket, Key="warm")
        base_rss, base_files = self.server.rss_mib(), self.server.open_files()
        after = []
        for r in range(self.ROUNDS):
            prefix = f"lambdafusion/jobs/r{r}/"
            for i in range(self.OBJECTS):
                key = f"{prefix}stage-0/task-{i}/attempt-1.arrows"
                s3.put_object(Bucket=bucket, Key=key, Body=body)
                got = s3.get_object(Bucket=bucket, Key=key, Range="bytes=1000-1999")["Body"].read()
                self.assertEqual(got, body[1000:2000])
            # An overwritten object (and a big one, kept in a temporary file) goes too.
            for i in range(20):
                s3.put_object(Bucket=bucket, Key=f"{prefix}overwritten", Body=body)
            s3.put_object(Bucket=bucket, Key=f"{prefix}big", Body=payload("big", 6 * MIB))
            peak = self.server.rss_mib()
            keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
            self.assertEqual(len(keys), self.OBJECTS + 2)
            half = len(keys) // 2
            for key in keys[:half]:
                s3.delete_object(Bucket=bucket, Key=key)
            out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[half:]]})
            self.assertEqual(len(out["Deleted"]), len(keys) - half)
            self.assertNotIn("Contents", s3.list_objects_v2(Bucket=bucket, Prefix=prefix))
            after.append(self.server.rss_mib())
            self.assertGreater(peak - base_rss, 60, "the objects must have been in moto's memory")
        growth = [round(a - base_rss) for a in after]
        self.assertLess(max(growth), 30, f"RSS above the baseline after each round's deletes (MiB): {growth}")
        self.assertLessEqual(self.server.open_files(), base_files, "temporary files of deleted objects left open")

    def test_reset_still_empties_s3(self):
        s3 = self.s3
        s3.create_bucket(Bucket="reset-me")
        s3.put_object(Bucket="reset-me", Key="k", Body=b"x" * 100)
        req = urllib.request.Request(f"{self.server.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=30).close()
        self.assertEqual(s3.list_buckets()["Buckets"], [])
        s3.create_bucket(Bucket="reset-me")
        s3.put_object(Bucket="reset-me", Key="k", Body=b"y")
        self.assertEqual(s3.get_object(Bucket="reset-me", Key="k")["Body"].read(), b"y")


# Run in a fresh interpreter: apply_patches changes moto's classes for the whole process.
RELEASE_SCRIPT = textwrap.dedent("""
    import gc, sys, weakref
    sys.path.insert(0, sys.argv[1])
    sys.dont_write_bytecode = True
    import moto_server
    moto_server.apply_patches(86400)
    from moto.s3.models import FakeKey, FakeMultipart, s3_backends

    s3 = s3_backends["123456789012"]["aws"]
    s3.create_bucket("release", "us-east-1")
    refs = {}

    def put(key, value):
        obj = s3.put_object("release", key, value)
        refs.setdefault(key, []).append((weakref.ref(obj), obj._value_buffer))

    put("deleted", b"a" * 1000)
    put("batch-1", b"b" * 1000)
    put("batch-2", b"c" * (6 << 20))  # kept in a temporary file
    put("overwritten", b"d" * 1000)
    put("overwritten", b"e" * 1000)
    put("kept", b"f" * 1000)
    s3.get_object("release", "deleted").value
    s3.delete_object("release", "deleted")
    s3.delete_objects("release", [{"Key": "batch-1"}, {"Key": "batch-2"}, {"Key": "missing"}])

    mp = s3.create_multipart_upload("release", "multi", {}, "STANDARD", {}, None, None, None)
    part1 = mp.set_part(1, b"g" * (5 << 20))
    part1_again = mp.set_part(1, b"h" * (5 << 20))  # a part uploaded twice
    part2 = mp.set_part(2, b"i" * 10)
    parts = [(weakref.ref(p), p._value_buffer) for p in (part1, part1_again, part2)]
    etags = [(1, part1_again.etag), (2, part2.etag)]
    del part1, part1_again, part2
    s3.complete_multipart_upload("release", mp.id, iter(etags))
    aborted = s3.create_multipart_upload("release", "aborted", {}, "STANDARD", {}, None, None, None)
    aborted_part = aborted.set_part(1, b"j" * 100)
    parts.append((weakref.ref(aborted_part), aborted_part._value_buffer))
    del aborted_part
    s3.abort_multipart_upload("release", aborted.id)
    del mp, aborted
    gc.collect()

    report = {}
    for key, versions in refs.items():
        report[key] = [(ref() is not None, buf.closed) for ref, buf in versions]
    report["parts"] = [buf.closed for _, buf in parts]
    report["multi"] = s3.get_object("release", "multi").value == b"h" * (5 << 20) + b"i" * 10
    report["tracked"] = len(FakeKey.instances_tracked) + len(FakeMultipart.instances_tracked)
    multi_parts = list(s3.get_object("release", "multi").multipart.parts.values())
    kept = s3.get_object("release", "kept")
    # POST /moto-api/reset: S3Backend.reset disposes what the buckets hold.
    s3.reset()
    report["reset_closed"] = kept._value_buffer.closed and all(p._value_buffer.closed for p in multi_parts)
    print(repr(report))
""")


class S3Release(unittest.TestCase):
    def test_dropped_objects_are_freed_and_closed(self):
        proc = subprocess.run([sys.executable, "-c", RELEASE_SCRIPT, HERE], capture_output=True, text=True,
                              timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        report = eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr
        gone = (False, True)  # (object still alive, buffer closed)
        self.assertEqual(report["deleted"], [gone], "DeleteObject")
        self.assertEqual(report["batch-1"], [gone], "DeleteObjects")
        self.assertEqual(report["batch-2"], [gone], "DeleteObjects, temporary file")
        self.assertEqual(report["overwritten"], [gone, (True, False)], "overwrite")
        self.assertEqual(report["kept"], [(True, False)])
        self.assertEqual(report["parts"], [True, True, True, True], "multipart parts (completed, re-uploaded, aborted)")
        self.assertTrue(report["multi"], "completed multipart object's bytes")
        self.assertEqual(report["tracked"], 0)
        self.assertTrue(report["reset_closed"], "reset disposes what the buckets hold")


if __name__ == "__main__":
    unittest.main()
