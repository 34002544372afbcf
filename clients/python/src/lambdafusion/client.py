"""Connections and queries: submit SQL, follow it, fetch its result as a ``pyarrow.Table``.

The API (``docs/api.md``; ``api/src/lib.rs``) is asynchronous:

1. ``POST /v1/queries {"sql", "max_seconds"}`` answers ``202 {"id", "state", ...}``;
2. ``GET /v1/queries/{id}?wait=S`` answers the status once the query ends or after
   ``S`` seconds (at most 20: API Gateway cuts requests at 30 s), so the client loops;
3. ``GET /v1/queries/{id}/result?format=arrow`` answers the rows as an Arrow IPC stream;
   where one response cannot carry them (413 on AWS, past 4 MiB by default) the client
   asks ``GET /v1/queries/{id}/result/objects`` for presigned URLs and byte ranges of
   the result's Arrow IPC pieces and downloads those, without credentials;
4. ``DELETE /v1/queries/{id}`` cancels.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import quote, urlsplit

import pyarrow as pa
import pyarrow.ipc

from . import _http
from .errors import (
    LambdafusionError,
    ProtocolError,
    QueryCancelled,
    QueryError,
)
from .sigv4 import SigV4Signer, aws_endpoint_service

__all__ = ["connect", "Connection", "Query", "MAX_WAIT_SECONDS", "TERMINAL_STATES"]

#: Longest ``?wait=`` the API accepts, in seconds.
MAX_WAIT_SECONDS = 20.0

#: Query states that do not change any more.
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})

#: Default endpoint: ``lambdafusion serve`` on this machine.
DEFAULT_ENDPOINT = "http://127.0.0.1:8080"

#: Presigned pieces downloaded at once.
DOWNLOAD_CONCURRENCY = 4


def _read_ipc(data: bytes, what: str, query_id: str) -> pa.Table:
    """An Arrow IPC stream as a table, or :class:`ProtocolError` naming ``what``."""
    try:
        return pyarrow.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise ProtocolError(
            f"{what} of query {query_id} is not an Arrow IPC stream: {e}", query_id=query_id
        ) from e


class Query:
    """A submitted query. Get one from :meth:`Connection.submit` or :meth:`Connection.query`.

    Attributes:
        id: the query id.
        connection: the connection it was submitted through.
    """

    def __init__(self, connection: "Connection", query_id: str) -> None:
        self.connection = connection
        self.id = query_id
        self._last: Optional[Dict[str, Any]] = None

    def __repr__(self) -> str:
        state = self._last.get("state") if self._last else "?"
        return f"<lambdafusion.Query {self.id} {state}>"

    @property
    def _path(self) -> str:
        return f"/v1/queries/{quote(self.id, safe='')}"

    def status(self, wait: float = 0) -> Dict[str, Any]:
        """The query's status (``GET /v1/queries/{id}``): ``state`` (``running``,
        ``succeeded``, ``failed``, ``cancelled``), ``error``, per-stage progress, timings,
        ``result_rows``, ``estimated_cost_usd``. Waits up to ``wait`` seconds (at most
        :data:`MAX_WAIT_SECONDS`) for the query to end before answering.

        Raises:
            NotFound: no such query (or another caller's).
        """
        wait = max(0.0, min(float(wait), MAX_WAIT_SECONDS))
        transport = self.connection._transport
        response = transport.request(
            "GET",
            self._path,
            query={"wait": f"{wait:g}"},
            timeout=transport.timeout + wait,
            query_id=self.id,
        )
        status = _http.check_type(response.json(), dict, "the query status")
        self._last = status
        return status

    def wait(
        self,
        timeout: Optional[float] = None,
        on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> Dict[str, Any]:
        """Waits for the query to end and returns its final status; after ``timeout``
        seconds (if given) returns the status as it is, possibly still ``running``.
        ``on_progress`` is called with every status received."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is None:
                wait = MAX_WAIT_SECONDS
            else:
                wait = max(0.0, min(MAX_WAIT_SECONDS, deadline - time.monotonic()))
            status = self.status(wait=wait)
            if on_progress is not None:
                on_progress(status)
            if status.get("state") in TERMINAL_STATES:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                return status

    def cancel(self) -> str:
        """Cancels the query (``DELETE /v1/queries/{id}``): no more tasks start and
        running ones stop at their next batch. Returns the state the server reports
        (``cancelled``, or the final state of a query that had already ended)."""
        response = self.connection._transport.request("DELETE", self._path, query_id=self.id)
        answer = _http.check_type(response.json(), dict, "the cancel answer")
        return str(answer.get("state", ""))

    def result(self, on_progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> pa.Table:
        """Waits for the query to end and returns its rows as a ``pyarrow.Table``.

        Raises:
            QueryError: the query failed (the message is the server's error).
            QueryCancelled: the query was cancelled.
        """
        status = self._last
        if status is None or status.get("state") not in TERMINAL_STATES:
            status = self.wait(on_progress=on_progress)
        elif on_progress is not None:
            # Already ended when submitted (or last asked): the callback still sees it.
            on_progress(status)
        state = status.get("state")
        if state != "succeeded":
            message = status.get("error") or f"query {self.id} {state}"
            cls = QueryCancelled if state == "cancelled" else QueryError
            raise cls(str(message), query_id=self.id, state=state)
        table = self._fetch()
        rows = status.get("result_rows")
        if isinstance(rows, int) and rows != table.num_rows:
            raise ProtocolError(
                f"the result of query {self.id} has {table.num_rows} rows; its status says {rows}",
                query_id=self.id,
            )
        return table

    def _fetch(self) -> pa.Table:
        """The rows of the finished query: inline, or through presigned URLs when the
        server answers 413 (too large for one response)."""
        transport = self.connection._transport
        response = transport.request(
            "GET",
            self._path + "/result",
            query={"format": "arrow"},
            query_id=self.id,
            ok=(413,),
        )
        if response.status == 413:
            return self._download()
        return _read_ipc(response.body, "the result", self.id)

    def result_objects(self, expires: Optional[int] = None) -> Dict[str, Any]:
        """The presigned downloads of the result (``GET /v1/queries/{id}/result/objects``):
        ``{"id", "format": "arrow-ipc-stream", "expires_in_secs", "pieces": [{"url",
        "start", "end"}]}``. Only deployments that can presign (AWS) answer it; the
        embedded engine answers 400 (:class:`QueryError`)."""
        response = self.connection._transport.request(
            "GET",
            self._path + "/result/objects",
            query={"expires": expires},
            query_id=self.id,
        )
        return _http.check_type(response.json(), dict, "the result objects")

    def _download(self) -> pa.Table:
        objects = self.result_objects()
        if objects.get("format") != "arrow-ipc-stream":
            raise ProtocolError(
                f"the result objects of query {self.id} are {objects.get('format')!r}; "
                "this client reads 'arrow-ipc-stream'",
                query_id=self.id,
            )
        pieces = _http.check_type(objects.get("pieces"), list, "the result pieces")
        if not pieces:
            raise ProtocolError(
                f"query {self.id}: the server refused the inline result as too large "
                "but lists no result pieces",
                query_id=self.id,
            )
        for piece in pieces:
            if not (
                isinstance(piece, dict)
                and isinstance(piece.get("url"), str)
                and isinstance(piece.get("start"), int)
                and isinstance(piece.get("end"), int)
            ):
                raise ProtocolError(f"unexpected result piece {piece!r}", query_id=self.id)
        timeout = self.connection._transport.timeout

        def get(index: int) -> pa.Table:
            piece = pieces[index]
            data = _http.fetch_presigned(
                piece["url"], piece["start"], piece["end"], timeout=timeout, query_id=self.id
            )
            return _read_ipc(data, f"result piece {index}", self.id)

        with ThreadPoolExecutor(max_workers=min(DOWNLOAD_CONCURRENCY, len(pieces))) as pool:
            tables = list(pool.map(get, range(len(pieces))))
        schema = tables[0].schema
        for index, table in enumerate(tables[1:], start=1):
            if not table.schema.equals(schema):
                raise ProtocolError(
                    f"result piece {index} of query {self.id} has schema {table.schema}, "
                    f"piece 0 has {schema}",
                    query_id=self.id,
                )
        return pa.concat_tables(tables)


class Connection:
    """A lambdafusion endpoint. Create one with :func:`connect`.

    Attributes:
        endpoint: the base URL requests go to.
        signer: the SigV4 signer, when requests are signed.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        token: Optional[str] = None,
        signer: Optional[SigV4Signer] = None,
        timeout: float = 30.0,
        max_retries: int = 3,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.signer = signer
        self._transport = _http.Transport(
            self.endpoint,
            token=token,
            signer=signer.headers if signer is not None else None,
            timeout=timeout,
            max_retries=max_retries,
        )

    def __repr__(self) -> str:
        how = "sigv4" if self.signer else ("token" if self._transport.token else "no auth")
        return f"<lambdafusion.Connection {self.endpoint} ({how})>"

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (every request opens its own connection); for ``with``."""

    def submit(self, sql: str, *, max_seconds: Optional[float] = None) -> Query:
        """Submits one SQL statement and returns at once with its :class:`Query`.

        Args:
            sql: the statement.
            max_seconds: the query's time limit (at most the deployment's); past it the
                query fails and its tasks stop.

        Raises:
            QueryError: the SQL is refused (syntax, unknown table or column, ...).
            Overloaded: the engine stayed saturated through the retries.
        """
        body: Dict[str, Any] = {"sql": sql}
        if max_seconds is not None:
            body["max_seconds"] = float(max_seconds)
        response = self._transport.request("POST", "/v1/queries", json_body=body)
        answer = _http.check_type(response.json(), dict, "the submission answer")
        query_id = _http.check_type(answer.get("id"), str, "the query id")
        query = Query(self, query_id)
        if answer.get("state") in TERMINAL_STATES:
            # Statements (DDL, SHOW TABLES, EXPLAIN) end before the answer; fetch the
            # full status (error, result_rows) once rather than polling.
            query.status()
        return query

    def query(self, query_id: str) -> Query:
        """The :class:`Query` with id ``query_id`` (no request is made)."""
        return Query(self, query_id)

    def sql(
        self,
        sql: str,
        *,
        max_seconds: Optional[float] = None,
        on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> pa.Table:
        """Runs one SQL statement and returns its rows as a ``pyarrow.Table``
        (``.to_pandas()`` gives a DataFrame where pandas is installed).

        A ``KeyboardInterrupt`` (Ctrl-C) while it waits cancels the query on the server
        before it is re-raised.

        Raises:
            QueryError: the SQL was refused, or the query failed (server's message).
            QueryCancelled: the query was cancelled.
        """
        query = self.submit(sql, max_seconds=max_seconds)
        try:
            return query.result(on_progress=on_progress)
        except KeyboardInterrupt:
            try:
                query.cancel()
            except LambdafusionError:
                pass
            raise

    def tables(self) -> List[Dict[str, Any]]:
        """The catalog (``GET /v1/tables``): ``[{"name", "format", "locations",
        "columns": [{"name", "type"}]}]``."""
        answer = _http.check_type(
            self._transport.request("GET", "/v1/tables").json(), dict, "the catalog"
        )
        return _http.check_type(answer.get("tables"), list, "the catalog's tables")

    def health(self) -> Dict[str, Any]:
        """``GET /health``: ``{"status": "ok"}`` when the server is up.

        Raises:
            EndpointUnreachable: nothing answers at the endpoint.
        """
        return _http.check_type(
            self._transport.request("GET", "/health").json(), dict, "the health answer"
        )


def connect(
    endpoint: Optional[str] = None,
    *,
    token: Optional[str] = None,
    aws: Optional[bool] = None,
    region: Optional[str] = None,
    service: Optional[str] = None,
    profile: Optional[str] = None,
    aws_access_key_id: Optional[str] = None,
    aws_secret_access_key: Optional[str] = None,
    aws_session_token: Optional[str] = None,
    timeout: float = 30.0,
    max_retries: int = 3,
) -> Connection:
    """Connects to a lambdafusion endpoint (no request is made until the first call).

    Args:
        endpoint: base URL; default ``$LAMBDAFUSION_ENDPOINT`` or ``http://127.0.0.1:8080``.
        token: bearer token for ``lambdafusion serve --token``; default
            ``$LAMBDAFUSION_TOKEN`` (when requests are not signed).
        aws: sign every request with SigV4 (``True``), never (``False``), or when the
            endpoint is an AWS function URL / API Gateway host or ``region`` or
            credentials are given (``None``, the default). Needs the ``aws`` extra.
        region: the region to sign for; default: the one in an AWS endpoint's host name,
            else botocore's configured region.
        service: the service to sign for: ``lambda`` (function URL, the default) or
            ``execute-api`` (API Gateway; the default for ``*.execute-api.*`` hosts).
        profile: an AWS profile for botocore's credential chain.
        aws_access_key_id, aws_secret_access_key, aws_session_token: explicit
            credentials instead of botocore's chain.
        timeout: seconds each request may take (a status wait adds its own wait).
        max_retries: how many times a 503 with ``Retry-After`` (engine saturated) is
            retried, each after the pause the server asks for.

    Raises:
        ValueError: contradictory arguments, or signing wanted without a region or
            credentials.
        ImportError: signing wanted and botocore is missing.
    """
    endpoint = endpoint or os.environ.get("LAMBDAFUSION_ENDPOINT") or DEFAULT_ENDPOINT
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"endpoint must be an http(s) URL like {DEFAULT_ENDPOINT}, not {endpoint!r}"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"endpoint must not carry a query or fragment: {endpoint!r}")
    detected = aws_endpoint_service(parts.hostname)
    explicit = bool(region or aws_access_key_id or aws_secret_access_key or profile)
    sign = aws if aws is not None else bool(detected or explicit)
    if sign and token:
        raise ValueError("give either token= (bearer) or AWS signing, not both")
    signer: Optional[SigV4Signer] = None
    if sign:
        chosen_region = region or (detected[1] if detected else None)
        chosen_service = service or (detected[0] if detected else "lambda")
        if chosen_region is None:
            chosen_region = _botocore_region(profile)
        if not chosen_region:
            raise ValueError(
                "SigV4 signing needs a region: pass region=, or set AWS_REGION / a profile region"
            )
        signer = SigV4Signer(
            region=chosen_region,
            service=chosen_service,
            access_key_id=aws_access_key_id,
            secret_access_key=aws_secret_access_key,
            session_token=aws_session_token,
            profile=profile,
        )
    else:
        token = token or os.environ.get("LAMBDAFUSION_TOKEN") or None
    return Connection(
        endpoint, token=token, signer=signer, timeout=timeout, max_retries=max_retries
    )


def _botocore_region(profile: Optional[str]) -> Optional[str]:
    """The region botocore is configured with (``AWS_REGION``, ``AWS_DEFAULT_REGION``,
    the profile's ``region``), or ``None``."""
    try:
        import botocore.session
    except ImportError as e:
        raise ImportError(
            "signing requests with AWS SigV4 needs botocore: pip install 'lambdafusion[aws]'"
        ) from e
    region = os.environ.get("AWS_REGION")
    if region:
        return region
    configured = botocore.session.Session(profile=profile).get_config_variable("region")
    return str(configured) if configured else None
