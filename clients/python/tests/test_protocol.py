"""The client against a small local HTTP server playing a deployment's answers.

The embedded engine never takes the presigned-result path (it cannot presign, and it
does not cap response sizes), so these tests serve what a deployment answers — a 413
from ``/result``, the ``/result/objects`` document of ``core/src/results.rs``
(``ResultObjects``: ``id``, ``format: "arrow-ipc-stream"``, ``expires_in_secs``,
``pieces: [{url, start, end}]``, each piece a complete LZ4-compressed Arrow IPC stream at
a byte range of an object) and the objects themselves — and check what the client sends.
The same path runs against the real local AWS stack in ``test_aws.py``. Retries, error
shapes, redirects and timeouts are checked here too, where the server's answers can be
chosen exactly.
"""

from __future__ import annotations

import json
import time
import unittest
from typing import Any, Dict, List

import pyarrow as pa

import lambdafusion
from lambdafusion import (
    EndpointUnreachable,
    Forbidden,
    LambdafusionError,
    NotFound,
    Overloaded,
    ProtocolError,
    QueryError,
    ServerError,
)

from .support import FakeServer, api_error, ipc_bytes, json_answer

TOO_LARGE = (
    "the result of query q1 is larger than the 2000 bytes one response can carry here; "
    "download it from GET /v1/queries/q1/result/objects (presigned URLs; `lambdafusion "
    "query` does this by itself), or add a LIMIT"
)


def status_doc(state: str = "succeeded", rows: int = 0, error: str = "") -> Dict[str, Any]:
    doc: Dict[str, Any] = {
        "id": "q1",
        "state": state,
        "kind": "query",
        "sql": "SELECT ...",
        "created_ms": 1,
        "elapsed_ms": 1,
        "tasks_done": 1,
        "tasks": 1,
        "stages": [],
        "estimated_cost_usd": 0.0,
    }
    if state == "succeeded":
        doc["result_rows"] = rows
    if error:
        doc["error"] = error
    return doc


def submitted(handler: Any) -> Any:
    return json_answer(
        202,
        {
            "id": "q1",
            "state": "running",
            "status_url": "/v1/queries/q1",
            "result_url": "/v1/queries/q1/result",
        },
    )


def ranged(data: bytes, honour_range: bool = True) -> Any:
    """A route serving ``data`` like S3: ``Range: bytes=a-b`` -> 206 with those bytes."""

    def route(handler: Any) -> Any:
        spec = handler.headers.get("Range", "")
        if honour_range and spec.startswith("bytes="):
            first, last = (int(x) for x in spec[len("bytes=") :].split("-"))
            return 206, {"Content-Type": "application/octet-stream"}, data[first : last + 1]
        return 200, {"Content-Type": "application/octet-stream"}, data

    return route


class PresignedResultTest(unittest.TestCase):
    def setUp(self) -> None:
        # The result: three pieces, two of them byte ranges of one object (as the
        # engine writes several slices of a task's output into one object).
        self.parts = [
            pa.table({"v": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]}),
            pa.table({"v": pa.array([4], pa.int64()), "s": ["d"]}),
            pa.table({"v": pa.array([5, 6], pa.int64()), "s": ["e", "f"]}),
        ]
        first, second, third = (ipc_bytes(t) for t in self.parts)
        self.object_a = b"HEADER" + first + second
        self.object_b = third
        self.store = FakeServer(
            {
                ("GET", "/bucket/a.arrows"): ranged(self.object_a),
                ("GET", "/bucket/b.arrows"): ranged(self.object_b, honour_range=False),
            }
        )
        signature = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=abc%2Fdef"
        self.pieces = [
            {
                "url": f"{self.store.url}/bucket/a.arrows{signature}",
                "start": 6,
                "end": 6 + len(first),
            },
            {
                "url": f"{self.store.url}/bucket/a.arrows{signature}",
                "start": 6 + len(first),
                "end": len(self.object_a),
            },
            {"url": f"{self.store.url}/bucket/b.arrows{signature}", "start": 0, "end": len(third)},
        ]
        self.rows = 6
        self.api = FakeServer(
            {
                ("POST", "/v1/queries"): submitted,
                ("GET", "/v1/queries/q1"): lambda h: json_answer(200, status_doc(rows=self.rows)),
                ("GET", "/v1/queries/q1/result"): lambda h: api_error(413, TOO_LARGE),
                ("GET", "/v1/queries/q1/result/objects"): lambda h: json_answer(
                    200,
                    {
                        "id": "q1",
                        "format": "arrow-ipc-stream",
                        "expires_in_secs": 900,
                        "pieces": self.pieces,
                    },
                ),
            }
        )

    def tearDown(self) -> None:
        self.api.stop()
        self.store.stop()

    def test_large_result_is_downloaded_from_presigned_urls_without_credentials(self) -> None:
        con = lambdafusion.connect(self.api.url, token="api-token")
        table = con.sql("SELECT big")
        self.assertEqual(table.to_pydict(), pa.concat_tables(self.parts).to_pydict())
        self.assertEqual(table.schema, self.parts[0].schema)
        # The API got the token; the object store got neither token nor signature headers,
        # only the presigned query string, and the byte ranges of the pieces.
        paths = [(m, p.split("?")[0]) for m, p, _ in self.api.requests]
        self.assertIn(("GET", "/v1/queries/q1/result"), paths)
        self.assertIn(("GET", "/v1/queries/q1/result/objects"), paths)
        for _, _, headers in self.api.requests:
            self.assertEqual(headers.get("Authorization"), "Bearer api-token")
        self.assertEqual(len(self.store.requests), 3)
        ranges = sorted((path, headers.get("Range")) for _, path, headers in self.store.requests)
        for method, path, headers in self.store.requests:
            self.assertEqual(method, "GET")
            lowered = {k.lower() for k in headers}
            self.assertNotIn("authorization", lowered)
            self.assertFalse(any(k.startswith("x-amz-") for k in lowered), headers)
            self.assertTrue(path.endswith("X-Amz-Signature=abc%2Fdef"), path)
        expected = sorted(
            (p["url"][len(self.store.url) :], f"bytes={p['start']}-{p['end'] - 1}")
            for p in self.pieces
        )
        self.assertEqual(ranges, expected)

    def test_a_piece_the_store_refuses_names_the_stores_message(self) -> None:
        expired = (
            b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
            b"<Message>Request has expired</Message></Error>"
        )
        self.store.routes[("GET", "/bucket/b.arrows")] = lambda h: (
            403,
            {"Content-Type": "application/xml"},
            expired,
        )
        con = lambdafusion.connect(self.api.url)
        with self.assertRaises(Forbidden) as caught:
            con.sql("SELECT big")
        self.assertIn("Request has expired", str(caught.exception))
        self.assertIn("query q1", str(caught.exception))

    def test_row_count_is_checked_against_the_status(self) -> None:
        self.rows = 7
        with self.assertRaises(ProtocolError) as caught:
            lambdafusion.connect(self.api.url).sql("SELECT big")
        self.assertIn("has 6 rows; its status says 7", str(caught.exception))

    def test_a_server_that_cannot_presign_answers_with_its_message(self) -> None:
        message = "this server cannot presign downloads; read the rows from /v1/queries/q1/result"
        self.api.routes[("GET", "/v1/queries/q1/result/objects")] = lambda h: api_error(
            400, message
        )
        with self.assertRaises(QueryError) as caught:
            lambdafusion.connect(self.api.url).sql("SELECT big")
        self.assertEqual(str(caught.exception), message)

    def test_inline_result_that_is_not_arrow_is_a_protocol_error(self) -> None:
        self.api.routes[("GET", "/v1/queries/q1/result")] = lambda h: (200, {}, b"not arrow")
        with self.assertRaises(ProtocolError) as caught:
            lambdafusion.connect(self.api.url).sql("SELECT 1")
        self.assertIn("not an Arrow IPC stream", str(caught.exception))


class RetryAndErrorShapeTest(unittest.TestCase):
    def setUp(self) -> None:
        self.answers: List[Any] = []
        self.api = FakeServer({("POST", "/v1/queries"): lambda h: self.answers.pop(0)(h)})
        self.pauses: List[float] = []

    def tearDown(self) -> None:
        self.api.stop()

    def connection(self, **kwargs: Any) -> lambdafusion.Connection:
        con = lambdafusion.connect(self.api.url, **kwargs)
        con._transport._sleep = self.pauses.append
        return con

    def busy(self, retry_after: str = "2") -> Any:
        message = "too many tasks are waiting for a function slot; try again shortly"
        status, headers, body = api_error(503, message)
        if retry_after:
            headers = {**headers, "Retry-After": retry_after}
        return lambda h: (status, headers, body)

    def test_503_with_retry_after_is_retried_then_succeeds(self) -> None:
        self.answers = [self.busy("2"), self.busy("1"), submitted]
        query = self.connection(max_retries=3).submit("SELECT 1")
        self.assertEqual(query.id, "q1")
        self.assertEqual(self.pauses, [2.0, 1.0])
        self.assertEqual(len(self.api.requests), 3)

    def test_retries_are_bounded(self) -> None:
        self.answers = [self.busy("2")] * 10
        with self.assertRaises(Overloaded) as caught:
            self.connection(max_retries=2).submit("SELECT 1")
        self.assertEqual(len(self.api.requests), 3)
        self.assertEqual(self.pauses, [2.0, 2.0])
        self.assertEqual(caught.exception.retries, 2)
        self.assertEqual(caught.exception.retry_after, 2.0)
        self.assertEqual(
            str(caught.exception),
            "too many tasks are waiting for a function slot; try again shortly",
        )

    def test_long_retry_after_is_capped_and_http_dates_are_understood(self) -> None:
        later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 5))
        self.answers = [self.busy("3600"), self.busy(later), submitted]
        self.connection(max_retries=3).submit("SELECT 1")
        self.assertEqual(self.pauses[0], 30.0)
        self.assertTrue(3.0 <= self.pauses[1] <= 5.0, self.pauses)

    def test_503_without_retry_after_is_not_retried(self) -> None:
        # An API Gateway / function URL integration timeout: the submission may have
        # gone through, so it is not sent twice.
        self.answers = [
            lambda h: json_answer(503, {"message": "Service Unavailable"}),
            submitted,
        ]
        with self.assertRaises(Overloaded) as caught:
            self.connection().submit("SELECT 1")
        self.assertEqual(str(caught.exception), "Service Unavailable")
        self.assertIsNone(caught.exception.retry_after)
        self.assertEqual(len(self.api.requests), 1)

    def test_aws_and_plain_error_bodies_keep_their_text(self) -> None:
        forbidden = (
            "Forbidden. For troubleshooting Function URL authorization issues, see: "
            "https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html"
        )
        cases = [
            (lambda h: json_answer(403, {"Message": forbidden}), Forbidden, forbidden),
            (lambda h: (502, {}, b"Internal Server Error"), ServerError, "Internal Server Error"),
            (lambda h: (500, {}, b""), ServerError, "HTTP 500"),
            (
                lambda h: api_error(404, "no such endpoint; see /v1/queries"),
                NotFound,
                "no such endpoint; see /v1/queries",
            ),
            (lambda h: api_error(418, "odd"), LambdafusionError, "odd"),
        ]
        for answer, cls, message in cases:
            self.answers = [answer]
            with self.assertRaises(cls) as caught:
                self.connection().submit("SELECT 1")
            self.assertEqual(str(caught.exception), message)

    def test_redirects_are_not_followed_with_credentials(self) -> None:
        elsewhere = FakeServer({("POST", "/v1/queries"): submitted})
        try:
            self.answers = [lambda h: (307, {"Location": elsewhere.url + "/v1/queries"}, b"")]
            with self.assertRaises(LambdafusionError) as caught:
                self.connection(token="secret").submit("SELECT 1")
            self.assertEqual(caught.exception.status, 307)
            self.assertEqual(elsewhere.requests, [])
        finally:
            elsewhere.stop()

    def test_a_silent_server_times_out_naming_the_endpoint(self) -> None:
        def slow(handler: Any) -> Any:
            time.sleep(1.5)
            return submitted(handler)

        self.answers = [slow]
        started = time.monotonic()
        with self.assertRaises(EndpointUnreachable) as caught:
            self.connection(timeout=0.3).submit("SELECT 1")
        self.assertLess(time.monotonic() - started, 1.2)
        self.assertIn(f"no answer from {self.api.url} within 0.3 s", str(caught.exception))

    def test_submission_body(self) -> None:
        self.answers = [submitted]
        con = self.connection()
        captured: List[bytes] = []
        original = self.answers[0]

        def capture(handler: Any) -> Any:
            captured.append(handler.body)
            return original(handler)

        self.answers = [capture]
        con.submit("SELECT 1", max_seconds=5)
        self.assertEqual(json.loads(captured[0]), {"sql": "SELECT 1", "max_seconds": 5.0})
        method, path, headers = self.api.requests[0]
        self.assertEqual(headers.get("Content-Type"), "application/json")


if __name__ == "__main__":
    unittest.main()
