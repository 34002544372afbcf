"""Apache Iceberg tables written the way teams write them from Python (PyIceberg, on a SQL
catalog over sqlite with a local warehouse), and the answers PyIceberg's own reader gives,
for tests/tests/end_to_end/iceberg_tables.rs: `fixtures.py <out dir>`.

Writes <out>/cases.json: {"tables": {name: metadata.json path}, "snapshots": {...},
"cases": [{name, sql, ordered}]}, and for each case <out>/expected/<name>.parquet, DuckDB's
answer over the snapshot as PyIceberg materializes it (`scan(snapshot_id=...).to_arrow()`).
"""

import json
import os
import sys
from datetime import date, datetime, timedelta

import duckdb
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo, LessThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (BucketTransform, DayTransform, HourTransform, IdentityTransform,
                                  TruncateTransform, YearTransform)
from pyiceberg.manifest import DataFileContent
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deletes import commit_deletes, positions  # noqa: E402
from pyiceberg.types import (DateType, DecimalType, DoubleType, IntegerType, LongType, NestedField,
                             StringType, StructType, TimestampType)

out = os.path.abspath(sys.argv[1])
warehouse = os.path.join(out, "warehouse")
os.makedirs(warehouse, exist_ok=True)
os.makedirs(os.path.join(out, "expected"), exist_ok=True)
catalog = SqlCatalog("fixtures", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{warehouse}")
catalog.create_namespace("lake")

# --- events: partitioned by identity(region) and day(ts); appends, a delete, a new column ---
schema = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType()),
    NestedField(3, "ts", TimestampType()),
    NestedField(4, "amount", DoubleType()),
    NestedField(5, "price", DecimalType(10, 2)),
)
spec = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"),
    PartitionField(source_id=3, field_id=1001, transform=DayTransform(), name="ts_day"),
)
events = catalog.create_table("lake.events", schema=schema, partition_spec=spec)
arrow_schema = events.schema().as_arrow()


# "ap/south 1%": PyIceberg escapes it in the directory name (region=ap%2Fsouth+1%25), and
# the manifests name that key: Iceberg's readers take a file's path literally.
def batch(start, n):
    base = datetime(2026, 1, 1)
    from decimal import Decimal
    return pa.Table.from_pylist([
        {"id": i, "region": [None, "eu", "us", "ap/south 1%"][i % 4], "ts": base + timedelta(days=(i // 100) * 7, hours=i % 24),
         "amount": float(i % 97), "price": Decimal(i % 1000) / 100}
        for i in range(start, start + n)], schema=arrow_schema)


events.append(batch(0, 400))           # snapshot 1
events.append(batch(400, 400))         # snapshot 2
events.delete(LessThan("id", 100))     # snapshot 3: rows gone
with events.update_schema() as update:  # a column added; older files lack it
    update.add_column("score", LongType())
rows = batch(800, 200).append_column("score", pa.array(range(200), type=pa.int64()))
events.append(rows)                    # snapshot 4
events = catalog.load_table("lake.events")
snapshots = [s.snapshot_id for s in events.snapshots()]

# --- transforms: the hidden partition transforms not used above (bucket, truncate, year,
# hour), two appends; filters on their source columns prune through the column bounds ----
transforms = catalog.create_table("lake.transforms", schema=Schema(
    NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
    NestedField(3, "day", DateType()), NestedField(4, "ts", TimestampType())),
    partition_spec=PartitionSpec(
        PartitionField(source_id=1, field_id=1000, transform=BucketTransform(4), name="id_bucket"),
        PartitionField(source_id=2, field_id=1001, transform=TruncateTransform(2), name="name_trunc"),
        PartitionField(source_id=3, field_id=1002, transform=YearTransform(), name="day_year"),
        PartitionField(source_id=4, field_id=1003, transform=HourTransform(), name="ts_hour")))
for start in (0, 120):
    transforms.append(pa.Table.from_pylist([
        {"id": i, "name": ["alpha", "alps", "beta", "bet", None][i % 5],
         "day": date(2024 + i % 3, 1 + i % 12, 1 + i % 28), "ts": datetime(2026, 1, 1, i % 24, i % 60)}
        for i in range(start, start + 120)], schema=transforms.schema().as_arrow()))
transforms = catalog.load_table("lake.transforms")

# --- plain: unpartitioned, every type the reader maps ----------------------------------------
plain = catalog.create_table("lake.plain", schema=Schema(
    NestedField(1, "k", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "day", DateType()),
))
plain.append(pa.Table.from_pylist(
    [{"k": i, "name": f"n{i}" if i % 5 else None, "day": date(2026, 1, 1) + timedelta(days=i)}
     for i in range(50)], schema=plain.schema().as_arrow()))
plain = catalog.load_table("lake.plain")


# --- evolved: a column renamed, another dropped and its name reused by a new column, an int
# promoted to long, all after data was written: read by field id (by name, the renamed
# column would come back NULL and the reused name would read the dropped column's values).
evolved = catalog.create_table("lake.evolved", schema=Schema(
    NestedField(1, "a", LongType()), NestedField(2, "c", StringType()), NestedField(3, "n", IntegerType())))
evolved.append(pa.Table.from_pylist([{"a": i, "c": f"old{i}", "n": i} for i in range(10)],
                                    schema=evolved.schema().as_arrow()))
with evolved.update_schema() as update:
    update.rename_column("a", "b")
with evolved.update_schema() as update:
    update.delete_column("c")
with evolved.update_schema() as update:
    update.add_column("c", LongType())
with evolved.update_schema() as update:
    update.update_column("n", LongType())
evolved = catalog.load_table("lake.evolved")
evolved.append(pa.Table.from_pylist([{"b": i, "n": i * 2, "c": i * 10} for i in range(10, 15)],
                                    schema=evolved.schema().as_arrow()))
evolved = catalog.load_table("lake.evolved")
evolved_snapshots = [s.snapshot_id for s in evolved.snapshots()]

# --- nested_renamed: a field inside a struct renamed (refused: not read yet) -------------
nested = catalog.create_table("lake.nested_renamed", schema=Schema(NestedField(
    1, "s", StructType(NestedField(2, "x", LongType())))))
nested.append(pa.Table.from_pylist([{"s": {"x": 1}}], schema=nested.schema().as_arrow()))
with nested.update_schema() as update:
    update.rename_column(("s", "x"), "y")
nested = catalog.load_table("lake.nested_renamed")


# --- mor: merge-on-read deletes, as Athena, Spark and Trino write them: Parquet position
# delete files (file_path, pos) in a delete manifest. PyIceberg 0.12 writes deletes only as
# copy-on-write but reads position deletes, so the delete files are written and committed
# through PyIceberg's own snapshot producer by deletes.py; PyIceberg's reader is the oracle.
mor_schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))
mor = catalog.create_table("lake.mor", schema=mor_schema,
                           properties={"write.delete.mode": "merge-on-read"})
mor_rows = lambda start, n: pa.Table.from_pylist(  # noqa: E731
    [{"id": i, "v": f"v{i % 13}"} for i in range(start, start + n)], schema=mor.schema().as_arrow())
mor.append(mor_rows(0, 1000))            # snapshot 1: file A
mor.append(mor_rows(1000, 1000))         # snapshot 2: file B
mor = catalog.load_table("lake.mor")
file_a, file_b = sorted(t.file.file_path for t in mor.scan().plan_files())
# snapshot 3: one delete file for both files, no bounds (applies by sequence number alone)
commit_deletes(mor, "deletes-1", DataFileContent.POSITION_DELETES,
               positions(mor, file_a, lambda i: i % 7 == 0) + positions(mor, file_b, lambda i: i % 11 == 0))
mor = catalog.load_table("lake.mor")
# snapshot 4: a delete file whose file_path bounds name file B only (as Spark writes one file's)
commit_deletes(mor, "deletes-2", DataFileContent.POSITION_DELETES,
               positions(mor, file_b, lambda i: 1500 <= i < 1600),
               bounds={2147483546: file_b.encode()})
mor = catalog.load_table("lake.mor")
mor.append(mor_rows(2000, 500))          # snapshot 5: file C, after the deletes
mor = catalog.load_table("lake.mor")
mor_snapshots = [s.snapshot_id for s in mor.snapshots()]

# --- equality: equality delete files, as Flink writes them (rows deleted by key, within a
# partition, for data files older than the delete). PyIceberg 0.12 reads none ("does not
# yet support equality deletes"), so the answers are DuckDB's over the rows written here,
# with the spec's rules applied in SQL.
equality = catalog.create_table(
    "lake.equality",
    schema=Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "region", StringType()),
                  NestedField(3, "k", LongType())),
    partition_spec=PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(),
                                                name="region")))
eq_rows = lambda start, n: pa.Table.from_pylist(  # noqa: E731
    [{"id": i, "region": ["eu", "us"][i % 2], "k": None if i % 50 == 0 else (i // 2) % 10} for i in range(start, start + n)],
    schema=equality.schema().as_arrow())
eq_first = eq_rows(0, 200)
equality.append(eq_first)                 # snapshot 1
equality = catalog.load_table("lake.equality")
eq_partition = {t.file.partition[0]: t.file.partition for t in equality.scan().plan_files()}
# snapshot 2: in region=eu, every row whose k is 3 or null (null keys match nulls)
commit_deletes(equality, "eq-k", DataFileContent.EQUALITY_DELETES, [{"k": 3}, {"k": None}],
               schema=pa.schema([pa.field("k", pa.int64(), metadata={b"PARQUET:field_id": b"3"})]),
               equality_ids=[3], partition=eq_partition["eu"])
equality = catalog.load_table("lake.equality")
eq_later = eq_rows(200, 100)
equality.append(eq_later)                 # snapshot 3: newer than the deletes above
equality = catalog.load_table("lake.equality")
# snapshot 4: in region=us, by id; 201 was appended before this delete, so it goes too
commit_deletes(equality, "eq-id", DataFileContent.EQUALITY_DELETES, [{"id": i} for i in (1, 3, 5, 7, 201)],
               schema=pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"})]),
               equality_ids=[1], partition=eq_partition["us"])
equality = catalog.load_table("lake.equality")
eq_written = pa.concat_tables([eq_first.append_column("batch", pa.array([1] * 200)),
                               eq_later.append_column("batch", pa.array([3] * 100))])
equality_snapshots = [s.snapshot_id for s in equality.snapshots()]
EQ_LIVE = ("(SELECT id, region, k FROM eq_written WHERE NOT (batch = 1 AND region = 'eu' AND (k = 3 OR k IS NULL)) "
           "AND NOT (region = 'us' AND id IN (1, 3, 5, 7, 201)))")


def snapshot(table, snapshot_id=None):
    return table.scan(snapshot_id=snapshot_id).to_arrow()


latest = {"events": (events, None)}
cases = [
    ("count", "SELECT count(*) AS n, sum(amount) AS total FROM events",
     "SELECT count(*) AS n, sum(amount) AS total FROM events", latest, False),
    ("by_region", "SELECT region, count(*) AS n, sum(price) AS p FROM events GROUP BY region",
     "SELECT region, count(*) AS n, sum(price) AS p FROM events GROUP BY region", latest, False),
    ("partition_filter",
     "SELECT id, amount FROM events WHERE region = 'eu' AND ts >= TIMESTAMP '2026-03-01 00:00:00'",
     "SELECT id, amount FROM events WHERE region = 'eu' AND ts >= TIMESTAMP '2026-03-01 00:00:00'",
     latest, False),
    ("null_partition", "SELECT count(*) AS n FROM events WHERE region IS NULL",
     "SELECT count(*) AS n FROM events WHERE region IS NULL", latest, False),
    ("data_filter", "SELECT id, amount FROM events WHERE amount > 90 AND id >= 500 ORDER BY id",
     "SELECT id, amount FROM events WHERE amount > 90 AND id >= 500 ORDER BY id", latest, True),
    ("deleted_rows", "SELECT count(*) AS n FROM events WHERE id < 100",
     "SELECT count(*) AS n FROM events WHERE id < 100", latest, False),
    ("evolved_column", "SELECT count(*) AS n, count(score) AS scored, sum(score) AS s FROM events",
     "SELECT count(*) AS n, count(score) AS scored, CAST(sum(score) AS BIGINT) AS s FROM events",
     latest, False),
    ("first_snapshot", f"SELECT count(*) AS n, min(id) AS low FROM events VERSION AS OF {snapshots[0]}",
     "SELECT count(*) AS n, min(id) AS low FROM e0", {"e0": (events, snapshots[0])}, False),
    ("before_delete_join",
     f"SELECT count(*) AS n FROM events VERSION AS OF {snapshots[1]} AS old "
     "LEFT JOIN events AS new ON old.id = new.id WHERE new.id IS NULL",
     "SELECT count(*) AS n FROM e1 AS old LEFT JOIN events AS new ON old.id = new.id "
     "WHERE new.id IS NULL",
     {"e1": (events, snapshots[1]), "events": (events, None)}, False),
    ("plain", "SELECT k, name, day FROM plain ORDER BY k", "SELECT k, name, day FROM plain ORDER BY k",
     {"plain": (plain, None)}, True),
    ("decimal_filter", "SELECT count(*) AS n, sum(amount) AS a FROM events WHERE price >= 9.90",
     "SELECT count(*) AS n, sum(amount) AS a FROM events WHERE price >= 9.90", latest, False),
    ("negative_decimal_filter", "SELECT count(*) AS n FROM events WHERE price > -1.5 AND price < 0.05",
     "SELECT count(*) AS n FROM events WHERE price > -1.5 AND price < 0.05", latest, False),
    ("timestamp_filter",
     "SELECT count(*) AS n FROM events WHERE ts < TIMESTAMP '2026-01-08 00:00:00'",
     "SELECT count(*) AS n FROM events WHERE ts < TIMESTAMP '2026-01-08 00:00:00'", latest, False),
    ("null_count_filter", "SELECT count(*) AS n FROM events WHERE score IS NULL AND id >= 800",
     "SELECT count(*) AS n FROM events WHERE score IS NULL AND id >= 800", latest, False),
    ("no_file_matches", "SELECT count(*) AS n, max(id) AS m FROM events WHERE id > 100000",
     "SELECT count(*) AS n, max(id) AS m FROM events WHERE id > 100000", latest, False),
    ("date_filter", "SELECT k FROM plain WHERE day BETWEEN DATE '2026-01-10' AND DATE '2026-01-12' ORDER BY k",
     "SELECT k FROM plain WHERE day BETWEEN DATE '2026-01-10' AND DATE '2026-01-12' ORDER BY k",
     {"plain": (plain, None)}, True),
    ("renamed_and_reused", "SELECT b, c, n FROM evolved ORDER BY b",
     "SELECT b, c, n FROM evolved ORDER BY b", {"evolved": (evolved, None)}, True),
    ("renamed_filter", "SELECT count(*) AS k, sum(n) AS s FROM evolved WHERE b >= 5 AND c IS NULL",
     "SELECT count(*) AS k, CAST(sum(n) AS BIGINT) AS s FROM evolved WHERE b >= 5 AND c IS NULL",
     {"evolved": (evolved, None)}, False),
    ("renamed_pruned", "SELECT b, c FROM evolved WHERE c > 100 ORDER BY b",
     "SELECT b, c FROM evolved WHERE c > 100 ORDER BY b", {"evolved": (evolved, None)}, True),
    ("before_renames", f"SELECT a, c, n FROM evolved VERSION AS OF {evolved_snapshots[0]} ORDER BY a",
     "SELECT a, c, n FROM e0 ORDER BY a", {"e0": (evolved, evolved_snapshots[0])}, True),
    ("transforms", "SELECT name, count(*) AS n, sum(id) AS s FROM transforms GROUP BY name ORDER BY name",
     "SELECT name, count(*) AS n, CAST(sum(id) AS BIGINT) AS s FROM transforms GROUP BY name ORDER BY name",
     {"transforms": (transforms, None)}, True),
    ("transforms_filtered",
     "SELECT id FROM transforms WHERE id IN (7, 130) OR (name LIKE 'al%' AND day >= DATE '2026-01-01' "
     "AND ts < TIMESTAMP '2026-01-01 03:00:00') ORDER BY id",
     "SELECT id FROM transforms WHERE id IN (7, 130) OR (name LIKE 'al%' AND day >= DATE '2026-01-01' "
     "AND ts < TIMESTAMP '2026-01-01 03:00:00') ORDER BY id",
     {"transforms": (transforms, None)}, True),
    ("equality_deletes", "SELECT region, count(*) AS n, sum(id) AS s FROM equality GROUP BY region ORDER BY region",
     f"SELECT region, count(*) AS n, CAST(sum(id) AS BIGINT) AS s FROM {EQ_LIVE} GROUP BY region ORDER BY region",
     {"eq_written": eq_written}, True),
    ("equality_keys_not_selected", "SELECT id FROM equality WHERE id < 120 ORDER BY id",
     f"SELECT id FROM {EQ_LIVE} WHERE id < 120 ORDER BY id", {"eq_written": eq_written}, True),
    ("equality_count_star", "SELECT count(*) AS n FROM equality",
     f"SELECT count(*) AS n FROM {EQ_LIVE}", {"eq_written": eq_written}, False),
    ("equality_limit", "SELECT count(*) AS n FROM (SELECT region FROM equality LIMIT 1000)",
     f"SELECT count(*) AS n FROM {EQ_LIVE}", {"eq_written": eq_written}, False),
    ("before_equality_deletes",
     f"SELECT count(*) AS n, count(k) AS keyed FROM equality VERSION AS OF {equality_snapshots[0]}",
     "SELECT count(*) AS n, count(k) AS keyed FROM e0", {"e0": (equality, equality_snapshots[0])}, False),
    ("position_deletes", "SELECT count(*) AS n, sum(id) AS s, count(DISTINCT v) AS vs FROM mor",
     "SELECT count(*) AS n, CAST(sum(id) AS BIGINT) AS s, count(DISTINCT v) AS vs FROM mor", {"mor": (mor, None)}, False),
    ("position_deletes_rows", "SELECT id, v FROM mor WHERE id % 5 = 1 ORDER BY id",
     "SELECT id, v FROM mor WHERE id % 5 = 1 ORDER BY id", {"mor": (mor, None)}, True),
    ("position_deletes_filtered", "SELECT id FROM mor WHERE id BETWEEN 1490 AND 1610 ORDER BY id",
     "SELECT id FROM mor WHERE id BETWEEN 1490 AND 1610 ORDER BY id", {"mor": (mor, None)}, True),
    ("before_position_deletes",
     f"SELECT count(*) AS n, sum(id) AS s FROM mor VERSION AS OF {mor_snapshots[1]}",
     "SELECT count(*) AS n, CAST(sum(id) AS BIGINT) AS s FROM m1", {"m1": (mor, mor_snapshots[1])}, False),
    ("between_position_deletes",
     f"SELECT count(*) AS n, sum(id) AS s FROM mor VERSION AS OF {mor_snapshots[2]}",
     "SELECT count(*) AS n, CAST(sum(id) AS BIGINT) AS s FROM m2", {"m2": (mor, mor_snapshots[2])}, False),
    ("deleted_by_position",
     f"SELECT old.id FROM mor VERSION AS OF {mor_snapshots[1]} AS old "
     "LEFT JOIN mor AS new ON old.id = new.id WHERE new.id IS NULL AND old.id % 3 = 0 ORDER BY old.id",
     "SELECT old.id FROM m1 AS old LEFT JOIN mor AS new ON old.id = new.id "
     "WHERE new.id IS NULL AND old.id % 3 = 0 ORDER BY old.id",
     {"m1": (mor, mor_snapshots[1]), "mor": (mor, None)}, True),
]
listing = []
for name, ours, theirs, tables, ordered in cases:
    con = duckdb.connect()
    for alias, source in tables.items():
        con.register(alias, source if isinstance(source, pa.Table) else snapshot(*source))
    con.execute(f"COPY ({theirs}) TO '{os.path.join(out, 'expected', name)}.parquet'")
    listing.append({"name": name, "sql": ours, "ordered": ordered})
with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({
        "tables": {"events": events.metadata_location, "plain": plain.metadata_location,
                   "evolved": evolved.metadata_location, "transforms": transforms.metadata_location,
                   "nested_renamed": nested.metadata_location, "mor": mor.metadata_location,
                   "equality": equality.metadata_location},
        "snapshots": snapshots,
        "cases": listing,
    }, f, indent=1)
