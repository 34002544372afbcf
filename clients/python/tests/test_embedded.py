"""The client against a real ``lambdafusion serve`` (the embedded engine)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import unittest
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

import pyarrow as pa

import lambdafusion
from lambdafusion import (
    EndpointUnreachable,
    NotFound,
    Overloaded,
    QueryCancelled,
    QueryError,
    Unauthorized,
)

from .support import Server, free_port, optional, wait_until

#: Runs for hours (10^11 rows, one task) and stops within one input batch when cancelled.
#: (Not a CROSS JOIN: the engine checks for a stop at every batch a scan hands up, and a
#: cross join computes for minutes between two batches of its input.)
SLOW_SQL = "SELECT sum(value % 7) AS s FROM range(0, 100000000000)"

server: Server


def setUpModule() -> None:
    global server
    server = Server()


def tearDownModule() -> None:
    server.stop()


def raw(method: str, url: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One API request without the client: the server's own JSON answer (errors too)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as answer:
        return json.loads(answer.read())


class EmbeddedTest(unittest.TestCase):
    con: lambdafusion.Connection

    @classmethod
    def setUpClass(cls) -> None:
        os.environ.pop("LAMBDAFUSION_TOKEN", None)
        cls.con = lambdafusion.connect(server.url, timeout=15)
        created = cls.con.sql(
            "CREATE EXTERNAL TABLE IF NOT EXISTS cities STORED AS CSV LOCATION 'cities.csv' "
            "OPTIONS ('format.has_header' 'true')"
        )
        assert created.column_names == ["result"], created

    def test_aggregate_over_csv_is_a_pyarrow_table_with_exact_types(self) -> None:
        table = self.con.sql(
            "SELECT city, sum(pop) AS total, avg(area) AS mean_area, count(*) AS n "
            "FROM cities GROUP BY city ORDER BY city"
        )
        self.assertIsInstance(table, pa.Table)
        self.assertEqual(
            table.schema,
            pa.schema(
                [
                    pa.field("city", pa.string()),
                    pa.field("total", pa.int64()),
                    pa.field("mean_area", pa.float64()),
                    pa.field("n", pa.int64(), nullable=False),
                ]
            ),
        )
        self.assertEqual(
            table.to_pydict(),
            {
                "city": ["Bergen", "Oslo", "Tromso"],
                "total": [291000, 709001, 77000],
                "mean_area": [465.3, 227.75, 2521.0],
                "n": [1, 2, 1],
            },
        )

    def test_literal_and_empty_results(self) -> None:
        table = self.con.sql("SELECT 1 AS x")
        self.assertEqual(table.schema, pa.schema([pa.field("x", pa.int64(), nullable=False)]))
        self.assertEqual(table.to_pydict(), {"x": [1]})
        empty = self.con.sql("SELECT city, pop FROM cities WHERE pop < 0")
        self.assertEqual(empty.num_rows, 0)
        self.assertEqual(empty.column_names, ["city", "pop"])

    def test_more_rows_than_one_batch(self) -> None:
        table = self.con.sql(
            "SELECT value AS v, 'row ' || CAST(value AS VARCHAR) AS label FROM range(0, 20000)"
        )
        self.assertEqual(table.num_rows, 20000)
        self.assertEqual(sorted(table.column("v").to_pylist()), list(range(20000)))
        self.assertEqual(table.column("label").type, pa.string_view())

    @unittest.skipIf(optional("pandas") is None, "pandas is not installed")
    def test_to_pandas(self) -> None:
        df = self.con.sql("SELECT city, pop FROM cities ORDER BY pop DESC").to_pandas()
        self.assertEqual(list(df.columns), ["city", "pop"])
        self.assertEqual(list(df["city"]), ["Oslo", "Bergen", "Tromso", "Oslo"])
        self.assertEqual([int(p) for p in df["pop"]], [709000, 291000, 77000, 1])
        self.assertEqual(str(df["pop"].dtype), "int64")

    def test_tables_lists_the_catalog(self) -> None:
        tables = {t["name"]: t for t in self.con.tables()}
        self.assertIn("cities", tables)
        self.assertEqual(
            tables["cities"]["columns"],
            [
                {"name": "city", "type": "Utf8"},
                {"name": "pop", "type": "Int64"},
                {"name": "area", "type": "Float64"},
            ],
        )
        self.assertEqual(self.con.health(), {"status": "ok"})

    def test_sql_error_is_a_query_error_with_the_servers_message(self) -> None:
        sql = "SELECT nope FROM cities"
        expected = raw("POST", server.url + "/v1/queries", {"sql": sql})["error"]["message"]
        with self.assertRaises(QueryError) as caught:
            self.con.sql(sql)
        self.assertEqual(str(caught.exception), expected)
        self.assertEqual(caught.exception.message, expected)
        self.assertEqual(caught.exception.status, 400)
        self.assertIn("No field named nope", expected)
        with self.assertRaises(QueryError) as caught:
            self.con.sql("SELEC 1")
        self.assertEqual(caught.exception.status, 400)

    def test_failure_while_running_is_a_query_error_with_the_jobs_error(self) -> None:
        query = self.con.submit("SELECT CAST(1 AS INT) / CAST(0 AS INT) AS x")
        with self.assertRaises(QueryError) as caught:
            query.result()
        status = raw("GET", f"{server.url}/v1/queries/{query.id}")
        self.assertEqual(status["state"], "failed")
        self.assertEqual(str(caught.exception), status["error"])
        self.assertIn("Divide by zero", str(caught.exception))
        self.assertEqual(caught.exception.state, "failed")
        self.assertEqual(caught.exception.query_id, query.id)
        self.assertIsNone(caught.exception.status)
        self.assertNotIsInstance(caught.exception, QueryCancelled)

    def test_result_of_a_failed_query_is_a_409_query_error(self) -> None:
        query = self.con.submit("SELECT CAST(1 AS INT) / CAST(0 AS INT) AS x")
        query.wait()
        with self.assertRaises(QueryError) as caught:
            query._fetch()
        self.assertEqual(caught.exception.status, 409)
        expected = raw("GET", f"{server.url}/v1/queries/{query.id}/result?format=arrow")
        self.assertEqual(str(caught.exception), expected["error"]["message"])

    def test_unknown_query_id_is_not_found(self) -> None:
        unknown = "0123456789abcdef0123456789abcdef"
        cases = (
            (unknown, f"query {unknown} not found"),
            ("no-such-query", "query not found: query ids are 32 hexadecimal digits"),
        )
        for query_id, message in cases:
            query = self.con.query(query_id)
            for call in (query.status, query.cancel, query._fetch):
                with self.assertRaises(NotFound) as caught:
                    call()
                self.assertEqual(str(caught.exception), message)
                self.assertEqual(caught.exception.status, 404)

    def test_cancel_a_long_running_query(self) -> None:
        query = self.con.submit(SLOW_SQL)
        self.assertEqual(query.status()["state"], "running")
        time.sleep(0.3)
        self.assertEqual(query.cancel(), "cancelled")
        status = query.status()
        self.assertEqual(status["state"], "cancelled")
        self.assertEqual(status["error"], "cancelled by request")
        self.assertIn("finished_ms", status)
        with self.assertRaises(QueryCancelled) as caught:
            query.result()
        self.assertEqual(str(caught.exception), "cancelled by request")
        self.assertEqual(caught.exception.state, "cancelled")
        # The work stopped too: the server's process is (nearly) idle a moment later.
        if server.cpu_seconds() is not None:
            time.sleep(0.5)
            before = server.cpu_seconds()
            time.sleep(1.0)
            self.assertLess(server.cpu_seconds() - before, 0.5, "the cancelled query still runs")
        # Cancelling again is harmless and reports the final state.
        self.assertEqual(query.cancel(), "cancelled")

    def test_time_limit_fails_the_query(self) -> None:
        started = time.monotonic()
        with self.assertRaises(QueryError) as caught:
            self.con.sql(SLOW_SQL, max_seconds=1)
        self.assertLess(time.monotonic() - started, 15)
        self.assertEqual(caught.exception.state, "failed")
        self.assertIn("did not finish within its time limit of 1 s", str(caught.exception))

    def test_keyboard_interrupt_cancels_the_running_query(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.skipTest("SIGINT is delivered to the main thread only")
        submitted: List[lambdafusion.Query] = []
        con = lambdafusion.connect(server.url, timeout=15)
        submit = con.submit

        # Ctrl-C 0.5 s after the submission, while sql() waits for the query to end.
        timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))

        def recording_submit(sql: str, **kwargs: Any) -> lambdafusion.Query:
            query = submit(sql, **kwargs)
            submitted.append(query)
            timer.start()
            return query

        con.submit = recording_submit  # type: ignore[method-assign]
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            started = time.monotonic()
            with self.assertRaises(KeyboardInterrupt):
                con.sql(SLOW_SQL)
            self.assertLess(time.monotonic() - started, 10)
        finally:
            timer.cancel()
            signal.signal(signal.SIGINT, previous)
        self.assertEqual(len(submitted), 1)
        # sql() cancelled it before re-raising: already cancelled, no wait needed.
        status = raw("GET", f"{server.url}/v1/queries/{submitted[0].id}")
        self.assertEqual(status["state"], "cancelled")
        self.assertEqual(status["error"], "cancelled by request")

    def test_progress_callback_sees_the_final_status(self) -> None:
        seen: List[Dict[str, Any]] = []
        self.con.sql("SELECT count(*) AS n FROM cities", on_progress=seen.append)
        self.assertTrue(seen)
        self.assertEqual(seen[-1]["state"], "succeeded")
        self.assertEqual(seen[-1]["result_rows"], 1)

    def test_progress_callback_sees_a_query_that_had_already_ended(self) -> None:
        # Whether the submission's answer already says "succeeded" is a race (a fast
        # query ends before the POST answers); a query known to have ended is the same.
        query = self.con.submit("SELECT count(*) AS n FROM cities")
        query.wait()
        seen: List[Dict[str, Any]] = []
        query.result(on_progress=seen.append)
        self.assertEqual([s["state"] for s in seen], ["succeeded"])


class ConnectTest(unittest.TestCase):
    def test_unreachable_endpoint_is_named(self) -> None:
        endpoint = f"http://127.0.0.1:{free_port()}"
        con = lambdafusion.connect(endpoint, timeout=2)
        with self.assertRaises(EndpointUnreachable) as caught:
            con.sql("SELECT 1")
        self.assertIn(f"cannot reach {endpoint}", str(caught.exception))
        self.assertIn("Connection refused", str(caught.exception))

    def test_bad_endpoints_are_refused(self) -> None:
        for bad in ("127.0.0.1:8080", "ftp://x", "http://h/?q=1"):
            with self.assertRaises(ValueError):
                lambdafusion.connect(bad)
        with self.assertRaises(ValueError):
            lambdafusion.connect("http://127.0.0.1:1", token="t", aws=True, region="us-east-1")


class TokenTest(unittest.TestCase):
    """``lambdafusion serve --token``: 401 without the token, works with it."""

    token_server: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.token_server = Server(token="s3cret-token-0123456")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.token_server.stop()

    def test_without_or_with_a_wrong_token_is_unauthorized(self) -> None:
        os.environ.pop("LAMBDAFUSION_TOKEN", None)
        expected = raw("GET", self.token_server.url + "/v1/tables")["error"]["message"]
        for token in (None, "wrong"):
            con = lambdafusion.connect(self.token_server.url, token=token)
            with self.assertRaises(Unauthorized) as caught:
                con.sql("SELECT 1")
            self.assertEqual(caught.exception.status, 401)
            self.assertEqual(str(caught.exception), expected)
        self.assertIn("missing or wrong bearer token", expected)

    def test_with_the_token_it_works(self) -> None:
        con = lambdafusion.connect(self.token_server.url, token="s3cret-token-0123456")
        self.assertEqual(con.sql("SELECT 41 + 1 AS answer").to_pydict(), {"answer": [42]})

    def test_token_from_the_environment(self) -> None:
        os.environ["LAMBDAFUSION_TOKEN"] = "s3cret-token-0123456"
        try:
            con = lambdafusion.connect(self.token_server.url)
        finally:
            del os.environ["LAMBDAFUSION_TOKEN"]
        self.assertEqual(con.sql("SELECT 2 AS two").to_pydict(), {"two": [2]})


class OverloadTest(unittest.TestCase):
    """A saturated engine (one slot, queue of two) answers 503 with ``Retry-After``."""

    busy: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.busy = Server("--slots", "1", "--max-queued-tasks", "2")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.busy.stop()

    def test_overloaded_then_retried_after_retry_after(self) -> None:
        blockers = lambdafusion.connect(self.busy.url, max_retries=5, timeout=15)
        running = blockers.submit(SLOW_SQL)  # takes the only slot
        time.sleep(0.5)
        waiting = blockers.submit(SLOW_SQL)  # waits for it: the queue is half full
        con = lambdafusion.connect(self.busy.url, max_retries=0, timeout=15)
        try:
            expected = raw("POST", self.busy.url + "/v1/queries", {"sql": "SELECT 1"})
            with self.assertRaises(Overloaded) as caught:
                con.sql("SELECT 1")
            self.assertEqual(caught.exception.status, 503)
            self.assertEqual(str(caught.exception), expected["error"]["message"])
            self.assertEqual(caught.exception.retry_after, 2.0)
            self.assertEqual(caught.exception.retries, 0)

            # With retries: the blockers are cancelled while the client waits out the
            # Retry-After, so its next attempt goes through.
            patient = lambdafusion.connect(self.busy.url, max_retries=3, timeout=15)
            pauses: List[float] = []

            def sleep(seconds: float) -> None:
                pauses.append(seconds)
                time.sleep(seconds)

            patient._transport._sleep = sleep
            canceller = threading.Timer(0.3, lambda: (running.cancel(), waiting.cancel()))
            canceller.start()
            table = patient.sql("SELECT 7 AS seven")
            canceller.join()
            self.assertEqual(table.to_pydict(), {"seven": [7]})
            self.assertGreaterEqual(len(pauses), 1)
            self.assertTrue(all(p == 2.0 for p in pauses), pauses)
        finally:
            for query in (running, waiting):
                try:
                    query.cancel()
                except lambdafusion.LambdafusionError:
                    pass
        wait_until(
            lambda: waiting.status()["state"] == "cancelled", 10, "the waiting query's cancel"
        )


if __name__ == "__main__":
    unittest.main()
