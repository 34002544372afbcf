"""TPC-H as Apache Iceberg tables, written by PyIceberg from the Parquet files `lambdafusion
tpch` generates. Orders is partitioned by month(o_orderdate) (a hidden transform), lineitem
by l_returnflag; every table is written in two appends. Two catalogs:

    tpch_as_iceberg.py <parquet dir> <out dir>
        a SQL catalog on sqlite (<out>/catalog.db) with its warehouse under <out>/warehouse;
    tpch_as_iceberg.py <parquet dir> <out dir> --glue <glue endpoint> --s3 <s3 endpoint>
                       --location s3://<bucket>/<prefix>
        PyIceberg's Glue catalog (database tpch_iceberg), the files written to S3 under the
        prefix, as Athena and Spark keep them (the local AWS stack's test).

Writes <out>/tables.json: {table: metadata file}.
"""

import argparse
import json
import os

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.transforms import IdentityTransform, MonthTransform

PARTITIONS = {"orders": ("o_orderdate", MonthTransform()), "lineitem": ("l_returnflag", IdentityTransform())}
TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


def catalog_of(args, out):
    if args.glue is None:
        from pyiceberg.catalog.sql import SqlCatalog
        catalog = SqlCatalog("tpch", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}/warehouse")
        catalog.create_namespace("tpch")
        return catalog, "tpch", lambda name: None
    from pyiceberg.catalog.glue import GlueCatalog
    credentials = {"access-key-id": "test", "secret-access-key": "test", "region": "us-east-1"}
    catalog = GlueCatalog("glue", **{"glue.endpoint": args.glue, "s3.endpoint": args.s3},
                          **{f"{service}.{k}": v for service in ("glue", "s3") for k, v in credentials.items()})
    catalog.create_namespace("tpch_iceberg")
    return catalog, "tpch_iceberg", lambda name: f"{args.location.rstrip('/')}/{name}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--glue")
    parser.add_argument("--s3")
    parser.add_argument("--location")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "warehouse"), exist_ok=True)
    listing = os.path.join(out, "tables.json")
    if os.path.exists(listing):
        print(f"{out}: already written, left as it is")
        return
    catalog, namespace, location = catalog_of(args, out)
    tables = {}
    for name in TABLES:
        rows = ds.dataset(os.path.join(args.source, name), format="parquet").to_table()
        # Iceberg has no string views: plain strings.
        rows = rows.cast(pa.schema([pa.field(f.name, pa.string() if str(f.type) == "string_view" else f.type)
                                    for f in rows.schema]))
        table = catalog.create_table(f"{namespace}.{name}", schema=rows.schema, location=location(name))
        if name in PARTITIONS:
            column, transform = PARTITIONS[name]
            with table.update_spec() as spec:
                spec.add_field(column, transform)
        half = rows.num_rows // 2
        table.append(rows.slice(0, half))
        table.append(rows.slice(half))
        tables[name] = catalog.load_table(f"{namespace}.{name}").metadata_location
    with open(listing, "w") as f:
        json.dump(tables, f, indent=1)


if __name__ == "__main__":
    main()
