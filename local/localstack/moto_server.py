"""moto_server for the local stack: DynamoDB serialized, DynamoDB and S3 kept cheap over long runs.

moto's DynamoDB is not safe under concurrent writers: TransactWriteItems backs up and
restores whole tables, so a cancelled transaction would undo writes other requests made
meanwhile. lambdafusion runs many conditional transactions at once (a duplicate commit,
the fast path and the stream both finishing a job), so this wrapper runs DynamoDB and
DynamoDB Streams requests one at a time (one lock, also taken by the TTL sweeper below).
S3 stays concurrent.

On top of that lock, monkeypatches of moto 5.2.5 (pinned in local/requirements.txt) fix
what made a long run (thousands of task commits) slower and slower until the kernel
killed moto (measured with local/localstack/moto_soak.py: each task commit added ~20 MB
of RSS and made every later commit ~1.5 ms slower):

1. moto's BaseModel remembers every instance it ever creates (for the /moto-api
   dashboard), so no DynamoDB item, stream record or shard iterator was ever freed, nor
   any S3 object: a deleted or overwritten object's data is released (moto closes its
   buffer), but its FakeKey with its FakeAcl/FakeGrant/FakeGrantee stayed, some 5 KB of
   RSS per PUT. DynamoDB, DynamoDB Streams and S3 models are no longer tracked (the
   dashboard does not list them); POST /moto-api/reset still empties S3.
2. TransactWriteItems deep-copied every table it touched, with its whole stream, as the
   rollback copy (O(table) per commit, and each copy leaked through 1.). It now copies
   only the items the transaction names; a cancelled transaction puts exactly those back
   and drops the stream records its partial writes emitted (DynamoDB emits none for a
   cancelled transaction). moto's own transaction logic (conditions, cancellation
   reasons) runs unchanged.
3. The rollback used to install the copied table as a new object with a new stream
   shard, so stream pollers holding iterators read the orphaned shard and saw nothing
   after the first cancelled transaction. The table now stays the same object.
4. Stream records were kept forever. Records older than MOTO_STREAM_RETENTION_SECS
   (default 86400, DynamoDB's 24 hours) are trimmed; reading them gives
   TrimmedDataAccessException, TRIM_HORIZON starts at the oldest kept record, as in AWS.
   GetRecords stays O(records returned), whatever the shard's length.
5. Every GetRecords stored a new shard iterator forever. Iterators now expire 15 minutes
   after they were handed out (as in AWS); using an expired or unknown one gives
   ExpiredIteratorException (the emulator then takes a new one).
6. Query by partition key sorted every item of the table to find one partition; it now
   looks at that partition only (same results).
7. TTL: moto never expired items. A background thread deletes, every
   MOTO_TTL_SWEEP_SECS (default 30; 0 turns it off), items whose TTL attribute (as set
   by UpdateTimeToLive) is a Number of epoch seconds in the past, emitting a REMOVE
   stream record with userIdentity {Type: Service, PrincipalId: dynamodb.amazonaws.com}
   like DynamoDB's TTL deletions. Non-Number values, and values more than five years in
   the past, are left alone, as DynamoDB does. AWS deletes within a few days; here it
   is within one sweep.
8. Freed S3 data went back to malloc but not to the kernel: glibc raises its mmap
   threshold to the size of the largest block freed so far (up to 32 MiB), after which
   object buffers and request bodies come from the heaps of the request threads, which
   keep what is freed (after rounds of putting, reading and deleting 100 x 1 MiB
   objects, RSS stayed 140-240 MiB above its start; malloc_trim(0) would give it back).
   On glibc the threshold is now fixed at 128 KiB (MALLOC_MMAP_THRESHOLD_ in the
   environment overrides it): every block that large is its own mapping, unmapped when
   freed (the same rounds leave RSS 3-6 MiB above its start).

Usage: python moto_server.py -H 127.0.0.1 -p 5050   (same flags as moto_server)
Environment: MOTO_STREAM_RETENTION_SECS, MOTO_TTL_SWEEP_SECS (seconds, see above),
MALLOC_MMAP_THRESHOLD_ (bytes, glibc's own; see 8.).
"""

import argparse
import copy
import ctypes
import inspect
import math
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections import deque

from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.core.common_models import BaseModel
from moto.core.exceptions import JsonRESTError
import moto.dynamodb.models as ddb_models
from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import StreamShard, Table
from moto.dynamodbstreams.models import DynamoDBStreamsBackend, ShardIterator

# Every DynamoDB and DynamoDB Streams request, and the TTL sweeper, hold this lock.
# The patches below rely on it: nothing else runs while one of them is at work.
DYNAMODB_LOCK = threading.Lock()

# A shard iterator expires 15 minutes after it is returned (DynamoDB Streams API
# reference, GetShardIterator:
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_streams_GetShardIterator.html).
ITERATOR_LIFETIME_SECS = 15 * 60

# "A TTL more than five years in the past is not eligible for expiry and deletion" and
# "items with a TTL attribute that is not a Number type are ignored"
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/time-to-live-ttl-before-you-start.html,
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TTL.html).
TTL_MAX_AGE_SECS = 5 * 365 * 86400

# userIdentity of a TTL deletion's stream record (botocore's dynamodbstreams model,
# shape Identity: "For Time To Live, the principalId is dynamodb.amazonaws.com" and
# "the type is Service").
TTL_IDENTITY = {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}


def env_seconds(name: str, default: float, allow_zero: bool = False) -> float:
    """A non-negative number of seconds from the environment, or exit naming the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        need = "a number >= 0" if allow_zero else "a number > 0"
        sys.exit(f"moto_server.py: {name} must be {need} of seconds, not {raw!r}")
    return value


# --- 1. no instance tracking for DynamoDB and S3 models -----------------------------

# S3: every PUT made a FakeKey plus the FakeAcl, FakeGrant and FakeGrantee of its canned
# "private" ACL (moto.s3.models.FakeKey.__init__ calls get_canned_acl), all tracked. The
# key's data is not the problem: moto closes its SpooledTemporaryFile (FakeKey.dispose)
# when DeleteObject, DeleteObjects (both through _VersionedKeyStore.pop) or an overwrite
# (_VersionedKeyStore.setlist) drops it, and when a multipart upload is completed or
# aborted (MultipartDict.__delitem__); but the tracked FakeKey (~5 KB) stayed forever.
# Untracked, it is freed as soon as moto drops it (FakeKey.__del__ disposes one that
# moto dropped without doing so). S3Backend.reset, the one other reader of
# FakeKey/FakeMultipart.instances_tracked, disposes what is in the buckets itself; the
# lists only added keys that were disposed already.
UNTRACKED_SERVICES = {"dynamodb", "dynamodbstreams", "s3"}
_tracking_new = BaseModel.__new__


def _new_model(cls, *args, **kwargs):
    """BaseModel.__new__ without the `instances_tracked` list for DynamoDB and S3 models.

    moto.core.common_models.BaseModel.__new__ appends every instance to
    `cls.instances_tracked` and nothing ever removes it (only POST /moto-api/reset), so
    every Item (each write and each copy of one), StreamRecord, ShardIterator and S3
    FakeKey (with its ACL objects) lived until the process died. The service is the
    second part of the module name, as in moto.core.base_backend.InstanceTrackerMeta.
    """
    if cls.__module__.split(".")[1] in UNTRACKED_SERVICES:
        return object.__new__(cls)
    return _tracking_new(cls, *args, **kwargs)


# --- 2./3. transactions copy and restore only the items they touch ------------------

_transaction_depth = 0  # > 0 while moto's transact_write_items runs (under the lock)


class _CopyModule:
    """Stands in for the `copy` module inside moto.dynamodb.models (only there).

    moto's DynamoDBBackend.transact_write_items starts with
    `original_table_state[name] = copy.deepcopy(self.tables[name])` and, on failure,
    `self.tables[name] = original_table_state[name]`. While a transaction runs, a
    Table "copies" to itself, making both lines no-ops; `_transact_write_items` does the
    backup and rollback instead, item by item. Every other deepcopy (update_item's copy
    of the old item) is the real one.
    """

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(x, memo=None, _nil=None):
        if _transaction_depth and isinstance(x, Table):
            return x
        return copy.deepcopy(x, memo)


_moto_transact_write_items = DynamoDBBackend.transact_write_items


def _transaction_keys(backend, transact_items):
    """(table, hash key, range key) of every item the transaction names, if resolvable.

    Keys the way moto's transact_write_items does (a Put's key from its Item, otherwise
    `Key`); an unknown table or a malformed key is skipped - moto fails that operation
    before writing anything for it.
    """
    keys = []
    for entry in transact_items:
        try:
            op = next(iter(entry.values()))
            table = backend.get_table(op["TableName"])
            if "Put" in entry:
                attrs = op["Item"]
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]
            hash_key, range_key = backend.get_keys_value(table, key)
        except Exception:  # noqa: BLE001 - moto reports it when it runs the operation
            continue
        keys.append((table, hash_key, range_key))
    return keys


def _stored(table, hash_key, range_key):
    """The item stored under a key, or None (without creating an empty partition)."""
    partition = table.items.get(hash_key)
    if range_key is None:
        return partition
    return partition.get(range_key) if partition is not None else None


def _store(table, hash_key, range_key, item):
    """Puts `item` (or, for None, nothing) under a key, as moto's put/delete do."""
    if range_key is None:
        if item is None:
            table.items.pop(hash_key, None)
        else:
            table.items[hash_key] = item
    elif item is None:
        partition = table.items.get(hash_key)
        if partition is not None:
            partition.pop(range_key, None)
    else:
        table.items[hash_key][range_key] = item


def _transact_write_items(self, transact_items):
    """DynamoDBBackend.transact_write_items with an item-level rollback.

    Before moto's own code runs: a deep copy of each item the transaction names (None
    when absent) and the length of each touched table's stream. If moto's code raises
    (TransactionCanceledException with the per-item reasons, or a validation error),
    those items are put back exactly and the stream records the partial writes emitted
    are dropped, so a cancelled transaction leaves no trace, as in DynamoDB. The table
    and its stream shard stay the same objects, so open shard iterators keep working.
    Cost: O(items named), not O(table).
    """
    global _transaction_depth
    keys = _transaction_keys(self, transact_items)
    saved = [(t, h, r, copy.deepcopy(_stored(t, h, r))) for t, h, r in keys]
    streams = {}
    for table, _, _ in keys:
        if table.stream_shard is not None and id(table) not in streams:
            streams[id(table)] = (table.stream_shard, len(table.stream_shard.items))
    _transaction_depth += 1
    try:
        return _moto_transact_write_items(self, transact_items)
    except BaseException:
        # Reverse order: if a key were named twice, its oldest copy wins (moto rejects
        # that case anyway, with ValidationException, before writing it twice).
        for table, hash_key, range_key, item in reversed(saved):
            _store(table, hash_key, range_key, item)
        for shard, length in streams.values():
            items = shard.items
            if isinstance(items, StreamLog):
                items.truncate(length)
            else:
                del items[length:]
        raise
    finally:
        _transaction_depth -= 1


# --- 4. stream records: bounded by retention, O(k) reads ----------------------------


class StreamLog:
    """Replaces StreamShard.items, moto's list of every StreamRecord ever emitted.

    It behaves like that list for moto's code, with logical indices that never shift:
    `len()` counts every record appended (so sequence numbers, which moto derives from
    it, stay unique and increasing), `append`, and slices `[i:j]` of logical indices.
    Records older than the retention are dropped from the front (`first` is then the
    logical index of the oldest kept one); the dropped prefix of the backing list is
    compacted once it is more than half of it, so trimming is amortized O(1) and a slice
    costs O(its length).
    """

    def __init__(self, retention_secs: float):
        self.retention = retention_secs
        self._entries = []  # (monotonic time appended, StreamRecord); None once trimmed
        self._head = 0  # index in _entries of the oldest kept record
        self.first = 0  # logical index of the oldest kept record

    def __len__(self) -> int:
        return self.first + len(self._entries) - self._head

    def __bool__(self) -> bool:
        return len(self._entries) > self._head

    def kept(self) -> int:
        """Records currently held."""
        return len(self._entries) - self._head

    def append(self, record) -> None:
        self.trim()
        self._entries.append((time.monotonic(), record))

    def trim(self) -> None:
        """Drops the records older than the retention."""
        horizon = time.monotonic() - self.retention
        entries = self._entries
        while self._head < len(entries) and entries[self._head][0] < horizon:
            entries[self._head] = None
            self._head += 1
            self.first += 1
        if self._head > 64 and self._head * 2 > len(entries):
            del entries[: self._head]
            self._head = 0

    def truncate(self, length: int) -> None:
        """Drops the newest records until `len(self) == length` (a transaction's rollback)."""
        keep = self._head + max(length - self.first, 0)
        del self._entries[keep:]

    def _physical(self, logical: int) -> int:
        return self._head + max(logical - self.first, 0)

    def __getitem__(self, key):
        if isinstance(key, slice):
            if key.step not in (None, 1):
                raise ValueError("StreamLog slices take no step")
            start = self._physical(key.start or 0)
            stop = len(self._entries) if key.stop is None else self._physical(key.stop)
            return [entry[1] for entry in self._entries[start:stop]]
        if key < 0:
            key += len(self)
        if not self.first <= key < len(self):
            raise IndexError("stream record trimmed or not yet written")
        return self._entries[self._physical(key)][1]

    def __iter__(self):
        return (entry[1] for entry in self._entries[self._head :])


STREAM_RETENTION_SECS = 86400.0  # set from MOTO_STREAM_RETENTION_SECS in main()
_moto_shard_init = StreamShard.__init__
_moto_shard_add = StreamShard.add
_moto_shard_get = StreamShard.get


def _shard_init(self, account_id, table):
    _moto_shard_init(self, account_id, table)
    self.items = StreamLog(STREAM_RETENTION_SECS)


def _shard_add(self, old, new):
    _moto_shard_add(self, old, new)
    # moto's add replaces the list with [] after handing records to a moto Lambda
    # event-source mapping (not used by the local stack); keep it a StreamLog.
    if not isinstance(self.items, StreamLog):
        log = StreamLog(STREAM_RETENTION_SECS)
        for record in self.items:
            log.append(record)
        self.items = log


def _trimmed(message: str) -> JsonRESTError:
    return JsonRESTError("TrimmedDataAccessException", message)


def _horizon(shard) -> int:
    """Sequence number of the oldest record still kept (or of the next one)."""
    shard.items.trim()
    return shard.starting_sequence_number + shard.items.first


def _shard_get(self, start, quantity):
    """StreamShard.get (GetRecords), refusing positions that were trimmed."""
    if start < _horizon(self):
        raise _trimmed(
            f"sequence number {start} is older than the oldest record kept "
            f"({_horizon(self)}; MOTO_STREAM_RETENTION_SECS={self.items.retention:g})"
        )
    return _moto_shard_get(self, start, quantity)


# --- 5. shard iterators expire ------------------------------------------------------

_moto_iterator_init = ShardIterator.__init__
_moto_get_shard_iterator = DynamoDBStreamsBackend.get_shard_iterator


def _iterator_init(self, streams_backend, stream_shard, shard_iterator_type, sequence_number=None):
    _moto_iterator_init(self, streams_backend, stream_shard, shard_iterator_type, sequence_number)
    if shard_iterator_type == "TRIM_HORIZON":
        # moto starts at the shard's first sequence number ever; AWS at the oldest kept.
        self.sequence_number = max(self.sequence_number, _horizon(stream_shard))
    self.issued = time.monotonic()
    queue = streams_backend.__dict__.setdefault("_iterators_by_age", deque())
    queue.append((self.issued, self.arn))


def _expire_iterators(backend) -> None:
    """Forgets iterators handed out more than ITERATOR_LIFETIME_SECS ago (oldest first)."""
    queue = backend.__dict__.get("_iterators_by_age")
    if not queue:
        return
    deadline = time.monotonic() - ITERATOR_LIFETIME_SECS
    while queue and queue[0][0] < deadline:
        _, arn = queue.popleft()
        it = backend.shard_iterators.get(arn)
        if it is not None and it.issued < deadline:
            del backend.shard_iterators[arn]


def _get_shard_iterator(self, arn, shard_id, shard_iterator_type, sequence_number=None):
    _expire_iterators(self)
    iterator = _moto_get_shard_iterator(self, arn, shard_id, shard_iterator_type, sequence_number)
    if shard_iterator_type in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
        horizon = _horizon(iterator.stream_shard)
        if iterator.sequence_number < horizon:
            self.shard_iterators.pop(iterator.arn, None)
            raise _trimmed(
                f"sequence number {sequence_number} is older than the trim point {horizon}"
            )
    return iterator


def _get_records(self, iterator_arn, limit):
    """DynamoDBStreamsBackend.get_records; moto answered an unknown iterator with a 500."""
    _expire_iterators(self)
    iterator = self.shard_iterators.get(iterator_arn)
    if iterator is None:
        raise JsonRESTError(
            "ExpiredIteratorException",
            f"Iterator expired (older than {ITERATOR_LIFETIME_SECS // 60} minutes) or never issued",
        )
    return iterator.get(limit)


# --- 6. Query looks at one partition ------------------------------------------------

_moto_query = Table.query
_QUERY_SIGNATURE = inspect.signature(_moto_query)


def _query(self, *args, **kwargs):
    """Table.query; a table (not index) Query sees only its partition's items.

    moto's Table.query, without an index, filters `self.all_items()` - every item of
    the table, sorted - down to `item.hash_key == hash_key`, then sorts those by range
    key. Shadowing `all_items` for this call with the partition's items gives the same
    list at O(partition) cost. Index queries are untouched.
    """
    bound = _QUERY_SIGNATURE.bind(self, *args, **kwargs)
    hash_key = bound.arguments.get("hash_key")
    if bound.arguments.get("index_name") or not isinstance(hash_key, DynamoType):
        return _moto_query(self, *args, **kwargs)
    partition = self.items.get(hash_key)
    if partition is None:
        candidates = []
    elif self.range_key_attr is not None:
        candidates = list(partition.values())
    else:
        candidates = [partition]
    self.all_items = lambda: candidates
    try:
        return _moto_query(self, *args, **kwargs)
    finally:
        del self.all_items


# --- 7. TTL -------------------------------------------------------------------------


def _ttl_seconds(value) -> float | None:
    """The TTL attribute's epoch seconds if it is a Number, else None (ignored)."""
    if value is None or value.type != "N":
        return None
    try:
        return float(value.value)
    except (TypeError, ValueError):
        return None


def sweep_ttl(now: float) -> int:
    """Deletes expired items from every table with TTL enabled; returns how many.

    Call with DYNAMODB_LOCK held. Also trims stream records past retention and drops
    partitions left empty, so an idle server gives memory back too.
    """
    deleted = 0
    for _, _, backend in list(dynamodb_backends.iter_backends()):
        for table in list(backend.tables.values()):
            ttl = table.ttl
            attr = ttl.get("AttributeName")
            if ttl.get("TimeToLiveStatus") == "ENABLED" and attr:
                expired = []
                for hash_key, partition in table.items.items():
                    items = partition.values() if table.range_key_attr else [partition]
                    for item in items:
                        at = _ttl_seconds(item.attrs.get(attr))
                        if at is not None and now - TTL_MAX_AGE_SECS <= at < now:
                            expired.append((hash_key, item.range_key))
                for hash_key, range_key in expired:
                    shard = table.stream_shard
                    before = len(shard.items) if shard is not None else 0
                    table.delete_item(hash_key, range_key)
                    deleted += 1
                    if shard is not None and len(shard.items) > before:
                        shard.items[-1].record["userIdentity"] = dict(TTL_IDENTITY)
            if table.range_key_attr:
                for hash_key in [h for h, p in table.items.items() if not p]:
                    del table.items[hash_key]
            if table.stream_shard is not None and isinstance(table.stream_shard.items, StreamLog):
                table.stream_shard.items.trim()
    return deleted


def ttl_sweeper(interval: float) -> None:
    """Runs sweep_ttl every `interval` seconds, under DYNAMODB_LOCK, forever."""
    while True:
        time.sleep(interval)
        try:
            with DYNAMODB_LOCK:
                sweep_ttl(time.time())
        except Exception:  # noqa: BLE001 - keep sweeping; say what went wrong
            print("moto_server.py: TTL sweep failed:", file=sys.stderr)
            traceback.print_exc()


# --- 8. large freed blocks go back to the kernel -----------------------------------

M_MMAP_THRESHOLD = -3  # mallopt parameter number, from glibc's <malloc.h>
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MIN, its start value


def fix_mmap_threshold() -> str:
    """Fixes glibc's mmap threshold at MMAP_THRESHOLD_BYTES; returns what was done.

    glibc serves blocks of at least the threshold with their own mmap, unmapped when
    freed. The threshold starts at 128 KiB but, by default, rises to the size of any
    such block that is freed (up to 32 MiB on 64-bit), after which S3 object buffers
    (an object up to 5 MiB is one block, the BytesIO of its SpooledTemporaryFile) and
    request bodies come from the heap of whichever werkzeug thread served the request,
    and those heaps keep what is freed (RSS stayed at the peak of live S3 data).
    Setting M_MMAP_THRESHOLD turns that adjustment off (mallopt(3), M_MMAP_THRESHOLD
    and "dynamic mmap threshold"). Left alone when not on glibc, or when
    MALLOC_MMAP_THRESHOLD_ or a glibc.malloc.mmap_threshold tunable is set (glibc then
    uses that value, fixed, already).
    """
    if platform.libc_ver()[0] != "glibc":
        return "not glibc: allocator left alone"
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "mmap_threshold" in os.environ.get("GLIBC_TUNABLES", ""):
        return "glibc mmap threshold from the environment"
    if ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
        return "mallopt(M_MMAP_THRESHOLD) refused: allocator left alone"
    return f"glibc mmap threshold fixed at {MMAP_THRESHOLD_BYTES // 1024} KiB"


def apply_patches(stream_retention_secs: float) -> None:
    """Installs patches 1-6 (see the module docs; main() adds 7 and 8). Call it once."""
    global STREAM_RETENTION_SECS
    STREAM_RETENTION_SECS = stream_retention_secs
    BaseModel.__new__ = staticmethod(_new_model)
    ddb_models.copy = _CopyModule()
    DynamoDBBackend.transact_write_items = _transact_write_items
    StreamShard.__init__ = _shard_init
    StreamShard.add = _shard_add
    StreamShard.get = _shard_get
    ShardIterator.__init__ = _iterator_init
    DynamoDBStreamsBackend.get_shard_iterator = _get_shard_iterator
    DynamoDBStreamsBackend.get_records = _get_records
    Table.query = _query


class SerializeDynamoDB:
    """WSGI middleware: DynamoDB (and Streams) requests hold DYNAMODB_LOCK end to end."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB"):
            return self.app(environ, start_response)
        with DYNAMODB_LOCK:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close:
                    close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5050)
    args = parser.parse_args()
    retention = env_seconds("MOTO_STREAM_RETENTION_SECS", 86400.0)
    sweep_every = env_seconds("MOTO_TTL_SWEEP_SECS", 30.0, allow_zero=True)
    apply_patches(retention)
    print(f"moto_server.py: {fix_mmap_threshold()}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if sweep_every > 0:
        threading.Thread(target=ttl_sweeper, args=(sweep_every,), name="ttl-sweeper", daemon=True).start()
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        SerializeDynamoDB(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
