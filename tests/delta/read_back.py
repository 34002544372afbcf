"""Reads a Delta table lambdafusion wrote with the `deltalake` package (delta-rs), for
tests/tests/end_to_end/delta_tables.rs: every version of it, as deltalake's own reader
materializes it, written as Parquet for the test to compare with lambdafusion's answer.

    read_back.py <table dir> <out dir> <column,column,...>

writes <out dir>/v<N>.parquet for every version N (the columns named, in that order),
<out dir>/filtered.parquet for the newest version's rows with id > 5000 (deltalake
skips files by the statistics lambdafusion wrote, then filters rows), and prints one
JSON line: the newest version, the partition columns, the protocol and
the number of files of the newest version.
"""

import json
import os
import sys

import pyarrow.parquet as pq
from deltalake import DeltaTable

table, out, columns = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
newest = DeltaTable(table)
for version in range(newest.version() + 1):
    rows = DeltaTable(table, version=version).to_pyarrow_table(columns=columns)
    pq.write_table(rows, os.path.join(out, f"v{version}.parquet"))
filtered = newest.to_pyarrow_table(columns=columns, filters=[("id", ">", 5000)])
pq.write_table(filtered, os.path.join(out, "filtered.parquet"))
protocol = newest.protocol()
print(
    json.dumps(
        {
            "version": newest.version(),
            "partition_columns": newest.metadata().partition_columns,
            "min_reader_version": protocol.min_reader_version,
            "files": len(newest.file_uris()),
        }
    )
)
