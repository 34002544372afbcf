"""TPC-H registered in a Glue Data Catalog, three ways, for tests/tests/end_to_end/glue_tables.rs:
`tpch_in_glue.py <parquet dir> <delta dir> <hive dir> <glue endpoint> <iceberg dir>`.

- database `tpch_hive`: Hive tables over Parquet written here with pyarrow from the files
  `lambdafusion tpch` generated, orders and lineitem partitioned Hive-style (by
  o_orderstatus and l_returnflag) with one Glue partition per directory, as a crawler or
  `MSCK REPAIR TABLE` registers them;
- database `tpch_delta`: the Delta tables of tests/delta/tpch_as_delta.py
  (`table_type = DELTA`, as Athena registers them);
- database `tpch_iceberg`: the Iceberg tables of tests/iceberg/tpch_as_iceberg.py
  (`table_type = ICEBERG` and their `metadata_location`, as Athena registers them).

`tpch_in_glue.py --delta-at <glue endpoint> <location prefix>` registers only `tpch_delta`,
its tables at <prefix>/<table> (the local AWS stack's test uploads them there; its Iceberg
tables are registered by PyIceberg's own Glue catalog).
"""

import json

import os
import sys

import boto3
import pyarrow as pa
import pyarrow.dataset as ds

PARTITIONS = {"orders": "o_orderstatus", "lineitem": "l_returnflag"}
TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]
PARQUET = {
    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
    "SerdeInfo": {"SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"},
}


def hive_type(t):
    if pa.types.is_int64(t):
        return "bigint"
    if pa.types.is_int32(t):
        return "int"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view":
        return "string"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_float64(t):
        return "double"
    raise SystemExit(f"no Hive type for {t}")


def client(endpoint):
    return boto3.client("glue", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


def register_delta(glue, table, location):
    glue.create_table(DatabaseName="tpch_delta", TableInput={
        "Name": table, "TableType": "EXTERNAL_TABLE", "Parameters": {"table_type": "DELTA"},
        "StorageDescriptor": {"Location": location, "Columns": []}})


def main(parquet, delta, hive, endpoint, iceberg):
    glue = client(endpoint)
    with open(os.path.join(iceberg, "tables.json")) as f:
        iceberg_tables = json.load(f)
    for database in ["tpch_hive", "tpch_delta", "tpch_iceberg"]:
        glue.create_database(DatabaseInput={"Name": database})
    for table in TABLES:
        rows = ds.dataset(os.path.join(parquet, table), format="parquet").to_table()
        # Hive's strings are plain strings (pyarrow cannot partition string views).
        rows = rows.cast(pa.schema([pa.field(f.name, pa.string() if str(f.type) == "string_view" else f.type)
                                    for f in rows.schema]))
        key = PARTITIONS.get(table)
        target = os.path.join(hive, table)
        columns = [{"Name": f.name, "Type": hive_type(f.type)} for f in rows.schema if f.name != key]
        descriptor = dict(PARQUET, Columns=columns, Location=target)
        keys = []
        if key:
            keys = [{"Name": key, "Type": "string"}]
            ds.write_dataset(rows, target, format="parquet", partitioning=[key], partitioning_flavor="hive")
        else:
            ds.write_dataset(rows, target, format="parquet")
        glue.create_table(DatabaseName="tpch_hive", TableInput={
            "Name": table, "TableType": "EXTERNAL_TABLE", "StorageDescriptor": descriptor,
            "PartitionKeys": keys, "Parameters": {"classification": "parquet"}})
        if key:
            for name in sorted(os.listdir(target)):
                value = name.split("=", 1)[1]
                glue.create_partition(DatabaseName="tpch_hive", TableName=table, PartitionInput={
                    "Values": [value],
                    "StorageDescriptor": dict(PARQUET, Columns=columns, Location=os.path.join(target, name))})
        register_delta(glue, table, os.path.join(delta, table))
        metadata = iceberg_tables[table]
        glue.create_table(DatabaseName="tpch_iceberg", TableInput={
            "Name": table, "TableType": "EXTERNAL_TABLE",
            "Parameters": {"table_type": "ICEBERG", "metadata_location": metadata},
            "StorageDescriptor": {"Location": metadata.split("/metadata/")[0], "Columns": []}})


if __name__ == "__main__":
    if sys.argv[1] == "--delta-at":
        glue = client(sys.argv[2])
        glue.create_database(DatabaseInput={"Name": "tpch_delta"})
        for table in TABLES:
            register_delta(glue, table, f"{sys.argv[3].rstrip('/')}/{table}")
    else:
        main(*sys.argv[1:6])
