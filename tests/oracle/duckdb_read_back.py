"""Reads what lambdafusion's COPY wrote, with DuckDB, and compares it with DuckDB's own
answer on the tables the writes were made from.

Usage: duckdb_read_back.py DATA_DIR OUT_DIR

DATA_DIR holds one directory of Parquet files per TPC-H table; OUT_DIR what
`tests/tests/end_to_end/duckdb_oracle.rs` had the engine write there: `li/` (Parquet,
partitioned by l_shipmode), `orders_csv/` (CSV) and `li_json/` (newline-delimited
JSON). Each check compares a signature of the written rows (counts, sums, distinct keys,
per partition) with the same signature of the source; exits 1 on any difference.
"""

import math
import sys

import duckdb


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-6)
    return str(a) == str(b)


def main():
    data, out = sys.argv[1], sys.argv[2]
    con = duckdb.connect()
    for table in ["lineitem", "orders"]:
        con.execute(
            f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{data}/{table}/*.parquet')"
        )
    checks = [
        (
            "Parquet partitioned by l_shipmode",
            "SELECT l_shipmode, count(*), sum(l_quantity), sum(l_extendedprice), "
            "count(DISTINCT (l_orderkey, l_linenumber)) "
            f"FROM read_parquet('{out}/li/*/*.parquet', hive_partitioning = true) "
            "GROUP BY 1 ORDER BY 1",
            "SELECT l_shipmode, count(*), sum(l_quantity), sum(l_extendedprice), "
            "count(DISTINCT (l_orderkey, l_linenumber)) FROM lineitem GROUP BY 1 ORDER BY 1",
        ),
        (
            "CSV",
            "SELECT count(*), sum(CAST(o_totalprice AS DOUBLE)), count(DISTINCT o_orderkey), "
            "CAST(min(o_orderdate) AS VARCHAR), CAST(max(o_orderdate) AS VARCHAR) "
            f"FROM read_csv('{out}/orders_csv/*.csv', header = true)",
            "SELECT count(*), sum(CAST(o_totalprice AS DOUBLE)), count(DISTINCT o_orderkey), "
            "CAST(min(o_orderdate) AS VARCHAR), CAST(max(o_orderdate) AS VARCHAR) FROM orders",
        ),
        (
            "JSON",
            "SELECT count(*), sum(CAST(l_extendedprice AS DOUBLE)), count(DISTINCT l_comment), "
            "count(DISTINCT l_orderkey) "
            f"FROM read_json('{out}/li_json/*.json', format = 'newline_delimited')",
            "SELECT count(*), sum(CAST(l_extendedprice AS DOUBLE)), count(DISTINCT l_comment), "
            "count(DISTINCT l_orderkey) FROM lineitem WHERE l_linenumber = 1",
        ),
    ]
    failed = 0
    for name, written, source in checks:
        got = con.execute(written).fetchall()
        want = con.execute(source).fetchall()
        ok = len(got) == len(want) and all(
            len(g) == len(w) and all(same(a, b) for a, b in zip(g, w))
            for g, w in zip(got, want)
        )
        print(f"{'ok' if ok else 'DIFFERENT'}: {name}: {len(got)} rows")
        if not ok:
            failed += 1
            print(f"  written: {got}\n  source:  {want}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
