"""TPC-H as Delta Lake tables, written by the `deltalake` package from the Parquet files
`lambdafusion tpch` generates: `tpch_as_delta.py <parquet dir> <out dir>`. Orders and
lineitem are partitioned (by o_orderstatus and l_returnflag), every table is written in
two commits (an append of each half), so a scan reads files of several commits and
partitions.
"""

import os
import sys

import pyarrow.dataset as ds
from deltalake import write_deltalake

PARTITIONS = {"orders": ["o_orderstatus"], "lineitem": ["l_returnflag"]}


def main(source, out):
    for table in sorted(os.listdir(source)):
        path = os.path.join(source, table)
        if not os.path.isdir(path):
            continue
        rows = ds.dataset(path, format="parquet").to_table()
        half = rows.num_rows // 2
        target = os.path.join(out, table)
        by = PARTITIONS.get(table)
        write_deltalake(target, rows.slice(0, half), partition_by=by)
        write_deltalake(target, rows.slice(half), mode="append", partition_by=by)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
