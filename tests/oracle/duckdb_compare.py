"""Compares lambdafusion's answers with DuckDB's, on the same Parquet files.

Usage: duckdb_compare.py DATA_DIR ANSWERS_DIR

DATA_DIR holds one directory of Parquet files per table (`DATA_DIR/<table>/*.parquet`),
registered in DuckDB as views of those names. ANSWERS_DIR holds, per case NAME,
`NAME.sql` (the query), `NAME.parquet` (lambdafusion's answer) and, when the query's
row order is part of its answer, `NAME.ordered`. Each query runs in DuckDB; its rows are
compared with lambdafusion's, in order or as a multiset: equal values, numbers within
a relative 1e-6 (DataFusion keeps decimals where DuckDB computes some averages in
double precision). Prints one line per case and exits 1 on a disagreement not listed
in KNOWN below, or on a KNOWN one that no longer happens.

Run by `tests/tests/end_to_end/duckdb_oracle.rs` (part of the test suite).
"""

import datetime
import decimal
import math
import pathlib
import sys

import duckdb

# Cases where DuckDB and lambdafusion (and DataFusion) disagree, each with why.
KNOWN = {
    "nulls_default_order": "default NULL order differs: DataFusion (like PostgreSQL) puts "
    "NULLs first in a DESC order, DuckDB last in both directions; write NULLS FIRST/LAST",
}

TOLERANCE = 1e-6


def normal(value):
    """A value as compared: numbers as floats, times as ISO text."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float, decimal.Decimal)):
        return float(value)
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    return value


def sort_key(row):
    """Sorts rows whose floats may differ in their last digits alike."""
    key = []
    for v in row:
        if v is None:
            key.append((0, ""))
        elif isinstance(v, float):
            key.append((1, f"{v:.6g}"))
        else:
            key.append((2, str(v)))
    return key


def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))
    return a == b


def compare(ours, theirs, ordered):
    """None when they agree, else what differs."""
    if len(ours) != len(theirs):
        return f"{len(ours)} rows against DuckDB's {len(theirs)}"
    if not ordered:
        ours = sorted(ours, key=sort_key)
        theirs = sorted(theirs, key=sort_key)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if len(a) != len(b):
            return f"row {i}: {len(a)} columns against DuckDB's {len(b)}"
        if not all(same(x, y) for x, y in zip(a, b)):
            return f"row {i}: {a} against DuckDB's {b}"
    return None


def main():
    data, answers = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    con = duckdb.connect()
    for table in sorted(p for p in data.iterdir() if p.is_dir()):
        con.execute(
            f"CREATE VIEW {table.name} AS SELECT * FROM read_parquet('{table}/*.parquet')"
        )
    unexpected = []
    cases = sorted(answers.glob("*.sql"), key=lambda p: p.stem)
    if not cases:
        print(f"no cases in {answers}")
        return 1
    for sql_file in cases:
        name = sql_file.stem
        sql = sql_file.read_text()
        ordered = (answers / f"{name}.ordered").exists()
        ours = [
            tuple(normal(v) for v in row)
            for row in con.execute(
                "SELECT * FROM read_parquet(?)", [str(answers / f"{name}.parquet")]
            ).fetchall()
        ]
        try:
            theirs = [tuple(normal(v) for v in row) for row in con.execute(sql).fetchall()]
            diff = compare(ours, theirs, ordered)
        except duckdb.Error as e:
            diff = f"DuckDB cannot run it: {e}"
        if not ours and diff is None and not name.startswith("empty_"):
            # Only a case named empty_* is meant to have no rows.
            diff = "both answers are empty: the case proves nothing"
        if diff is None and name in KNOWN:
            print(f"{name:<24} agree, but listed in KNOWN: remove it")
            unexpected.append(name)
        elif diff is None:
            print(f"{name:<24} agree ({len(ours)} rows{', in order' if ordered else ''})")
        elif name in KNOWN:
            print(f"{name:<24} known: {KNOWN[name]} ({diff})")
        else:
            print(f"{name:<24} DISAGREE: {diff}")
            unexpected.append(name)
    print(f"{len(cases)} cases, DuckDB {duckdb.__version__}: "
          f"{len(unexpected)} unexpected")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
