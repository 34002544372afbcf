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
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (DateType, DecimalType, DoubleType, LongType, NestedField, StringType,
                             TimestampType)

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


def batch(start, n):
    base = datetime(2026, 1, 1)
    from decimal import Decimal
    return pa.Table.from_pylist([
        {"id": i, "region": [None, "eu", "us", "ap"][i % 4], "ts": base + timedelta(days=(i // 100) * 7, hours=i % 24),
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


# --- renamed: a column renamed after data was written (refused: read by name, it would
# come back empty) ------------------------------------------------------------------------
renamed = catalog.create_table("lake.renamed", schema=Schema(NestedField(1, "a", LongType())))
renamed.append(pa.Table.from_pylist([{"a": 1}, {"a": 2}], schema=renamed.schema().as_arrow()))
with renamed.update_schema() as update:
    update.rename_column("a", "b")
renamed = catalog.load_table("lake.renamed")


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
]
listing = []
for name, ours, theirs, tables, ordered in cases:
    con = duckdb.connect()
    for alias, (table, snapshot_id) in tables.items():
        con.register(alias, snapshot(table, snapshot_id))
    con.execute(f"COPY ({theirs}) TO '{os.path.join(out, 'expected', name)}.parquet'")
    listing.append({"name": name, "sql": ours, "ordered": ordered})
with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({
        "tables": {"events": events.metadata_location, "plain": plain.metadata_location,
                   "renamed": renamed.metadata_location},
        "snapshots": snapshots,
        "cases": listing,
    }, f, indent=1)
