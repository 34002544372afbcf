"""Glue Data Catalog fixtures for tests/tests/end_to_end/glue_tables.rs.

Usage: fixtures.py <dir> <glue endpoint> [<location prefix> <s3 endpoint>]

Writes table files under <dir> with pyarrow (and one Delta table with deltalake), registers
them in the Glue at <endpoint> (moto) with boto3 the way Athena, crawlers and Spark do,
and writes <dir>/expected.json: each case's SQL and the answer computed here from the
rows written, never by lambdafusion. With a location prefix (`s3://bucket/data/glue`),
the tables are registered there instead of <dir>, for a caller that uploads <dir> to it;
then PyIceberg's Glue catalog also writes an Iceberg table straight to S3 there (through
<s3 endpoint>) and registers it, as Athena and Spark do.
"""

import gzip
import json
import os
import sys

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

root, endpoint = os.path.abspath(sys.argv[1]), sys.argv[2]
prefix = sys.argv[3].rstrip("/") if len(sys.argv) > 3 else None
s3_endpoint = sys.argv[4] if len(sys.argv) > 4 else None


def at(path):
    """Where the table registered for the local `path` lives."""
    if prefix is None or not path.startswith(root):
        return path
    return prefix + "/" + os.path.relpath(path, root)
glue = boto3.client(
    "glue",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)

PARQUET = {
    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
    "SerdeInfo": {"SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"},
}
TEXT = {
    "InputFormat": "org.apache.hadoop.mapred.TextInputFormat",
    "OutputFormat": "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
}


def table(database, name, columns, location, storage, partition_keys=(), parameters=None, table_type="EXTERNAL_TABLE"):
    descriptor = dict(storage)
    descriptor["Columns"] = [{"Name": n, "Type": t} for n, t in columns]
    descriptor["Location"] = at(location)
    glue.create_table(
        DatabaseName=database,
        TableInput={
            "Name": name,
            "TableType": table_type,
            "Parameters": parameters or {},
            "StorageDescriptor": descriptor,
            "PartitionKeys": [{"Name": n, "Type": t} for n, t in partition_keys],
        },
    )


def partition(database, name, values, location, storage):
    descriptor = dict(storage)
    descriptor["Location"] = at(location)
    glue.create_partition(
        DatabaseName=database,
        TableName=name,
        PartitionInput={"Values": [str(v) for v in values], "StorageDescriptor": descriptor},
    )


def directory(*parts):
    path = os.path.join(root, *parts)
    os.makedirs(path, exist_ok=True)
    return path


for database in ["sales", "web"]:
    glue.create_database(DatabaseInput={"Name": database})

cases = []


def case(name, sql, rows):
    cases.append({"name": name, "sql": sql, "rows": rows})


# --- orders: Parquet, partitioned by region (string) and year (int) ----------------------
orders_rows = []
registered = [("eu", 2023, "hive"), ("eu", 2024, "hive"), ("us", 2024, "hive"), ("us", 2023, "odd")]
for region, year, layout in registered + [("ap", 2024, "unregistered")]:
    if layout == "odd":
        # Registered at a location that is not key=value: the values come from Glue.
        path = directory("orders", "moved", "batch-7")
    else:
        path = directory("orders", f"region={region}", f"year={year}")
    n = 5 + year % 10 + len(region)
    ids = list(range(year * 100, year * 100 + n))
    amounts = [round(i % 97 * 1.5, 2) for i in ids]
    pq.write_table(pa.table({"id": ids, "amount": amounts, "note": [f"{region}-{i}" for i in ids]}),
                   os.path.join(path, "part-00000.parquet"))
    # What Hive and Athena skip: markers and hidden files, never read as data.
    open(os.path.join(path, "_SUCCESS"), "w").close()
    with open(os.path.join(path, ".part-00000.parquet.crc"), "wb") as f:
        f.write(b"not parquet")
    if layout != "unregistered":
        orders_rows += [(region, year, i, a) for i, a in zip(ids, amounts)]

table("sales", "orders", [("id", "bigint"), ("amount", "double"), ("note", "string")],
      directory("orders"), PARQUET, partition_keys=[("region", "string"), ("year", "int")],
      parameters={"classification": "parquet"})
for region, year, layout in registered:
    location = directory("orders", "moved", "batch-7") if layout == "odd" else directory("orders", f"region={region}", f"year={year}")
    partition("sales", "orders", [region, year], location, PARQUET)


def group(rows, where=lambda r: True):
    out = {}
    for region, year, _, amount in filter(where, rows):
        c, s = out.get((region, year), (0, 0.0))
        out[(region, year)] = (c + 1, s + amount)
    return [[r, y, c, round(s, 2)] for (r, y), (c, s) in sorted(out.items())]


case("orders_by_partition",
     "SELECT region, year, count(*), round(sum(amount), 2) FROM glue.sales.orders GROUP BY region, year ORDER BY region, year",
     group(orders_rows))
case("orders_pruned",
     "SELECT region, year, count(*), round(sum(amount), 2) FROM glue.sales.orders WHERE region = 'eu' AND year >= 2024 GROUP BY region, year ORDER BY region, year",
     group(orders_rows, lambda r: r[0] == "eu" and r[1] >= 2024))
case("orders_in_list",
     "SELECT region, year, count(*), round(sum(amount), 2) FROM glue.sales.orders WHERE region IN ('us', 'eu') AND year = 2023 GROUP BY region, year ORDER BY region, year",
     group(orders_rows, lambda r: r[0] in ("us", "eu") and r[1] == 2023))
# The default database's tables are found unqualified (a declared table of the same
# name would win, so this one is named as no declared table is).
case("unqualified",
     "SELECT count(*), sum(k) FROM ledger",
     [[4, 10]])

# --- events: Hive text, '|' delimited, gzip, one header line, \N nulls ---------------------
# Hive's text format has no quoting, and a field that does not parse is null.
events = [(1, "click", "2024-01-02"), (2, None, "2024-01-03"), (3, "view", None), (4, "buy", "2024-02-01"),
          (5, 'say "hi"', "someday")]
path = directory("events")
for i, chunk in enumerate([events[:2], events[2:]]):
    with gzip.open(os.path.join(path, f"events-{i}.txt.gz"), "wt") as f:
        f.write("id|kind|day\n")
        for row in chunk:
            f.write("|".join("\\N" if v is None else str(v) for v in row) + "\n")
events[-1] = (5, 'say "hi"', None)
table("sales", "events", [("id", "int"), ("kind", "string"), ("day", "date")], path,
      dict(TEXT, SerdeInfo={"SerializationLibrary": "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                            "Parameters": {"field.delim": "|", "serialization.format": "|"}}),
      parameters={"skip.header.line.count": "1", "classification": "csv"})
case("events",
     "SELECT id, kind, CAST(day AS VARCHAR) FROM glue.sales.events ORDER BY id",
     [[i, k, d] for i, k, d in events])

# --- people: OpenCSVSerde, quoted fields with the separator inside -------------------------
path = directory("people")
with open(os.path.join(path, "people.csv"), "w") as f:
    f.write('"1","Ada, Countess","London"\n"2","Grace","New York, NY"\n')
table("web", "people", [("id", "string"), ("name", "string"), ("city", "string")], path,
      dict(TEXT, SerdeInfo={"SerializationLibrary": "org.apache.hadoop.hive.serde2.OpenCSVSerde",
                            "Parameters": {"separatorChar": ",", "quoteChar": "\""}}))
case("people", "SELECT id, name, city FROM glue.web.people ORDER BY id",
     [["1", "Ada, Countess", "London"], ["2", "Grace", "New York, NY"]])

# --- clicks: JSON lines (OpenX SerDe) -------------------------------------------------------
path = directory("clicks")
clicks = [{"user": "a", "n": 3}, {"user": "b", "n": 4}, {"user": "a", "n": 5}]
with open(os.path.join(path, "clicks.json"), "w") as f:
    f.write("\n".join(json.dumps(c) for c in clicks) + "\n")
table("web", "clicks", [("user", "string"), ("n", "bigint")], path,
      dict(TEXT, SerdeInfo={"SerializationLibrary": "org.openx.data.jsonserde.JsonSerDe"}))
case("clicks", "SELECT user, sum(n) FROM glue.web.clicks GROUP BY user ORDER BY user", [["a", 8], ["b", 4]])

# --- a Delta table registered in Glue (as Athena and Spark register them) -----------------
path = directory("ledger")
write_deltalake(path, pa.table({"k": [1, 2, 3], "v": ["x", "y", "z"]}))
write_deltalake(path, pa.table({"k": [4], "v": ["w"]}), mode="append")
table("sales", "ledger", [("k", "bigint"), ("v", "string")], path,
      {"SerdeInfo": {"SerializationLibrary": "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"}},
      parameters={"table_type": "DELTA"})
case("ledger", "SELECT count(*), sum(k) FROM glue.sales.ledger", [[4, 10]])

# --- an Iceberg table written by PyIceberg, registered as Athena registers one ------------
if prefix is None:
    from pyiceberg.catalog.sql import SqlCatalog
    iceberg = SqlCatalog("glue_fixture", uri=f"sqlite:///{root}/iceberg.db", warehouse=f"file://{directory('iceberg')}")
    iceberg.create_namespace("w")
    made = iceberg.create_table("w.scores", schema=pa.schema([("player", pa.string()), ("points", pa.int64())]))
    made.append(pa.table({"player": ["a", "b", "a"], "points": pa.array([3, 4, 5], pa.int64())}))
    made = iceberg.load_table("w.scores")
    table("web", "scores", [("player", "string"), ("points", "bigint")], made.location(), PARQUET,
          parameters={"table_type": "ICEBERG", "metadata_location": made.metadata_location})
    case("iceberg_scores", "SELECT player, sum(points) FROM glue.web.scores GROUP BY player ORDER BY player",
         [["a", 8], ["b", 4]])
elif s3_endpoint:
    # PyIceberg's own Glue catalog, its files on S3: partitioned, a column renamed between
    # two appends, merge-on-read position deletes in one partition. The answers are
    # PyIceberg's reading of the table, aggregated by DuckDB.
    import duckdb
    from pyiceberg.catalog.glue import GlueCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "iceberg"))
    from deletes import position_deletes
    credentials = {"access-key-id": "test", "secret-access-key": "test", "region": "us-east-1"}
    iceberg = GlueCatalog("glue", **{"glue.endpoint": endpoint, "s3.endpoint": s3_endpoint},
                          **{f"{service}.{k}": v for service in ("glue", "s3") for k, v in credentials.items()})
    games = iceberg.create_table(
        "web.games",
        schema=Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "player", StringType()),
                      NestedField(3, "points", LongType())),
        partition_spec=PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(),
                                                    name="player")),
        location=f"{prefix}/iceberg/games")
    games.append(pa.Table.from_pylist([{"id": i, "player": "abc"[i % 3], "points": i % 17} for i in range(300)],
                                      schema=games.schema().as_arrow()))
    with games.update_schema() as update:
        update.rename_column("points", "score")
    games = iceberg.load_table("web.games")
    games.append(pa.Table.from_pylist([{"id": i, "player": "abc"[i % 3], "score": i % 17} for i in range(300, 400)],
                                      schema=games.schema().as_arrow()))
    games = iceberg.load_table("web.games")
    first_a = sorted(t.file.file_path for t in games.scan().plan_files() if "/player=a/" in t.file.file_path)[0]
    partition_a = next(t.file.partition for t in games.scan().plan_files() if t.file.file_path == first_a)
    position_deletes(games, "deletes-a", first_a, lambda i: i % 2 == 0, partition=partition_a)
    games = iceberg.load_table("web.games")
    read = games.scan().to_arrow()
    for name, sql in [
        ("iceberg_games", "SELECT player, count(*), sum(score) FROM {} GROUP BY player ORDER BY player"),
        ("iceberg_games_filter", "SELECT count(*), sum(score) FROM {} WHERE player = 'a' AND id >= 200"),
    ]:
        rows = duckdb.sql(sql.format("read")).fetchall()
        case(name, sql.format("glue.web.games"), [[int(v) if isinstance(v, int) else v for v in r] for r in rows])

# --- tables lambdafusion must refuse, each naming the table and why ------------------------
# An Iceberg table whose metadata file is missing: refused, naming the table.
table("sales", "iceberg_table", [("a", "int")], directory("ice"), PARQUET,
      parameters={"table_type": "ICEBERG", "metadata_location": at(directory("ice") + "/metadata/00001.metadata.json")})
table("sales", "avro_table", [("a", "int")], directory("avro"),
      {"SerdeInfo": {"SerializationLibrary": "org.apache.hadoop.hive.serde2.avro.AvroSerDe"}})
table("sales", "outside", [("a", "int")], "/etc" if prefix is None else "s3://elsewhere/t", PARQUET)
table("sales", "union_column", [("a", "uniontype<int,string>")], directory("orders"), PARQUET)
table("sales", "a_view", [("a", "int")], "", PARQUET, table_type="VIRTUAL_VIEW")
table("sales", "escaping_partition", [("a", "int")], directory("esc"), PARQUET, partition_keys=[("p", "string")])
partition("sales", "escaping_partition", ["x"], "/etc/ssl" if prefix is None else "s3://elsewhere/p", PARQUET)

with open(os.path.join(root, "expected.json"), "w") as f:
    json.dump({"cases": cases}, f, indent=1)
