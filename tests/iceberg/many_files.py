"""An Iceberg table of 10,000 data files in 100 manifests (PyIceberg `add_files`, 100 files
per commit), for the planning measurement in tests/tests/end_to_end/iceberg_tables.rs:
`many_files.py <out dir>`; prints the metadata file's location.
"""

import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

out = os.path.abspath(sys.argv[1])
data = os.path.join(out, "warehouse", "big", "data")
os.makedirs(data, exist_ok=True)
catalog = SqlCatalog("big", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}/warehouse")
catalog.create_namespace("big")
table = catalog.create_table("big.files", schema=Schema(
    NestedField(1, "id", LongType()), NestedField(2, "p", StringType())),
    location=f"file://{out}/warehouse/big")
for commit in range(100):
    paths = []
    for i in range(100):
        n = commit * 100 + i
        path = os.path.join(data, f"f{n:05}.parquet")
        pq.write_table(pa.table({"id": pa.array([n * 100 + j for j in range(100)], pa.int64()),
                                 "p": [str(n % 10)] * 100}), path)
        paths.append(f"file://{path}")
    table.add_files(paths)
print(catalog.load_table("big.files").metadata_location)
