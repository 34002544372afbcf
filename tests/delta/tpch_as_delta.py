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
TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


def main(source, out):
    for table in TABLES:
        path = os.path.join(source, table)
        rows = ds.dataset(path, format="parquet").to_table()
        half = rows.num_rows // 2
        target = os.path.join(out, table)
        if os.path.isdir(os.path.join(target, "_delta_log")):
            print(f"{target}: already a Delta table, left as it is")
            continue
        by = PARTITIONS.get(table)
        write_deltalake(target, rows.slice(0, half), partition_by=by)
        write_deltalake(target, rows.slice(half), mode="append", partition_by=by)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
