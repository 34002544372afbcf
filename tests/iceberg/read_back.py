"""Reads an Iceberg table lambdafusion wrote with PyIceberg, for
tests/tests/end_to_end/iceberg_tables.rs: every snapshot of it, as PyIceberg's own reader
materializes it, written as Parquet for the test to compare with lambdafusion's answer.

    read_back.py <metadata.json> <out dir> <column,column,...>

writes <out dir>/s<i>.parquet for the i-th snapshot (in commit order; the columns named,
in that order), <out dir>/filtered.parquet for the newest snapshot's rows with id > 5000
(PyIceberg skips data files by the bounds lambdafusion wrote in the manifests, then
filters rows), <out dir>/partition.parquet for its rows with kind = 'k/1' (PyIceberg
prunes manifests by the manifest list's partition summaries, files by their partition
values), and prints one JSON line: the snapshot ids, the partition spec, how many data
files the newest snapshot has and how many of them each filter's scan plans.
"""

import json
import os
import sys

import pyarrow.parquet as pq
from pyiceberg.expressions import EqualTo, GreaterThan
from pyiceberg.table import StaticTable

metadata, out, columns = sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(","))
table = StaticTable.from_metadata(metadata)
snapshots = sorted(table.snapshots(), key=lambda s: s.sequence_number)
for i, snapshot in enumerate(snapshots):
    rows = table.scan(snapshot_id=snapshot.snapshot_id, selected_fields=columns).to_arrow()
    pq.write_table(rows, os.path.join(out, f"s{i}.parquet"))
by_id = table.scan(row_filter=GreaterThan("id", 5000), selected_fields=columns)
pq.write_table(by_id.to_arrow(), os.path.join(out, "filtered.parquet"))
by_kind = table.scan(row_filter=EqualTo("kind", "k/1"), selected_fields=columns)
pq.write_table(by_kind.to_arrow(), os.path.join(out, "partition.parquet"))
files = table.inspect.files()
print(
    json.dumps(
        {
            "snapshots": [s.snapshot_id for s in snapshots],
            "format_version": table.metadata.format_version,
            "spec": [[f.name, str(f.transform)] for f in table.spec().fields],
            "files": files.num_rows,
            "files_by_id": len(list(by_id.plan_files())),
            "files_by_kind": len(list(by_kind.plan_files())),
            "field_ids": [f.field_id for f in table.schema().fields],
        }
    )
)
