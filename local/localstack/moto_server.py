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

With DynamoDB serialized, moto's time per request is the local stack's DynamoDB
throughput. Patches 9-12 make it shorter without changing an answer: each replaces a
piece of moto 5.2.5 by code that does the same thing faster (or skips work whose result
cannot be seen), so they are installed only on that version, and MOTO_SPEEDUPS=0 turns
them off. Measured by replaying in-process the 1,387 DynamoDB requests of six TPC-H
queries run four at a time on the local stack: 10.7 s -> 2.5 s of CPU; and on single
requests shaped like those of aws/src/store/ (before -> after, about): an UpdateItem that
creates a task item 13 -> 4.7 ms, a counter's commit 7 -> 3 ms, a consistent GetItem of
a task item 6 -> 1.1 ms, a Query page of 100 from a partition of 1,200 task items
570 -> 38 ms, GetRecords of 100 task items' records 200 -> 11 ms.

9. Answers: moto 5.2.5 serializes every answer by walking its botocore output shape
   generically, asking six alias providers for each member of each structure - ten per
   AttributeValue of every item. For DynamoDB and Streams, the member lookups of plain
   dicts are cached per shape, and results made of plain dicts, lists and scalars are
   serialized by closures compiled once per shape that do what moto's methods do (same
   bytes); anything else goes through moto's code. DynamoResult's conversion of items to
   dicts takes shortcuts for plain values.
10. Plumbing: moto listed its own package directory (~200 stat calls) and ran
   inspect.getmembers over the handler class for every request; both answers are kept.
11. Update expressions: moto parses each UpdateExpression two or three times per
   request, deep-copies the tree, and validates it with ten traversals, three of which
   only check things that depend on the text, the names and the table (one re-walks
   every subtree). The parse and its regex rewrite are cached per text, the copy is an
   unpickling of the cached tree, the three static checks are skipped once they passed
   for the same text, names and table, and the traversals stop rebuilding dicts and
   calling ABCMeta.__instancecheck__ for every node.
12. Sizes: DynamoType.size rebuilt every nested map and list to size it (for every
   attribute, each time one was set); it now adds up the same numbers in place. And in
   6., a Query gets its partition in range-key order with the items before its
   ExclusiveStartKey left out, sizes each item once and does not deep-copy the page it
   only reads.

Usage: python moto_server.py -H 127.0.0.1 -p 5050   (same flags as moto_server)
Environment: MOTO_STREAM_RETENTION_SECS, MOTO_TTL_SWEEP_SECS (seconds, see above),
MALLOC_MMAP_THRESHOLD_ (bytes, glibc's own; see 8.), MOTO_SPEEDUPS (1, the default, or
0: patches 9-12 and the speed part of 6 off), MOTO_OP_STATS_SECS (default 0, off: every
that many seconds, print per operation the count and mean / max milliseconds under the
DynamoDB lock; see OpStats).
"""

import argparse
import bisect
import copy
import copyreg
import ctypes
import inspect
import math
import os
import pickle
import platform
import re
import signal
import sys
import threading
import time
import traceback
from collections import deque
from decimal import Decimal
from enum import Enum

import moto
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
import moto.backends as moto_backends
from moto.core import responses as moto_responses
from moto.core import serialize as moto_serialize
from moto.core.common_models import BaseModel
from moto.core.exceptions import JsonRESTError
from moto.dynamodb.comparisons import OpDefault
import moto.dynamodb.models as ddb_models
from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType, Item
import moto.dynamodb.models.table as ddb_table_module
from moto.dynamodb.models.table import StreamShard, Table
import moto.dynamodb.models.utilities as ddb_utilities
from moto.dynamodb.models.utilities import bytesize
import moto.dynamodb.responses as ddb_responses
from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser
from moto.dynamodb.parsing.ast_nodes import Node as AstNode
from moto.dynamodb.parsing.expressions import UpdateExpressionParser
import moto.dynamodb.parsing.validators as ddb_validators
from moto.dynamodb.parsing.validators import (
    ActionCountValidator,
    OverlappingPathsValidator,
    UpdateExpressionValidator,
    UpdateHashRangeKeyValidator,
)
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
    """Table.query; a table (not index) Query sees only its partition's items, sorted.

    moto's Table.query, without an index, filters `self.all_items()` - every item of
    the table, sorted - down to `item.hash_key == hash_key`, then sorts those by range
    key. Shadowing `all_items` for this call with the partition's items gives the same
    list at O(partition) cost. Index queries are untouched.

    With the speed patches on (_SPEEDUPS, see 9.), four shortcuts more; the partition
    can hold ~1,200 task items, and the store pages through it with ExclusiveStartKey
    and Limit:

    * The items are handed over already in range-key order: sorted by
      `range_key.cast_value`, which is exactly what DynamoType.__lt__ compares, so
      moto's own (stable) sort finds them in order and keeps them there. Range keys of
      one partition are distinct, so the order is the one moto would produce.
    * With an ExclusiveStartKey, moto walks that order from the start and skips items
      while Table._item_comes_before_dct says they come before the key (building two
      DynamoTypes per attribute per item). The same test, with moto's own DynamoType
      comparisons, is made here once per item with the key's values built once, and the
      skipped run is left out of what moto gets; moto then tests the first item it sees,
      finds it does not come before the key, and goes on as it would have. Skipped
      items are not counted in ScannedCount either way.

    If anything here raises (a malformed key, values that do not compare), moto gets the
    partition as it is and decides (and raises) itself.

    * Each item of the page is sized once, not twice (_item_size), and the page is not
      deep-copied before being turned into the answer (_TableCopyModule).
    """
    bound = _QUERY_SIGNATURE.bind(self, *args, **kwargs)
    args_ = bound.arguments
    hash_key = args_.get("hash_key")
    if args_.get("index_name") or not isinstance(hash_key, DynamoType):
        return _moto_query(self, *args, **kwargs)
    partition = self.items.get(hash_key)
    if partition is None:
        candidates = []
    elif self.range_key_attr is not None:
        candidates = list(partition.values())
        if _SPEEDUPS:
            try:
                candidates = _ordered_after_start(
                    self, candidates, args_.get("exclusive_start_key"), args_.get("scan_index_forward")
                )
            except Exception:  # noqa: BLE001 - moto sorts and skips (or raises) itself
                pass
    else:
        candidates = [partition]
    global _query_shares_results, _query_item_sizes
    self.all_items = lambda: candidates
    if not _SPEEDUPS:
        try:
            return _moto_query(self, *args, **kwargs)
        finally:
            del self.all_items
    # Only DynamoHandler.query (through DynamoDBBackend.query) calls Table.query, and it
    # only reads the items it gets back (Item.attrs into DynamoResult, which builds new
    # dicts); with no projection or filter, Table.query's deep copy of the page is read
    # once and dropped (see _TableCopyModule). No FilterExpression is an OpDefault.
    _query_shares_results = not args_.get("projection_expressions") and type(
        args_.get("filter_expression")
    ) in (type(None), OpDefault)
    _query_item_sizes = {}
    try:
        return _moto_query(self, *args, **kwargs)
    finally:
        _query_shares_results = False
        _query_item_sizes = None
        del self.all_items


_SPEEDUPS = False  # set by apply_patches: the speed parts of 6 and patches 9-12 are on
_query_shares_results = False  # True while _query runs moto's Table.query (under the lock)
_query_item_sizes: dict[int, int] | None = None  # Item.size per item, while _query runs
_moto_item_size = Item.size


def _item_size(self) -> int:
    """Item.size, computed once per item during a Query.

    Table.query sizes every item of the page twice (against the 1 MB page limit, then
    adding it up). Nothing changes an item while a Query runs (all DynamoDB requests
    hold DYNAMODB_LOCK), so the first answer is the second.
    """
    sizes = _query_item_sizes
    if sizes is None:
        return _moto_item_size(self)
    size = sizes.get(id(self))
    if size is None:
        size = sizes[id(self)] = _moto_item_size(self)
    return size


class _TableCopyModule:
    """Stands in for the `copy` module inside moto.dynamodb.models.table (only there).

    Table.query ends with `results = copy.deepcopy(results)`, a copy of every item of the
    page. While _query runs a Query without projection or filter, that deepcopy of the
    list of Items hands the list back as it is: its only reader, DynamoHandler.query,
    turns the items into new plain dicts (DynamoResult) and drops them, so nothing can
    tell a copy from the stored item. No other deepcopy of table.py runs during a
    Query, and every other call is the real one.
    """

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(x, memo=None, _nil=None):
        if _query_shares_results and type(x) is list and all(type(i) is Item for i in x):
            return x
        return copy.deepcopy(x, memo)


def _ordered_after_start(table, items, start_key, forward):
    """`items` in range-key order, without the run moto would skip before `start_key`.

    Returned in ascending order (moto reverses it itself for ScanIndexForward=false).
    """
    keys = _range_sort_keys(items)
    order = sorted(range(len(items)), key=keys.__getitem__)
    ordered = [items[i] for i in order]
    if start_key is None:
        return ordered
    skip = _skipped_by_bisection(table, ordered, [keys[i] for i in order], start_key, forward)
    walk = ordered if forward is not False else ordered[::-1]
    if skip is None:
        skip = _skipped_one_by_one(table, walk, start_key, forward)
    rest = walk[skip:]
    return rest if forward is not False else rest[::-1]


def _range_sort_keys(items):
    """Each item's `range_key.cast_value` (what DynamoType.__lt__ compares).

    For range keys all S or all B, cast_value is the value itself, for all N its
    Decimal: computed directly then; otherwise by the property.
    """
    kinds = {item.range_key.type for item in items}
    if kinds == {"S"} or kinds == {"B"}:
        return [item.range_key.value for item in items]
    if kinds == {"N"}:
        return [Decimal(item.range_key.value) for item in items]
    return [item.range_key.cast_value for item in items]


def _skipped_one_by_one(table, walk, start_key, forward):
    """How many items at the head of `walk` Table._item_comes_before_dct says come before
    `start_key` (moto's test, with the key's DynamoTypes built once)."""
    attrs = table._generate_attr_to_sort_by([table.hash_key_attr], [table.range_key_attr])
    bounds = {}
    skip = 0
    for item in walk:
        before = True
        for attr in attrs:
            if attr in item.attrs:
                if attr not in bounds:
                    bounds[attr] = DynamoType(start_key.get(attr))
                if item.attrs[attr] != bounds[attr]:
                    before = (item.attrs[attr] < bounds[attr]) == forward
                    break
        if not before:
            break
        skip += 1
    return skip


def _skipped_by_bisection(table, ordered, keys, start_key, forward):
    """_skipped_one_by_one by bisection, where it is the same; None where it may not be.

    When every item holds the start key's hash key value and its range key (the same as
    `item.range_key`, which `keys` sorted) is of the start key's type, moto's test is,
    per item, `range == start` or `(range < start) == forward`: for ascending ranges,
    with forward True, the items with range <= start, with False (walked descending)
    those with range >= start - a prefix of the walk in both cases, found by bisection.
    (moto tests the first item it is given again: skipping too few would be harmless,
    too many would not.)
    """
    if forward is not True and forward is not False:
        return None
    attrs = table._generate_attr_to_sort_by([table.hash_key_attr], [table.range_key_attr])
    if attrs != [table.hash_key_attr, table.range_key_attr] or not ordered:
        return None
    hash_value, range_value = start_key.get(attrs[0]), start_key.get(attrs[1])
    if type(hash_value) is not dict or type(range_value) is not dict:
        return None
    start_hash, start_range = DynamoType(hash_value), DynamoType(range_value)
    kinds = {item.range_key.type for item in ordered}
    if kinds != {start_range.type} or start_range.type not in ("S", "N", "B"):
        return None
    for item in ordered:
        stored = item.attrs.get(table.range_key_attr)  # what moto's test compares
        if stored is None or stored.type != item.range_key.type or stored.value != item.range_key.value:
            return None
        if table.hash_key_attr not in item.attrs or item.attrs[table.hash_key_attr] != start_hash:
            return None
    bound = start_range.cast_value
    if forward:
        return bisect.bisect_right(keys, bound)
    return len(keys) - bisect.bisect_left(keys, bound)


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


# --- 9. speed: DynamoDB answers serialized without moto's generic shape walk ---------
#
# Patches 9-12 only make moto faster: each mirrors moto 5.2.5 code exactly (the
# differential tests in test_moto_server.py compare the answers with plain moto), so
# they are installed only on that version (MIRRORED_MOTO_VERSION), and not at all with
# MOTO_SPEEDUPS=0. They rely on what patches 1-8 set up: every DynamoDB and Streams
# request runs under DYNAMODB_LOCK, one at a time.

MIRRORED_MOTO_VERSION = "5.2.5"
# Services whose answers use the shortcuts below (both JSON, both under the lock).
FAST_SERVICES = {"dynamodb", "dynamodbstreams"}
_moto_get_value = moto_serialize.ResponseSerializer.get_value
_moto_serialize_result = moto_serialize.ResponseSerializer._serialize_result
_FAST_JSON_MIRRORED = False  # set by apply_patches (json_serializer_is_mirrored())


def _plain_dict_keys(picker, shape, key):
    """The keys `picker` tries, in order, for member `key` of a plain dict; None: don't cache.

    moto's AttributePicker asks every alias provider (ExplicitAlias, ShapeNameAlias,
    NoAlias, ShapePrefixAlias, ClassPrefixAlias, ModelAlias) for every member of every
    structure it serializes - for DynamoDB, every AttributeValue of every item, ten
    members each, with xform_name of each alias. For an object of type `dict` those
    answers depend only on the shape, its parent structure and the key: the providers
    look at the object only through hasattr(obj, "Meta") (False for every dict) and
    obj.__class__.__name__ ("dict"). So they are asked once, with an empty dict, and
    kept on the shape (moto's shapes are cached for the life of the process; the
    parent is set by the structure being serialized, and checked).
    """
    cache = shape.__dict__.setdefault("_lambdafusion_pick_keys", {})
    parent = getattr(shape, "parent", None)
    entry = cache.get(key)
    if entry is not None and entry[0] is parent:
        return entry[1]
    context = moto_serialize.AttributePickerContext(obj={}, key=key, shape=shape)
    keys = tuple(picker.get_possible_keys(context))
    # get_value reads a dotted key as a path; none of ours has a dot, but be exact.
    if not all(isinstance(k, str) and "." not in k for k in keys):
        keys = None
    cache[key] = (parent, keys)
    return keys


def _get_value(self, value, key, shape):
    """ResponseSerializer.get_value, with the alias lookups of a plain dict cached.

    Same answer as moto's: AttributePicker.__call__ returns the value of the first
    possible key the object has (`get_value(obj, k, MISSING)`, for a dict `obj[k]` or
    MISSING), else None, then applies the response transformers - DynamoDB and
    DynamoDB Streams have none; with any, or another picker, or anything but a plain
    dict, moto's own code runs.
    """
    picker = self._value_picker
    if (
        type(value) is dict
        and type(picker) is moto_serialize.XFormedAttributePicker
        and picker.alias_providers is moto_serialize.DEFAULT_ALIAS_PROVIDERS
        and not picker.response_transformers
        and self.service_model.service_name in FAST_SERVICES
    ):
        keys = _plain_dict_keys(picker, shape, key)
        if keys is not None:
            for k in keys:
                if k in value:
                    return value[k]
            return None
    return _moto_get_value(self, value, key, shape)


class _NotPlain(Exception):
    """The fast serializer met something it does not mirror: moto's own serializer runs."""


_ABSENT = object()  # a structure member moto's serializer leaves out
_STANDARD_PICKER = moto_serialize.XFormedAttributePicker()
# The JSON serializer's methods the fast path mirrors, by shape type.
_JSON = moto_serialize.JSONSerializer
_MIRRORED = {
    "structure": moto_serialize.BaseJSONSerializer._serialize_type_structure,
    "map": moto_serialize.BaseJSONSerializer._serialize_type_map,
    "list": moto_serialize.BaseJSONSerializer._serialize_type_list,
    "string": moto_serialize.BaseJSONSerializer._serialize_type_string,
    "timestamp": moto_serialize.ResponseSerializer._serialize_type_timestamp,
    "blob": moto_serialize.ResponseSerializer._serialize_type_blob,
    "integer": moto_serialize.ResponseSerializer._serialize_type_integer,
    "long": moto_serialize.ResponseSerializer._serialize_type_integer,
    "float": moto_serialize.ResponseSerializer._serialize_type_float,
    "double": moto_serialize.ResponseSerializer._serialize_type_float,
}
_MIRRORED_PLUMBING = {
    "_serialize": moto_serialize.ResponseSerializer._serialize,
    "_default_serialize": moto_serialize.ResponseSerializer._default_serialize,
    "_serialize_structure_member": moto_serialize.ResponseSerializer._serialize_structure_member,
    "get_serialized_name": moto_serialize.ResponseSerializer.get_serialized_name,
}


def json_serializer_is_mirrored() -> bool:
    """Whether JSONSerializer is the one the fast path was written from (moto 5.2.5)."""
    for name in dir(_JSON):
        if name.startswith("_serialize_type_"):
            if getattr(_JSON, name) is not _MIRRORED.get(name[len("_serialize_type_"):]):
                return False
    for name, function in _MIRRORED_PLUMBING.items():
        if getattr(_JSON, name) is not function:
            return False
    if _JSON._serialize_result not in (_moto_serialize_result, _serialize_result):
        return False
    return _JSON.MAP_TYPE is dict and set(_MIRRORED) == {
        name[len("_serialize_type_"):] for name in dir(_JSON) if name.startswith("_serialize_type_")
    }


def _stored_name(shape, key):
    """The key moto's serializer stores a value of `shape` under when asked for `key`.

    ResponseSerializer._default_serialize: `shape.serialization.get("name", key)`; a
    document structure is stored under `key` itself (BaseJSONSerializer).
    """
    if shape.type_name == "structure" and shape.is_document_type:
        return key
    return shape.serialization.get("name", key)


def _fast(shape):
    """The fast serializer of `shape`, made on first use and kept on the shape.

    A fast serializer takes (value, serializer) and returns what moto's
    JSONSerializer._serialize would store for that value (or _ABSENT where it stores
    nothing), or raises _NotPlain. Shapes are resolved lazily: DynamoDB's AttributeValue
    nests through M and L, and each level is a new shape object.
    """
    fast = shape.__dict__.get("_lambdafusion_fast")
    if fast is None:
        fast = shape.__dict__["_lambdafusion_fast"] = _make_fast(shape)
    return fast


def _make_fast(shape):
    kind = shape.type_name
    if kind == "structure":
        if shape.is_document_type:
            return lambda value, ser: value
        members = []
        for member_key, member_shape in shape.members.items():
            member_shape.parent = shape  # what moto's structure serializer sets
            keys = _plain_dict_keys(_STANDARD_PICKER, member_shape, member_key)
            if keys is None:
                return _not_plain
            members.append((keys, _stored_name(member_shape, member_key), member_shape))

        def structure(value, ser):
            # moto: nothing for None; each member picked by its possible keys (the
            # first the dict has), members that are None left out, in shape order.
            if value is None:
                return _ABSENT
            if type(value) is not dict:
                raise _NotPlain
            out = {}
            for keys, stored, member_shape in members:
                for k in keys:
                    if k in value:
                        member = value[k]
                        break
                else:
                    continue
                if member is not None:
                    done = _fast(member_shape)(member, ser)
                    if done is not _ABSENT:
                        out[stored] = done
            return out

        return structure
    if kind == "map":
        value_shape = shape.value
        fixed = _stored_name(value_shape, None)  # None: each entry under its own key

        def mapping(value, ser):
            if type(value) is not dict:
                raise _NotPlain
            fast = _fast(value_shape)
            out = {}
            for k, v in value.items():
                done = fast(v, ser)
                if done is not _ABSENT:
                    out[k if fixed is None else fixed] = done
            return out

        return mapping
    if kind == "list":
        member_shape = shape.member
        item_key = member_shape.name
        # moto serializes each item into a wrapper under the member's name and takes it
        # back from there; stored under another name (or not at all), the raw item is
        # appended instead.
        raw = _stored_name(member_shape, item_key) != item_key

        def listing(value, ser):
            if type(value) is not list:
                raise _NotPlain
            fast = _fast(member_shape)
            out = []
            for item in value:
                done = fast(item, ser)
                out.append(item if raw or done is _ABSENT else done)
            return out

        return listing
    if kind == "string":
        return _string
    if kind == "timestamp":

        def timestamp(value, ser):
            wrapper = {}
            ser._timestamp_serializer.serialize(wrapper, value, shape, "timestamp")
            return wrapper["timestamp"]

        return timestamp
    if kind == "blob":
        return lambda value, ser: ser._base64(value)
    if kind in ("integer", "long"):
        return lambda value, ser: int(value)
    if kind in ("float", "double"):
        return lambda value, ser: float(value)
    return lambda value, ser: value  # boolean and the rest: stored as they are


def _not_plain(value, ser):
    raise _NotPlain


def _string(value, ser):
    """BaseJSONSerializer._serialize_type_string."""
    if type(value) is str:
        return value
    if isinstance(value, Enum):
        value = value.value
    return str(value) if value not in [None, {}, []] else value


def _fast_allowed(ser) -> bool:
    picker = ser._value_picker
    return (
        type(ser) is _JSON
        and _FAST_JSON_MIRRORED
        and ser.service_model.service_name in FAST_SERVICES
        and type(picker) is moto_serialize.XFormedAttributePicker
        and picker.alias_providers is moto_serialize.DEFAULT_ALIAS_PROVIDERS
        and not picker.response_transformers
    )


def _serialize_result(self, resp, result):
    """ResponseSerializer._serialize_result with a fast path for DynamoDB's JSON answers.

    moto 5.2.5 serializes every result by walking the botocore output shape generically
    (a method lookup by name, a path list, an attribute picker per member); for a Query
    that is every AttributeValue of every item, ten members each. For a result made of
    plain dicts, lists and scalars, the walk is compiled once per shape (_fast) into
    closures that do exactly what moto's methods do for each shape type - same members
    and keys in the same order, None members left out, str()/int()/float(), base64 for
    blobs, moto's own timestamp conversion - so json.dumps gives the same bytes. Anything
    else (an object, a tuple, a dotted alias, a serializer or picker other than the
    standard ones, an error) goes through moto's own code, as does any result on which
    the fast path raises.
    """
    if _fast_allowed(self) and type(result) is dict:
        shape = self.operation_model.output_shape
        if shape is not None and not shape.is_document_type:
            try:
                serialized = _fast(shape)(result, self)
            except Exception:  # noqa: BLE001 - moto's own serializer decides
                serialized = None
            if type(serialized) is dict:
                return self._serialized_result_to_response(resp, result, shape, serialized)
    return _moto_serialize_result(self, resp, result)


_moto_dynamo_to_dict = ddb_utilities.dynamo_to_dict


def _dynamo_to_dict(obj):
    """moto.dynamodb.models.utilities.dynamo_to_dict with shortcuts for plain values.

    DynamoResult (every GetItem, Query, UpdateItem answer) turns the result into plain
    dicts with it before serializing. moto asks each value isinstance(datetime),
    isinstance(DynamoType), hasattr(to_json), isinstance(dict), isinstance(list), in
    that order; a str, int, float, bool or None passes all of them unchanged, a plain
    dict or list is rebuilt entry by entry, a DynamoType other than B/BS becomes
    {type: converted value} - done here directly for exactly those types (checked with
    `type(...) is`, so subclasses still go through moto's function), B and BS and
    everything else by moto's function.
    """
    kind = type(obj)
    if kind is str or kind is int or kind is float or kind is bool or obj is None:
        return obj
    if kind is dict:
        return {k: _dynamo_to_dict(v) for k, v in obj.items()}
    if kind is list:
        return [_dynamo_to_dict(v) for v in obj]
    if kind is DynamoType and obj.type != "B" and obj.type != "BS":
        return {obj.type: _dynamo_to_dict(obj.value)}
    return _moto_dynamo_to_dict(obj)


# --- 10. speed: request plumbing ---------------------------------------------------

_moto_list_of_moto_modules = moto_backends.list_of_moto_modules
_moto_modules: tuple[str, ...] | None = None


def _list_of_moto_modules():
    """moto.backends.list_of_moto_modules, listed once.

    DomainDispatcherApplication.get_backend_for_host asks `host in
    list_of_moto_modules()` for every request (its only caller), and that generator
    lists moto's package directory and stats each of its ~200 entries: some 8% of a
    DynamoDB request's time here. The installed package does not change while the
    server runs, so the first listing is kept (same names, same order).
    """
    global _moto_modules
    if _moto_modules is None:
        _moto_modules = tuple(_moto_list_of_moto_modules())
    return _moto_modules


_moto_method_names_from_class = moto_responses.method_names_from_class
_method_names: dict[type, list[str]] = {}


def _method_names_from_class(clazz):
    """moto.core.utils.method_names_from_class, computed once per class.

    BaseResponse.call_action runs inspect.getmembers over the handler class (every
    attribute of DynamoHandler and its bases) for every request, only to ask whether
    the action's method name is among them. The classes do not change once the server
    runs (these patches are installed before it starts), so the list is kept.
    """
    names = _method_names.get(clazz)
    if names is None:
        names = _method_names[clazz] = _moto_method_names_from_class(clazz)
    return names


# --- 11. speed: update expressions parsed, copied and checked once per text -----------

PARSED_UPDATE_EXPRESSIONS = 1024  # distinct texts kept (the store sends a few dozen)
_moto_make_update_expression = UpdateExpressionParser.make.__func__
_parsed_update_expressions: dict[str, object] = {}
_parsed_trees: dict[int, "_ParsedTree"] = {}  # id(tree) -> what is known, for cached trees
_AST_NODES_PLAIN = False  # set by apply_patches (ast_nodes_are_plain())


def _make_update_expression(cls, expression_str):
    """UpdateExpressionParser.make, answered from a cache keyed by the expression text.

    moto parses an UpdateItem's UpdateExpression twice (DynamoHandler.update_item to find
    the placeholders used, DynamoDBBackend.update_item to run it), and once more per
    Update of a transaction. The parse is a pure function of the text, and nothing
    changes the tree it returns: the handlers only read it (find_clauses), and
    UpdateExpressionValidator works on a deep copy (Validator.__init__), which is the
    tree that is resolved, normalized and executed. So the same tree is handed out
    again. A text that does not parse raises as before, every time (only successes are
    kept). At most PARSED_UPDATE_EXPRESSIONS texts are kept, the oldest dropped first.
    """
    if cls is not UpdateExpressionParser or type(expression_str) is not str:
        return _moto_make_update_expression(cls, expression_str)
    tree = _parsed_update_expressions.get(expression_str)
    if tree is None:
        tree = _moto_make_update_expression(cls, expression_str)
        if len(_parsed_update_expressions) >= PARSED_UPDATE_EXPRESSIONS:
            oldest = next(iter(_parsed_update_expressions))
            _parsed_trees.pop(id(_parsed_update_expressions.pop(oldest)), None)
        _parsed_update_expressions[expression_str] = tree
        _parsed_trees[id(tree)] = _ParsedTree(tree, expression_str)
    return tree


class _ParsedTree:
    """What is known about a cached parse tree: its text, a pickle of it, its shape.

    `image`: the tree pickled, or None if it does not pickle. Unpickling builds the same
    objects a deep copy does (same classes, each instance made by cls.__new__ with its
    __dict__ filled from copies, shared references and the parent links kept; moto's
    Node classes have no pickling or copying hooks, see ast_nodes_are_plain), except
    that strings come back as equal new strings rather than the same ones; nothing in
    moto compares them by identity. It is ~14x faster than copy.deepcopy of the tree.
    `linked`: whether every node's `parent` is None or the node whose children hold it
    (what the parsers build), which makes the traversals of the static checks
    (_STATIC_CHECKS) change nothing.
    """

    def __init__(self, tree, text):
        self.tree = tree
        self.text = text
        try:
            self.image = pickle.dumps(tree, protocol=pickle.HIGHEST_PROTOCOL) if _AST_NODES_PLAIN else None
        except Exception:  # noqa: BLE001 - then it is deep-copied as before
            self.image = None
        self.linked = _linked(tree, None)


def _linked(node, parent) -> bool:
    if not isinstance(node, AstNode):
        return True
    if node.parent is not None and node.parent is not parent:
        return False
    return all(_linked(child, node) for child in node.children or [])


def ast_nodes_are_plain() -> bool:
    """Whether no Node class has hooks of its own for copying or pickling (see _ParsedTree)."""
    pending, seen = [AstNode], set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for name in ("__slots__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__",
                     "__deepcopy__", "__copy__"):
            if name in cls.__dict__:
                return False
        pending.extend(cls.__subclasses__())
    return copyreg.dispatch_table.keys().isdisjoint(seen)


def _validator_deepcopy(x, memo=None, _nil=None):
    """`deepcopy` inside moto.dynamodb.parsing.validators (only there).

    Validator.__init__ starts with `self.node_to_validate = deepcopy(expression)`; for a
    tree from the parse cache that copy is made by unpickling its image (see
    _ParsedTree). Every other deepcopy there (list_append's operand) is the real one.
    """
    known = _parsed_trees.get(id(x))
    if memo is None and known is not None and known.tree is x and known.image is not None:
        return pickle.loads(known.image)
    return copy.deepcopy(x, memo)


class _ReModule:
    """Stands in for the `re` module inside moto.dynamodb.models (only there).

    DynamoDBBackend.update_item rewrites every UpdateExpression with
    `re.sub(r"\\s*([=\\+-])\\s*", "\\1", text)` (its only use of `re`); the answer for a
    given text never changes, so it is kept (at most PARSED_UPDATE_EXPRESSIONS texts).
    """

    _answers: dict[tuple, str] = {}

    def __getattr__(self, name):
        return getattr(re, name)

    def sub(self, pattern, repl, string, count=0, flags=0):
        key = (pattern, repl, string, count, flags)
        if not all(type(k) in (str, int) for k in key):
            return re.sub(pattern, repl, string, count, flags)
        answer = self._answers.get(key)
        if answer is None:
            answer = re.sub(pattern, repl, string, count, flags)
            if len(self._answers) >= PARSED_UPDATE_EXPRESSIONS:
                del self._answers[next(iter(self._answers))]
            self._answers[key] = answer
        return answer


# Validators of an update expression whose verdict depends only on the tree (so on its
# text), the ExpressionAttributeNames and the table's key attributes, and that change
# nothing: each returns every node it processes as it is.
_STATIC_CHECKS = (ActionCountValidator, OverlappingPathsValidator, UpdateHashRangeKeyValidator)
STATIC_CHECK_VERDICTS = 4096  # passes remembered
_static_checks_passed: dict[tuple, None] = {}
_moto_update_validator_init = UpdateExpressionValidator.__init__


def _update_validator_init(self, expression, *args, **kwargs):
    """UpdateExpressionValidator.__init__, remembering which tree it was given."""
    _moto_update_validator_init(self, expression, *args, **kwargs)
    self._lambdafusion_source = expression


def _static_key(validator):
    """The key of a validator's static-check verdict, or None if it cannot be trusted."""
    source = validator.__dict__.get("_lambdafusion_source")
    known = _parsed_trees.get(id(source))
    if known is None or known.tree is not source or not known.linked:
        return None
    names = validator.expression_attribute_names or {}
    try:
        key = (known.text, tuple(sorted(names.items())), tuple(validator.table.table_key_attrs))
        hash(key)
    except Exception:  # noqa: BLE001 - unusual names: check as moto does
        return None
    return key


def _update_validate(self):
    """UpdateExpressionValidator.validate, skipping static checks that passed before.

    moto runs ten traversals of the expression tree per validation (two for an update
    that creates its item); the first three (_STATIC_CHECKS) only raise or pass, and
    ActionCountValidator alone re-walks the subtree of every clause node three times
    (find_clauses) - a third of an UpdateItem's time. Their verdict depends only on the
    expression text, the ExpressionAttributeNames and the table's key attributes, and
    they change nothing in the tree (they return each node as it is; the traversal
    then stores each node back where it already is, given parent links that match,
    which _ParsedTree.linked checks). So once they passed for a key they are skipped for
    it; a failure is never remembered (it raises again, the same way, each time).
    """
    key = _static_key(self)
    skip = key is not None and key in _static_checks_passed
    node = self.node_to_validate
    for processor in self.processors:
        if skip and type(processor) in _STATIC_CHECKS:
            continue
        node = processor.traverse(node)
    if key is not None and not skip:
        if len(_static_checks_passed) >= STATIC_CHECK_VERDICTS:
            del _static_checks_passed[next(iter(_static_checks_passed))]
        _static_checks_passed[key] = None
    return node


_isinstance_answers: dict[tuple, bool] = {}


def _is_a(node, classes) -> bool:
    """isinstance(node, classes), remembered per (type(node), classes).

    The AST classes are ABCMeta classes, whose isinstance goes through
    ABCMeta.__instancecheck__ (a Python-level call); the traversals ask it several
    times for every node. The answer depends only on the node's type here: none of
    these classes registers virtual subclasses or defines __subclasshook__, and the
    nodes are plain instances.
    """
    key = (type(node), classes)
    answer = _isinstance_answers.get(key)
    if answer is None:
        answer = _isinstance_answers[key] = isinstance(node, classes)
    return answer


_noop_pre_processing = DepthFirstTraverser.pre_processing_of_child


def _traverse_node_recursively(self, node, child_id=-1):
    """DepthFirstTraverser.traverse_node_recursively, with type checks answered once.

    Statement for statement moto's method (ast_nodes.py): children first (each after
    pre_processing_of_child), then the node itself if it is of a processed type, put
    back under its parent. isinstance answers come from _is_a; the no-op
    pre_processing_of_child of DepthFirstTraverser is not called (only
    ExpressionAttributeResolvingProcessor has one that does something).
    """
    if _is_a(node, AstNode):
        parent_node = node.parent
        if node.children is not None:
            hook = type(self).pre_processing_of_child is not _noop_pre_processing
            recurse = self.traverse_node_recursively
            for i, child_node in enumerate(node.children):
                if hook:
                    self.pre_processing_of_child(node, i)
                recurse(child_node, i)
        if _is_a(node, self.nodes_to_be_processed()):
            node = self.process(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
    return node


def _nodes_to_be_processed(self):
    """DepthFirstTraverser.nodes_to_be_processed, built once per traverser.

    moto rebuilds the `_processing_map()` dict (and this tuple from it) for every node
    of every traversal; each validator's map is a constant of the instance (its classes
    and bound methods), so building it once gives the same answers.
    """
    types = self.__dict__.get("_lambdafusion_types")
    if types is None:
        types = self.__dict__["_lambdafusion_types"] = tuple(self._processing_map().keys())
    return types


def _process(self, node):
    """DepthFirstTraverser.process with the processing map built once per traverser."""
    entries = self.__dict__.get("_lambdafusion_entries")
    if entries is None:
        entries = self.__dict__["_lambdafusion_entries"] = tuple(self._processing_map().items())
    for class_key, processor in entries:
        if _is_a(node, class_key):
            return processor(node)
    return None


# --- 12. speed: item sizes without rebuilding every nested value ---------------------

_SET_TYPES = ("SS", "NS", "BS")
_moto_dynamo_size = DynamoType.size


class _Irregular(Exception):
    """A value moto's code would handle differently from the shortcut: moto's code runs."""


def _size_of(value) -> int:
    """DynamoType.size of a well-formed value (DynamoTypes all the way down), or _Irregular."""
    kind, inner = value.type, value.value
    if kind == "N":
        return len(str(inner))
    if kind in _SET_TYPES:
        # moto: DynamoType({kind[0]: v}).size() per member, a scalar N, S or B.
        if kind == "NS":
            return sum(len(str(v)) for v in inner)
        return sum(1 if isinstance(v, bool) else bytesize(v) for v in inner)
    if kind == "L":
        total = 0
        for v in inner:
            if type(v) is not DynamoType:
                raise _Irregular
            total += _size_of(v)
        return total
    if kind == "M":
        total = 0
        for k, v in inner.items():
            if type(v) is not DynamoType:
                raise _Irregular
            total += bytesize(k) + _size_of(v)
        return total
    if isinstance(inner, bool):
        return 1
    return bytesize(inner)


def _dynamo_size(self) -> int:
    """DynamoType.size (an attribute's size in bytes, for the 400 KB item limit and the
    1 MB page limit), without rebuilding the value.

    moto sizes a map's entries as `DynamoType(v).size()`, and DynamoType(v) of a
    DynamoType copies its whole subtree (every nested list and map) first; and it runs
    for every attribute of the item each time one attribute is set (LimitedSizeDict),
    twice per item a Query returns. The sum is the same without the copies as long as
    every nested value is already a DynamoType (what DynamoType's constructor makes);
    for anything else moto's own method runs.
    """
    try:
        return _size_of(self)
    except _Irregular:
        return _moto_dynamo_size(self)


def mirrors_apply() -> bool:
    """Whether the installed moto is the one patches 9-12 mirror."""
    return moto.__version__ == MIRRORED_MOTO_VERSION


def apply_patches(stream_retention_secs: float, speedups: bool = True) -> str:
    """Installs patches 1-6, and 9-12 when `speedups` and the moto version allow (see the
    module docs; main() adds 7 and 8). Call it once. Returns what it did about 9-12."""
    global STREAM_RETENTION_SECS, _SPEEDUPS, _FAST_JSON_MIRRORED, _AST_NODES_PLAIN
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
    if not speedups:
        return "speed patches (9-12) off (MOTO_SPEEDUPS=0)"
    if not mirrors_apply():
        return f"moto {moto.__version__} is not {MIRRORED_MOTO_VERSION}: speed patches (9-12) not installed"
    _SPEEDUPS = True
    # 6 (its speed part: sorted partition, skipped start, shared page, sizes once)
    Item.size = _item_size
    ddb_table_module.copy = _TableCopyModule()
    # 9
    moto_serialize.ResponseSerializer.get_value = _get_value
    _FAST_JSON_MIRRORED = json_serializer_is_mirrored()
    moto_serialize.ResponseSerializer._serialize_result = _serialize_result
    ddb_utilities.dynamo_to_dict = _dynamo_to_dict
    ddb_responses.dynamo_to_dict = _dynamo_to_dict
    # 10
    moto_backends.list_of_moto_modules = _list_of_moto_modules
    moto_responses.method_names_from_class = _method_names_from_class
    # 11
    _AST_NODES_PLAIN = ast_nodes_are_plain()
    UpdateExpressionParser.make = classmethod(_make_update_expression)
    ddb_validators.deepcopy = _validator_deepcopy
    ddb_models.re = _ReModule()
    UpdateExpressionValidator.__init__ = _update_validator_init
    UpdateExpressionValidator.validate = _update_validate
    DepthFirstTraverser.traverse_node_recursively = _traverse_node_recursively
    DepthFirstTraverser.nodes_to_be_processed = _nodes_to_be_processed
    DepthFirstTraverser.process = _process
    # 12
    DynamoType.size = _dynamo_size
    fast = "" if _FAST_JSON_MIRRORED else " (JSONSerializer differs: its fast path off)"
    return f"speed patches (9-12) installed{fast}"


class OpStats:
    """Time each DynamoDB / Streams operation held DYNAMODB_LOCK, reported periodically.

    MOTO_OP_STATS_SECS=N (default 0: off) prints to stderr (moto.log), every N seconds
    in which requests ran, one line: the seconds spent under the lock, then per
    operation the count, mean and max milliseconds under the lock and the mean wait for
    it. The lock serializes DynamoDB, so that total over N is the share of moto's
    DynamoDB capacity used. (The local stack's front also sends DynamoDB requests to moto
    one at a time, so there the wait is ~0 and the queue is in the front; each request
    also spends ~1 ms outside the lock in werkzeug's server: a new connection and
    thread per request, header parsing, the access-log line.)
    """

    def __init__(self, every_secs: float):
        self.every = every_secs
        self.ops: dict[str, list[float]] = {}  # op -> [count, held secs, max held, waited secs]

    def add(self, op: str, held: float, waited: float) -> None:
        entry = self.ops.get(op)
        if entry is None:
            entry = self.ops[op] = [0, 0.0, 0.0, 0.0]
        entry[0] += 1
        entry[1] += held
        entry[2] = max(entry[2], held)
        entry[3] += waited

    def report(self) -> str | None:
        """The line for the period that ended (and starts a new one), or None if idle."""
        with DYNAMODB_LOCK:
            ops, self.ops = self.ops, {}
        if not ops:
            return None
        busy = sum(e[1] for e in ops.values())
        parts = [
            f"{op} {int(n)} x {1000 * held / n:.2f} ms (max {1000 * top:.1f}, wait {1000 * waited / n:.1f})"
            for op, (n, held, top, waited) in sorted(ops.items(), key=lambda kv: -kv[1][1])
        ]
        return (f"moto_server.py: DynamoDB under the lock {busy:.2f} s in {self.every:g} s: "
                + "; ".join(parts))

    def run(self) -> None:
        while True:
            time.sleep(self.every)
            line = self.report()
            if line:
                print(line, file=sys.stderr, flush=True)


class SerializeDynamoDB:
    """WSGI middleware: DynamoDB (and Streams) requests hold DYNAMODB_LOCK end to end."""

    def __init__(self, app, stats: OpStats | None = None):
        self.app = app
        self.stats = stats

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB"):
            return self.app(environ, start_response)
        asked = time.perf_counter()
        with DYNAMODB_LOCK:
            started = time.perf_counter()
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close:
                    close()
                if self.stats is not None:
                    ended = time.perf_counter()
                    self.stats.add(target.rpartition(".")[2], ended - started, started - asked)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5050)
    args = parser.parse_args()
    retention = env_seconds("MOTO_STREAM_RETENTION_SECS", 86400.0)
    sweep_every = env_seconds("MOTO_TTL_SWEEP_SECS", 30.0, allow_zero=True)
    stats_every = env_seconds("MOTO_OP_STATS_SECS", 0.0, allow_zero=True)
    speedups = os.environ.get("MOTO_SPEEDUPS", "1")
    if speedups not in ("0", "1"):
        sys.exit(f"moto_server.py: MOTO_SPEEDUPS must be 0 or 1, not {speedups!r}")
    print(f"moto_server.py: {apply_patches(retention, speedups == '1')}", file=sys.stderr, flush=True)
    print(f"moto_server.py: {fix_mmap_threshold()}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if sweep_every > 0:
        threading.Thread(target=ttl_sweeper, args=(sweep_every,), name="ttl-sweeper", daemon=True).start()
    stats = None
    if stats_every > 0:
        stats = OpStats(stats_every)
        threading.Thread(target=stats.run, name="op-stats", daemon=True).start()
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        SerializeDynamoDB(app, stats),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
