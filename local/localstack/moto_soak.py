#!/usr/bin/env python3
"""Soak test of a running moto_server.py: does a task commit stay cheap as the table grows?

Starts nothing itself. Point it at a moto_server (local/localstack/moto_server.py, or
plain moto_server) and give it that server's pid, so it can read the server's RSS from
/proc:

  moto_soak.py --endpoint http://127.0.0.1:5077 --pid 12345 --commits 3000

It creates a throwaway table shaped like setup.py's `resources` (pk/sk strings,
PAY_PER_REQUEST, stream NEW_IMAGE, TTL on `expires_at`) and drives the job store's
access pattern (aws/src/store/) on it, job after job of ~`--tasks-per-job` tasks:

* job creation: BatchWriteItem of the stage items (each with an inline `plan` of
  `--plan-bytes`) and of half the task items, then TransactWriteItems of two Puts
  (job item if absent, active-index item);
* per stage: conditional UpdateItem (claim); per task: conditional UpdateItem (start
  attempt), then the commit that is timed — TransactWriteItems of two Updates (task
  item `SET ...` if `attribute_not_exists(pk) OR #state <> :succeeded`, stage counter
  `ADD remaining -1`) followed by a strongly consistent GetItem of the counter;
* every `--duplicate-every`th commit is sent twice: the second must be cancelled with
  reasons [ConditionalCheckFailed, None] and must leave the counter alone (the
  rollback); every `--fail-every`th task fails once first (conditional UpdateItem);
* after each stage a consistent Query of the stage's task items; after each job an
  UpdateItem of the job item and a DeleteItem of the active-index item;
* meanwhile a thread polls DynamoDB Streams like the emulator's stream trigger
  (ListStreams / DescribeStream every 5 s, GetShardIterator LATEST once, GetRecords
  with Limit 100 every 250 ms) and checks that sequence numbers only increase;
* S3, as the shuffle does (core/src/shuffle, core/src/executor), in a throwaway bucket
  (unless `--object-bytes 0`): every task attempt PUTs one object of `--object-bytes`
  (default 64 KiB) at `lambdafusion/jobs/<job>/stage-<s>/task-<p>/attempt-<a>-<e>.arrows`
  and the commit is followed by a ranged GET of it (bytes checked); the second delivery
  of a duplicated commit writes its own object and deletes it with DeleteObject once
  its commit is cancelled; when a job ends, a LIST of its prefix must find every object
  written for it, and DeleteObjects (batches of 1000, as object_store's delete_stream)
  removes all but the result (the final stage's committed objects); results "expire"
  `--keep-results` jobs later (LIST, then one DeleteObject each).

Every `--window` commits it prints: commits so far, mean and p95 latency of the last
`--window` commits (the DynamoDB commit alone), mean latency of its S3 PUT + ranged GET,
the server's RSS, objects in the bucket, stream records read. It exits 1 if the last
window's mean latency is more than `--max-slowdown` (2.0) times the first window's, if
RSS grew by more than `--max-growth-mb` (200) over the run, not counting the objects
still in the bucket at the last window (unexpired results, the running job's), or if a
semantic check failed (counter off, cancellation reasons wrong, stream out of order or
short of the writes made, a ranged GET, LIST or DeleteObjects answer wrong); 2 on bad
arguments. The table and the bucket are deleted at the end unless `--keep-table`.

Only 127.0.0.1 / localhost endpoints with the dummy credentials test/test are used.
"""

import argparse
import base64
import hashlib
import os
import statistics
import sys
import threading
import time

REGION = "us-east-1"
DAY = 86400


def client(service: str, endpoint: str):
    import boto3  # installed with moto[server]
    from botocore.config import Config

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 1}, read_timeout=600),
    )


def rss_mb(pid: int) -> float:
    """Resident set size of `pid` in MiB, from /proc/PID/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def s(v) -> dict:
    return {"S": str(v)}


def n(v) -> dict:
    return {"N": str(v)}


class StreamPoller(threading.Thread):
    """Reads the table's stream the way local/emulator/src/streams.rs does."""

    def __init__(self, endpoint: str, table: str, interval: float = 0.25):
        super().__init__(daemon=True)
        self.streams = client("dynamodbstreams", endpoint)
        self.table = table
        self.interval = interval
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.records = 0
        self.by_event: dict[str, int] = {}
        self.errors: list[str] = []
        self.last_seq: int | None = None
        self.iterator: str | None = None
        self.arn: str | None = None
        self.shard: str | None = None

    def refresh(self) -> None:
        streams = self.streams.list_streams(TableName=self.table)["Streams"]
        if not streams:
            return
        arn = max(streams, key=lambda x: x["StreamLabel"])["StreamArn"]
        shards = self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        if self.iterator is None and shards:
            self.arn, self.shard = arn, shards[0]["ShardId"]
            self.iterator = self.streams.get_shard_iterator(
                StreamArn=arn, ShardId=self.shard, ShardIteratorType="LATEST"
            )["ShardIterator"]
            self.ready.set()

    def read(self) -> int:
        try:
            out = self.streams.get_records(ShardIterator=self.iterator, Limit=100)
        except self.streams.exceptions.ExpiredIteratorException:
            self.renew()
            return 0
        except self.streams.exceptions.TrimmedDataAccessException:
            self.renew()
            return 0
        self.iterator = out.get("NextShardIterator")
        for record in out["Records"]:
            seq = int(record["dynamodb"]["SequenceNumber"])
            if self.last_seq is not None and seq <= self.last_seq:
                self.errors.append(f"stream sequence number {seq} after {self.last_seq}")
            self.last_seq = seq
            self.records += 1
            name = record["eventName"]
            self.by_event[name] = self.by_event.get(name, 0) + 1
        return len(out["Records"])

    def renew(self) -> None:
        kwargs = {"StreamArn": self.arn, "ShardId": self.shard}
        if self.last_seq is None:
            kwargs["ShardIteratorType"] = "TRIM_HORIZON"
        else:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=str(self.last_seq))
        self.iterator = self.streams.get_shard_iterator(**kwargs)["ShardIterator"]

    def drain(self, timeout: float = 60) -> None:
        """Stops the thread, then reads until the stream has nothing more."""
        self.stop.set()
        self.join()
        deadline = time.monotonic() + timeout
        while self.iterator and time.monotonic() < deadline:
            if self.read() == 0:
                break

    def run(self) -> None:
        last_refresh = 0.0
        while not self.stop.is_set():
            try:
                if time.monotonic() - last_refresh >= 5 or self.iterator is None:
                    last_refresh = time.monotonic()
                    self.refresh()
                if self.iterator and self.read() == 100:
                    continue  # more waiting: read again at once
            except Exception as e:  # noqa: BLE001 - reported at the end
                self.errors.append(f"stream poll: {type(e).__name__}: {e}")
                self.ready.set()
            self.stop.wait(self.interval)


class Shuffle:
    """The shuffle's S3 traffic: one object per task attempt, ranged reads, job cleanup."""

    PREFIX = "lambdafusion/jobs"

    def __init__(self, soak: "Soak", endpoint: str, bucket: str, object_bytes: int, keep_results: int):
        self.soak = soak
        self.s3 = client("s3", endpoint)
        self.bucket = bucket
        self.size = object_bytes
        self.keep_results = keep_results
        self.filler = os.urandom(object_bytes)
        self.latencies: list[float] = []  # PUT + ranged GET of each committed attempt
        self.written: dict[str, set[str]] = {}  # job -> keys written and not deleted
        self.results: list[tuple[str, set[str]]] = []  # (job, result keys) not expired yet
        self.live = 0  # objects in the bucket
        self.executions = 0

    def create_bucket(self) -> None:
        self.s3.create_bucket(Bucket=self.bucket)

    def body(self, key: str) -> bytes:
        """The object's bytes: a digest of its key over the shared random filler."""
        head = hashlib.sha256(key.encode()).digest()
        return head[: self.size] + self.filler[len(head):]

    def key(self, job: str, st: int, p: int, attempt: int) -> str:
        self.executions += 1
        return f"{self.PREFIX}/{job}/stage-{st}/task-{p}/attempt-{attempt}-{self.executions:08x}.arrows"

    def put(self, job: str, key: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=self.body(key))
        self.written.setdefault(job, set()).add(key)
        self.live += 1

    def ranged_get(self, key: str) -> None:
        """Reads one slice as a shuffle reader does and checks its bytes."""
        digest = hashlib.sha256(key.encode()).digest()
        start = int.from_bytes(digest[:4], "big") % self.size
        end = min(self.size - 1, start + max(self.size // 8, 1) - 1)
        got = self.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end}")["Body"].read()
        self.soak.check(got == self.body(key)[start:end + 1], f"{key}: ranged GET {start}-{end} returned wrong bytes")

    def write(self, job: str, st: int, p: int, attempt: int) -> tuple[str, float]:
        """A task attempt's output, written before its commit; (key, seconds taken)."""
        key = self.key(job, st, p, attempt)
        t0 = time.perf_counter()
        self.put(job, key)
        return key, time.perf_counter() - t0

    def read(self, key: str, put_secs: float) -> None:
        """A consumer's ranged read of a committed output; records PUT + GET time."""
        t0 = time.perf_counter()
        self.ranged_get(key)
        self.latencies.append(put_secs + time.perf_counter() - t0)

    def delete_one(self, job: str, key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=key)
        self.written[job].discard(key)
        self.live -= 1

    def list_job(self, job: str) -> set[str]:
        keys = set()
        kwargs = {"Bucket": self.bucket, "Prefix": f"{self.PREFIX}/{job}/"}
        while True:
            out = self.s3.list_objects_v2(**kwargs)
            keys.update(o["Key"] for o in out.get("Contents", []))
            if not out.get("IsTruncated"):
                return keys
            kwargs["ContinuationToken"] = out["NextContinuationToken"]

    def end_job(self, job: str, result: set[str]) -> None:
        """The scheduler's cleanup: LIST the job, DeleteObjects all but the result."""
        listed = self.list_job(job)
        self.soak.check(listed == self.written.get(job, set()),
                        f"{job}: LIST found {len(listed)} objects, {len(self.written.get(job, ()))} were written")
        doomed = sorted(listed - result)
        for i in range(0, len(doomed), 1000):
            batch = doomed[i:i + 1000]
            out = self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch]})
            deleted = {d["Key"] for d in out.get("Deleted", [])}
            self.soak.check(deleted == set(batch) and not out.get("Errors"),
                            f"{job}: DeleteObjects deleted {len(deleted)} of {len(batch)}, errors {out.get('Errors')}")
        self.written[job] = listed & result
        self.live -= len(doomed)
        left = self.list_job(job)
        self.soak.check(left == self.written[job], f"{job}: after cleanup LIST found {len(left)}, expected {len(result)}")
        self.results.append((job, set(self.written[job])))
        while len(self.results) > self.keep_results:
            old, _ = self.results.pop(0)
            for key in sorted(self.list_job(old)):
                self.delete_one(old, key)
            self.check_gone(old)

    def check_gone(self, job: str) -> None:
        self.soak.check(not self.list_job(job), f"{job}: objects left after its result expired")
        del self.written[job]

    def drop_bucket(self) -> None:
        for job in list(self.written):
            for key in sorted(self.list_job(job)):
                self.delete_one(job, key)
        self.s3.delete_bucket(Bucket=self.bucket)


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.ddb = client("dynamodb", args.endpoint)
        self.table = args.table or f"moto-soak-{os.getpid()}-{int(time.time())}"
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.writes = 0  # writes that must show up in the stream
        self.plan = base64.b64encode(os.urandom(args.plan_bytes * 3 // 4)).decode()
        self.shuffle = None
        if args.object_bytes:
            bucket = args.bucket or f"moto-soak-{os.getpid()}-{int(time.time())}"
            self.shuffle = Shuffle(self, args.endpoint, bucket, args.object_bytes, args.keep_results)

    def create_table(self) -> None:
        self.ddb.create_table(
            TableName=self.table,
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
        self.ddb.get_waiter("table_exists").wait(
            TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
        )
        self.ddb.update_time_to_live(
            TableName=self.table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
        )

    def check(self, ok: bool, what: str) -> None:
        if not ok and len(self.failures) < 20:
            self.failures.append(what)
            print(f"CHECK FAILED: {what}", file=sys.stderr, flush=True)

    def update(self, key: dict, expr: str, cond: str | None, names: dict, values: dict) -> bool:
        kwargs = dict(
            TableName=self.table,
            Key=key,
            UpdateExpression=expr,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )
        if cond:
            kwargs["ConditionExpression"] = cond
        try:
            self.ddb.update_item(**kwargs)
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False
        self.writes += 1
        return True

    def create_job(self, job: str, stages: list[int], expires: int) -> None:
        pk = f"JOB#{job}"
        items = []
        for st, tasks in enumerate(stages):
            items.append({
                "pk": s(pk), "sk": s(f"STAGE#{st:05}"), "job_id": s(job), "stage": n(st),
                "state": s("PENDING"), "tasks": n(tasks), "remaining": n(tasks),
                "output_partitions": n(self.args.output_ends),
                "inputs": {"L": [{"M": {"stage": n(st - 1), "kind": s("Hash")}}] if st else []},
                "plan": s(self.plan), "summary": s(f"stage {st} of the soak"),
                "expires_at": n(expires),
            })
            for p in range(0, tasks, 2):
                items.append({
                    "pk": s(pk), "sk": s(f"TASK#{st:05}#{p:06}"), "job_id": s(job),
                    "stage": n(st), "partition": n(p), "state": s("RUNNING"),
                    "attempt": n(1), "retryable": {"BOOL": False}, "failures": n(0),
                    "expires_at": n(expires),
                })
        for i in range(0, len(items), 25):
            batch = [{"PutRequest": {"Item": it}} for it in items[i:i + 25]]
            out = self.ddb.batch_write_item(RequestItems={self.table: batch})
            self.check(not out.get("UnprocessedItems"), f"job {job}: unprocessed batch items")
            self.writes += len(batch)
        self.ddb.transact_write_items(TransactItems=[
            {"Put": {"TableName": self.table, "ConditionExpression": "attribute_not_exists(pk)",
                     "Item": {"pk": s(pk), "sk": s("META"), "job_id": s(job), "sql": s("SELECT soak"),
                              "state": s("RUNNING"), "stage_count": n(len(stages)),
                              "created_ms": n(int(time.time() * 1000)), "expires_at": n(expires)}}},
            {"Put": {"TableName": self.table,
                     "Item": {"pk": s("ACTIVE"), "sk": s(job), "expires_at": n(expires)}}},
        ])
        self.writes += 2

    def commit_request(self, pk: str, st: int, p: int, attempt: int, expires: int) -> list:
        now = int(time.time() * 1000)
        ends = {"L": [n(1000 * (i + 1)) for i in range(self.args.output_ends)]}
        output = {"M": {"attempt": n(attempt), "object": s(f"shuffle/{pk}/{st}/{p}/{attempt}"),
                        "ends": ends, "rows": n(12345), "bytes": n(67890),
                        "started_ms": n(now - 500), "finished_ms": n(now)}}
        return [
            {"Update": {
                "TableName": self.table,
                "Key": {"pk": s(pk), "sk": s(f"TASK#{st:05}#{p:06}")},
                "UpdateExpression": "SET #state = :v0, #output = :v1, #job_id = :v2, #stage = :v3, "
                                    "#partition = :v4, #expires_at = :v5, "
                                    "#attempt = if_not_exists(#attempt, :v6), "
                                    "#failures = if_not_exists(#failures, :v7), "
                                    "#retryable = if_not_exists(#retryable, :v8)",
                "ConditionExpression": "attribute_not_exists(pk) OR #state <> :v9",
                "ExpressionAttributeNames": {f"#{k}": k for k in (
                    "state", "output", "job_id", "stage", "partition", "expires_at",
                    "attempt", "failures", "retryable")},
                "ExpressionAttributeValues": {
                    ":v0": s("SUCCEEDED"), ":v1": output, ":v2": s(pk[4:]), ":v3": n(st),
                    ":v4": n(p), ":v5": n(expires), ":v6": n(attempt), ":v7": n(0),
                    ":v8": {"BOOL": False}, ":v9": s("SUCCEEDED")},
            }},
            {"Update": {
                "TableName": self.table,
                "Key": {"pk": s(pk), "sk": s(f"STAGE#{st:05}")},
                "UpdateExpression": "SET #last_commit_ms = :v1 ADD #remaining :v0",
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeNames": {"#remaining": "remaining", "#last_commit_ms": "last_commit_ms"},
                "ExpressionAttributeValues": {":v0": n(-1), ":v1": n(now)},
            }},
        ]

    def remaining(self, pk: str, st: int) -> int:
        item = self.ddb.get_item(
            TableName=self.table, Key={"pk": s(pk), "sk": s(f"STAGE#{st:05}")}, ConsistentRead=True
        )["Item"]
        return int(item["remaining"]["N"])

    def commit(self, pk: str, st: int, p: int, attempt: int, expires: int, expect_left: int) -> None:
        writes = self.commit_request(pk, st, p, attempt, expires)
        t0 = time.perf_counter()
        self.ddb.transact_write_items(TransactItems=writes)
        left = self.remaining(pk, st)
        self.latencies.append(time.perf_counter() - t0)
        self.writes += 2
        self.check(left == expect_left, f"{pk} stage {st} task {p}: remaining {left}, expected {expect_left}")

    def duplicate_commit(self, pk: str, st: int, p: int, attempt: int, expires: int, expect_left: int) -> None:
        writes = self.commit_request(pk, st, p, attempt, expires)
        try:
            self.ddb.transact_write_items(TransactItems=writes)
            self.check(False, f"{pk} stage {st} task {p}: duplicate commit was not cancelled")
            self.writes += 2
            return
        except self.ddb.exceptions.TransactionCanceledException as e:
            codes = [r.get("Code") for r in e.response.get("CancellationReasons", [])]
            self.check(codes == ["ConditionalCheckFailed", "None"],
                       f"{pk} stage {st} task {p}: cancellation reasons {codes}")
        left = self.remaining(pk, st)
        self.check(left == expect_left, f"{pk} stage {st} task {p}: after a cancelled commit remaining {left}, expected {expect_left}")

    def run_job(self, job_no: int, tasks: int, on_commit) -> None:
        a = self.args
        job = f"soak{job_no:05}"
        pk = f"JOB#{job}"
        expires = int(time.time()) + 7 * DAY
        stages = [min(a.stage_tasks, tasks - i) for i in range(0, tasks, a.stage_tasks)]
        self.create_job(job, stages, expires)
        shuffle = self.shuffle
        result: set[str] = set()  # the final stage's committed objects
        for st, count in enumerate(stages):
            claimed = self.update({"pk": s(pk), "sk": s(f"STAGE#{st:05}")},
                                  "SET #state = :v0, #dispatched_ms = :v1", "#state = :v2",
                                  {"#state": "state", "#dispatched_ms": "dispatched_ms"},
                                  {":v0": s("DISPATCHED"), ":v1": n(int(time.time() * 1000)), ":v2": s("PENDING")})
            self.check(claimed, f"{pk} stage {st}: claim failed")
            for p in range(count):
                attempt = 1
                key = {"pk": s(pk), "sk": s(f"TASK#{st:05}#{p:06}")}
                if a.fail_every and (job_no * 1000 + p) % a.fail_every == 0:
                    failed = self.update(
                        key,
                        "SET #state = :v0, #attempt = :v1, #error = :v2, #retryable = :v3, "
                        "#expires_at = :v4 ADD #failures :v5",
                        "attribute_not_exists(pk) OR (#state = :v6 AND #attempt = :v1)",
                        {f"#{k}": k for k in ("state", "attempt", "error", "retryable", "expires_at", "failures")},
                        {":v0": s("FAILED"), ":v1": n(1), ":v2": s("soak failure"), ":v3": {"BOOL": True},
                         ":v4": n(expires), ":v5": n(1), ":v6": s("RUNNING")})
                    self.check(failed, f"{pk} stage {st} task {p}: fail_attempt refused")
                    if shuffle:
                        shuffle.put(job, shuffle.key(job, st, p, 1))  # the failed attempt's output
                    attempt = 2
                    started = self.update(
                        key,
                        "SET #state = :v0, #attempt = :v1, #dispatched_ms = :v2, #expires_at = :v3",
                        "#state <> :v4 AND #attempt = :v5",
                        {f"#{k}": k for k in ("state", "attempt", "dispatched_ms", "expires_at")},
                        {":v0": s("RUNNING"), ":v1": n(2), ":v2": n(int(time.time() * 1000)),
                         ":v3": n(expires), ":v4": s("SUCCEEDED"), ":v5": n(1)})
                    self.check(started, f"{pk} stage {st} task {p}: start_attempt refused")
                if shuffle:
                    output, put_secs = shuffle.write(job, st, p, attempt)
                self.commit(pk, st, p, attempt, expires, count - p - 1)
                if shuffle:
                    shuffle.read(output, put_secs)
                    if st == len(stages) - 1:
                        result.add(output)
                on_commit()
                if a.duplicate_every and len(self.latencies) % a.duplicate_every == 0:
                    # A second delivery of the same attempt writes its own object, loses
                    # the commit and deletes that object (core/src/executor).
                    loser = shuffle.key(job, st, p, attempt) if shuffle else None
                    if loser:
                        shuffle.put(job, loser)
                    self.duplicate_commit(pk, st, p, attempt, expires, count - p - 1)
                    if loser:
                        shuffle.delete_one(job, loser)
                if len(self.latencies) >= a.commits:
                    if shuffle:
                        shuffle.end_job(job, result)
                    return
            items = self.ddb.query(
                TableName=self.table, ConsistentRead=True,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues={":pk": s(pk), ":prefix": s(f"TASK#{st:05}#")},
            )["Items"]
            self.check(len(items) == count and all(i["state"]["S"] == "SUCCEEDED" for i in items),
                       f"{pk} stage {st}: query found {len(items)} items, expected {count} succeeded")
        self.update({"pk": s(pk), "sk": s("META")}, "SET #state = :v0, #finished_ms = :v1", "#state = :v2",
                    {"#state": "state", "#finished_ms": "finished_ms"},
                    {":v0": s("SUCCEEDED"), ":v1": n(int(time.time() * 1000)), ":v2": s("RUNNING")})
        self.ddb.delete_item(TableName=self.table, Key={"pk": s("ACTIVE"), "sk": s(job)})
        self.writes += 1
        if shuffle:
            shuffle.end_job(job, result)


def window_stats(latencies: list[float]) -> tuple[float, float]:
    ms = sorted(x * 1000 for x in latencies)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return statistics.fmean(ms), p95


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="moto_server URL, http://127.0.0.1:PORT")
    parser.add_argument("--pid", type=int, required=True, help="pid of that moto_server (for RSS)")
    parser.add_argument("--commits", type=int, required=True, help="task commits to make")
    parser.add_argument("--tasks-per-job", type=int, default=200)
    parser.add_argument("--stage-tasks", type=int, default=100, help="tasks per stage")
    parser.add_argument("--plan-bytes", type=int, default=16384, help="size of each stage item's inline plan")
    parser.add_argument("--output-ends", type=int, default=32, help="slices per task output (its `ends` list)")
    parser.add_argument("--duplicate-every", type=int, default=50, help="send every Nth commit twice (0: never)")
    parser.add_argument("--fail-every", type=int, default=97, help="fail every Nth task once first (0: never)")
    parser.add_argument("--window", type=int, default=100, help="commits per reported window")
    parser.add_argument("--max-slowdown", type=float, default=2.0)
    parser.add_argument("--max-growth-mb", type=float, default=200.0)
    parser.add_argument("--no-poll", action="store_true", help="do not read the stream meanwhile")
    parser.add_argument("--table", help="table name (default: a new moto-soak-* name)")
    parser.add_argument("--keep-table", action="store_true", help="keep the table and the bucket")
    parser.add_argument("--object-bytes", type=int, default=65536,
                        help="size of each task attempt's S3 object (0: no S3 traffic)")
    parser.add_argument("--keep-results", type=int, default=2,
                        help="a job's result objects are deleted this many jobs later")
    parser.add_argument("--bucket", help="bucket name (default: a new moto-soak-* name)")
    args = parser.parse_args()
    if not args.endpoint.startswith(("http://127.0.0.1:", "http://localhost:")):
        print(f"moto_soak.py: refusing a non-local endpoint {args.endpoint}", file=sys.stderr)
        return 2
    if args.commits < args.window or args.window < 1 or args.stage_tasks < 1 or args.tasks_per_job < 1:
        print("moto_soak.py: need --commits >= --window >= 1 and positive task counts", file=sys.stderr)
        return 2
    if args.object_bytes < 0 or args.keep_results < 0:
        print("moto_soak.py: --object-bytes and --keep-results must be >= 0", file=sys.stderr)
        return 2
    try:
        rss_mb(args.pid)
    except OSError as e:
        print(f"moto_soak.py: cannot read the RSS of pid {args.pid}: {e}", file=sys.stderr)
        return 2

    soak = Soak(args)
    soak.create_table()
    if soak.shuffle:
        soak.shuffle.create_bucket()
    poller = None
    if not args.no_poll:
        poller = StreamPoller(args.endpoint, soak.table)
        poller.start()
        poller.ready.wait(30)
    rss0 = rss_mb(args.pid)
    where = f"table {soak.table}"
    if soak.shuffle:
        where += f", bucket {soak.shuffle.bucket} ({args.object_bytes} B per object)"
    print(f"{where}; server pid {args.pid} RSS {rss0:.0f} MiB before the first commit", flush=True)
    print(f"{'commits':>8} {'mean ms':>9} {'p95 ms':>9} {'S3 ms':>7} {'RSS MiB':>9} {'objects':>8} "
          f"{'stream recs':>12} {'elapsed s':>10}", flush=True)
    started = time.monotonic()
    rows = []

    def on_commit() -> None:
        done = len(soak.latencies)
        if done % args.window == 0:
            mean, p95 = window_stats(soak.latencies[-args.window:])
            rss = rss_mb(args.pid)
            recs = poller.records if poller else 0
            shuffle = soak.shuffle
            s3_ms = statistics.fmean(shuffle.latencies[-args.window:]) * 1000 if shuffle else 0.0
            objects = shuffle.live if shuffle else 0
            rows.append((done, mean, p95, rss, objects * args.object_bytes / (1 << 20)))
            print(f"{done:>8} {mean:>9.1f} {p95:>9.1f} {s3_ms:>7.1f} {rss:>9.0f} {objects:>8} {recs:>12} "
                  f"{time.monotonic() - started:>10.1f}", flush=True)

    job_no = 0
    while len(soak.latencies) < args.commits:
        soak.run_job(job_no, min(args.tasks_per_job, args.commits - len(soak.latencies)), on_commit)
        job_no += 1

    status = 0
    if poller:
        poller.drain()
        for e in poller.errors[:5]:
            soak.check(False, e)
        # LATEST was taken before the first write, so every write must have been read.
        soak.check(poller.records >= soak.writes,
                   f"stream: read {poller.records} records, expected at least {soak.writes} writes")
        print(f"stream: {poller.records} records read ({poller.by_event}); {soak.writes} writes made")
    first_mean = rows[0][1]
    last_mean = rows[-1][1]
    live_mb = rows[-1][4]
    growth = rows[-1][3] - rss0 - live_mb
    print(f"first window mean {first_mean:.1f} ms, last {last_mean:.1f} ms "
          f"(x{last_mean / first_mean:.2f}); RSS grew {rows[-1][3] - rss0:.0f} MiB, "
          f"{growth:.0f} MiB beyond the {live_mb:.0f} MiB of objects still in the bucket")
    if last_mean > args.max_slowdown * first_mean:
        print(f"FAIL: the last {args.window} commits are more than {args.max_slowdown}x slower than the first")
        status = 1
    if growth > args.max_growth_mb:
        print(f"FAIL: RSS grew by more than {args.max_growth_mb:.0f} MiB beyond the objects in the bucket")
        status = 1
    if soak.failures:
        print(f"FAIL: {len(soak.failures)} semantic check(s) failed, first: {soak.failures[0]}")
        status = 1
    if not args.keep_table:
        soak.ddb.delete_table(TableName=soak.table)
        if soak.shuffle:
            soak.shuffle.drop_bucket()
    return status


if __name__ == "__main__":
    sys.exit(main())
