"""TPC-H as Apache Iceberg tables, written by PyIceberg from the Parquet files `lambdafusion
tpch` generates: `tpch_as_iceberg.py <parquet dir> <out dir>`. A SQL catalog on sqlite
(<out>/catalog.db) with its warehouse under <out>/warehouse; orders is partitioned by
month(o_orderdate) (a hidden transform), lineitem by l_returnflag; every table is written
in two appends. Writes <out>/tables.json: {table: metadata file}.
"""

import json
import os
import sys

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.transforms import IdentityTransform, MonthTransform

PARTITIONS = {"orders": ("o_orderdate", MonthTransform()), "lineitem": ("l_returnflag", IdentityTransform())}
TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


def main(source, out):
    out = os.path.abspath(out)
    os.makedirs(os.path.join(out, "warehouse"), exist_ok=True)
    listing = os.path.join(out, "tables.json")
    if os.path.exists(listing):
        print(f"{out}: already written, left as it is")
        return
    catalog = SqlCatalog("tpch", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}/warehouse")
    catalog.create_namespace("tpch")
    tables = {}
    for name in TABLES:
        rows = ds.dataset(os.path.join(source, name), format="parquet").to_table()
        # Iceberg has no string views: plain strings.
        rows = rows.cast(pa.schema([pa.field(f.name, pa.string() if str(f.type) == "string_view" else f.type)
                                    for f in rows.schema]))
        table = catalog.create_table(f"tpch.{name}", schema=rows.schema)
        if name in PARTITIONS:
            column, transform = PARTITIONS[name]
            with table.update_spec() as spec:
                spec.add_field(column, transform)
        half = rows.num_rows // 2
        table.append(rows.slice(0, half))
        table.append(rows.slice(half))
        tables[name] = catalog.load_table(f"tpch.{name}").metadata_location
    with open(listing, "w") as f:
        json.dump(tables, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
