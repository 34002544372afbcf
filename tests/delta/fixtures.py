"""Delta Lake tables written the way teams write them from Python, and the answers the
writer's own reader gives, for tests/tests/end_to_end/delta_tables.rs.

    fixtures.py <out dir>

writes, under <out dir>:
- `events`: partitioned by `day` (a date) and `kind` (a string, null for some rows),
  seven versions: appends, a DELETE and an UPDATE (which rewrite files), an append that
  adds a column (schema evolution), a checkpoint at version 5 and a commit after it;
- `mapped`: column mapping in `name` mode (physical names unlike the logical ones), a
  column whose name has a space, partitioned by a mapped column;
- `dv_small`: a copy of tests/delta/table-with-dv-small, written by Databricks: one file
  of ten rows and a deletion vector that deletes two of them (delta-rs's test data);
- `cases.json`: for each case its name, the SQL lambdafusion runs, whether its row order
  counts, and `expected/<name>.parquet`: the answer. That answer is DuckDB's query over
  each table version as deltalake's own reader (its QueryBuilder, which applies deletion
  vectors) materializes it: neither lambdafusion nor the Delta kernel it uses is involved.
"""

import json
import os
import shutil
import sys
import time
from datetime import date, datetime, timezone

import duckdb
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake

HERE = os.path.dirname(os.path.abspath(__file__))


def events_rows(start, n):
    kinds = ["click", "view", "buy", None]
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "day": pa.array([date(2026, 1, 1 + (i % 3)) for i in range(start, start + n)]),
            "kind": pa.array([kinds[i % 4] for i in range(start, start + n)], pa.string()),
            "amount": pa.array([float((i * 37) % 101) for i in range(start, start + n)]),
            "note": pa.array([f"n{i % 13}" for i in range(start, start + n)], pa.string()),
        }
    )


def write_events(path):
    write_deltalake(path, events_rows(0, 300), partition_by=["day", "kind"])  # v0
    write_deltalake(path, events_rows(300, 200), mode="append", partition_by=["day", "kind"])  # v1
    # TIMESTAMP AS OF between version 1 and 2 must read version 1: commits a second apart.
    time.sleep(1.2)
    DeltaTable(path).delete("amount < 10")  # v2
    DeltaTable(path).update(predicate="id % 7 = 0", updates={"note": "'updated'"})  # v3
    evolved = events_rows(500, 150).append_column(
        "score", pa.array([i * 0.5 for i in range(150)], pa.float64())
    )
    write_deltalake(path, evolved, mode="append", partition_by=["day", "kind"], schema_mode="merge")  # v4
    write_deltalake(path, events_rows(650, 50), mode="append", partition_by=["day", "kind"], schema_mode="merge")  # v5
    DeltaTable(path).create_checkpoint()
    write_deltalake(path, events_rows(700, 40), mode="append", partition_by=["day", "kind"], schema_mode="merge")  # v6


def write_mapped(path):
    rows = pa.table(
        {
            "region": pa.array(["north", "south", "east"] * 20, pa.string()),
            "unit price": pa.array([float(i) for i in range(60)]),
            "qty": pa.array([i % 5 for i in range(60)], pa.int32()),
        }
    )
    write_deltalake(
        path, rows, partition_by=["region"], configuration={"delta.columnMapping.mode": "name"}
    )
    write_deltalake(path, rows.slice(0, 10), mode="append", partition_by=["region"])


def snapshot(path, version=None):
    """A table version as deltalake's own reader returns it."""
    table = DeltaTable(path, version=version)
    rows = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    # DuckDB's Arrow scan cannot filter string views: plain strings, same values.
    plain = [
        f.with_type(pa.string()) if f.type == pa.string_view() else f for f in rows.schema
    ]
    return rows.cast(pa.schema(plain))


def commit_time(path, version):
    """When a commit was written: what the Delta kernel resolves TIMESTAMP AS OF against."""
    log = os.path.join(path, "_delta_log", f"{version:020d}.json")
    return os.path.getmtime(log)


def main(out):
    os.makedirs(os.path.join(out, "expected"), exist_ok=True)
    events, mapped, dv = (os.path.join(out, n) for n in ("events", "mapped", "dv_small"))
    write_events(events)
    write_mapped(mapped)
    shutil.copytree(os.path.join(HERE, "table-with-dv-small"), dv)

    between = datetime.fromtimestamp(commit_time(events, 1) + 0.5, timezone.utc)
    as_of = between.strftime("%Y-%m-%d %H:%M:%S.%f")
    # (name, lambdafusion's SQL, DuckDB's SQL, {DuckDB name: (table, version)}, ordered)
    latest = {"events": (events, None)}
    cases = [
        ("count", "SELECT count(*) AS n, sum(amount) AS total FROM events",
         "SELECT count(*) AS n, sum(amount) AS total FROM events", latest, False),
        ("by_partition",
         "SELECT day, kind, count(*) AS n, sum(amount) AS total FROM events GROUP BY day, kind",
         "SELECT day, kind, count(*) AS n, sum(amount) AS total FROM events GROUP BY day, kind",
         latest, False),
        ("partition_filter",
         "SELECT id, kind, note FROM events WHERE day = DATE '2026-01-02' AND kind = 'buy'",
         "SELECT id, kind, note FROM events WHERE day = DATE '2026-01-02' AND kind = 'buy'",
         latest, False),
        ("null_partition",
         "SELECT day, count(*) AS n FROM events WHERE kind IS NULL GROUP BY day",
         "SELECT day, count(*) AS n FROM events WHERE kind IS NULL GROUP BY day", latest, False),
        ("data_filter",
         "SELECT id, amount, note FROM events WHERE amount > 95 AND id >= 600 ORDER BY id",
         "SELECT id, amount, note FROM events WHERE amount > 95 AND id >= 600 ORDER BY id",
         latest, True),
        ("evolved_column",
         "SELECT count(*) AS n, count(score) AS scored, sum(score) AS s FROM events",
         "SELECT count(*) AS n, count(score) AS scored, sum(score) AS s FROM events",
         latest, False),
        ("updated_rows",
         "SELECT note, count(*) AS n FROM events WHERE id % 7 = 0 GROUP BY note",
         "SELECT note, count(*) AS n FROM events WHERE id % 7 = 0 GROUP BY note",
         latest, False),
        ("version_0", "SELECT count(*) AS n, sum(amount) AS total FROM events VERSION AS OF 0",
         "SELECT count(*) AS n, sum(amount) AS total FROM e0", {"e0": (events, 0)}, False),
        ("version_2_join_latest",
         "SELECT old.kind, count(*) AS n FROM events VERSION AS OF 2 AS old "
         "JOIN events AS new ON old.id = new.id GROUP BY old.kind",
         "SELECT old.kind, count(*) AS n FROM e2 AS old JOIN events AS new ON old.id = new.id "
         "GROUP BY old.kind",
         {"e2": (events, 2), "events": (events, None)}, False),
        ("timestamp_as_of",
         f"SELECT count(*) AS n, min(amount) AS low FROM events TIMESTAMP AS OF '{as_of}'",
         "SELECT count(*) AS n, min(amount) AS low FROM e1", {"e1": (events, 1)}, False),
        ("mapped",
         'SELECT region, sum("unit price") AS revenue, sum(qty) AS q, count(*) AS n '
         "FROM mapped GROUP BY region",
         'SELECT region, sum("unit price") AS revenue, CAST(sum(qty) AS BIGINT) AS q, '
         "count(*) AS n FROM mapped GROUP BY region",
         {"mapped": (mapped, None)}, False),
        ("mapped_filter",
         'SELECT "unit price", qty FROM mapped WHERE region = \'east\' AND qty > 2',
         'SELECT "unit price", qty FROM mapped WHERE region = \'east\' AND qty > 2',
         {"mapped": (mapped, None)}, False),
        ("deletion_vector", "SELECT value FROM dv_small ORDER BY value",
         "SELECT value FROM dv_small ORDER BY value", {"dv_small": (dv, None)}, True),
        ("deletion_vector_count", "SELECT count(*) AS n, max(value) AS top FROM dv_small",
         "SELECT count(*) AS n, max(value) AS top FROM dv_small", {"dv_small": (dv, None)}, False),
        ("before_deletion_vector", "SELECT count(*) AS n FROM dv_small VERSION AS OF 0",
         "SELECT count(*) AS n FROM dv0", {"dv0": (dv, 0)}, False),
    ]
    listing = []
    for name, ours, theirs, tables, ordered in cases:
        con = duckdb.connect()
        for alias, (path, version) in tables.items():
            con.register(alias, snapshot(path, version))
        con.execute(f"COPY ({theirs}) TO '{os.path.join(out, 'expected', name)}.parquet'")
        listing.append({"name": name, "sql": ours, "ordered": ordered})
    tables = {"events": events, "mapped": mapped, "dv_small": dv}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"tables": tables, "cases": listing}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
