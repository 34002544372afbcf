"""HTTP for the client, on the standard library only (``urllib``).

One :class:`Transport` per connection: it builds URLs under the endpoint, adds the
bearer token or the SigV4 signature, applies a timeout to every request, retries a 503
that carries ``Retry-After`` a bounded number of times, and turns error answers into the
exceptions of :mod:`lambdafusion.errors` with the API's message verbatim.

Requests to the API never follow redirects (a redirect would carry the token or
signature elsewhere; the API does not send any). Presigned result URLs are fetched with
:func:`fetch_presigned`: no credentials at all, since the URL carries its own signature.
"""

from __future__ import annotations

import email.message
import email.utils
import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Type, TypeVar
from urllib.parse import urlencode

from .errors import (
    EndpointUnreachable,
    Overloaded,
    ProtocolError,
    error_for_status,
)

__all__ = ["Response", "Transport", "fetch_presigned", "error_message"]

USER_AGENT = "lambdafusion-python"

#: Longest pause honoured for one ``Retry-After``, in seconds.
MAX_RETRY_PAUSE = 30.0


@dataclass
class Response:
    """A complete HTTP answer."""

    status: int
    headers: email.message.Message
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or :class:`ProtocolError` naming what came instead."""
        try:
            return json.loads(self.body)
        except ValueError as e:
            snippet = self.body[:200].decode("utf-8", "replace")
            raise ProtocolError(
                f"expected JSON, got {snippet!r} (HTTP {self.status})", status=self.status
            ) from e


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuses to follow redirects: the answer itself is returned as an HTTPError."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> Optional[urllib.request.Request]:
        return None


def error_message(status: int, reason: str, body: bytes) -> str:
    """The text of an error answer: the API's ``error.message``, an AWS error's
    ``Message`` / ``message``, an S3 XML error's ``<Message>``, else the body itself."""
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for key in ("Message", "message"):
            if isinstance(doc.get(key), str):
                return str(doc[key])
    if text.lstrip().startswith("<"):
        start, end = text.find("<Message>"), text.find("</Message>")
        if 0 <= start < end:
            return text[start + len("<Message>") : end]
    text = text.strip()
    return text or f"HTTP {status} {reason}".strip()


def _retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` in seconds: a number of seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


Signer = Callable[[str, str, Dict[str, str], bytes], Dict[str, str]]


class Transport:
    """HTTP to one endpoint.

    Args:
        endpoint: base URL, e.g. ``http://127.0.0.1:8080``.
        token: bearer token to send, or ``None``.
        signer: a function ``(method, url, headers, body) -> headers`` that signs the
            request (SigV4), or ``None``.
        timeout: seconds every request may take (connect and each read).
        max_retries: retries of a 503 answered with ``Retry-After``.
        sleep: what waits between retries (tests replace it).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        token: Optional[str] = None,
        signer: Optional[Signer] = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.signer = signer
        self.timeout = timeout
        self.max_retries = max_retries
        self._sleep = sleep
        self._opener = urllib.request.build_opener(_NoRedirect())

    def url(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        """The absolute URL of ``path`` (``/v1/...``) with ``query`` encoded."""
        url = self.endpoint + path
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urlencode(params)
        return url

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        timeout: Optional[float] = None,
        query_id: Optional[str] = None,
        ok: Tuple[int, ...] = (),
    ) -> Response:
        """Sends a request and returns its 2xx answer (or one whose status is in ``ok``).

        Raises the exception of :mod:`lambdafusion.errors` for every other answer, and
        :class:`EndpointUnreachable` when there is none. A 503 with ``Retry-After`` is
        retried up to ``max_retries`` times, each after the pause it asks for (at most
        :data:`MAX_RETRY_PAUSE` seconds)."""
        url = self.url(path, query)
        body = None if json_body is None else json.dumps(json_body).encode("utf-8")
        attempt = 0
        while True:
            # Signed afresh on every attempt (a new X-Amz-Date).
            response = self._send(method, url, body, timeout)
            if 200 <= response.status < 300 or response.status in ok:
                return response
            message = error_message(response.status, "", response.body)
            retry_after = _retry_after(response.headers.get("Retry-After"))
            if response.status == 503 and retry_after is not None and attempt < self.max_retries:
                attempt += 1
                self._sleep(min(retry_after, MAX_RETRY_PAUSE))
                continue
            error = error_for_status(
                response.status, message, query_id=query_id, retry_after=retry_after
            )
            if isinstance(error, Overloaded):
                error.retries = attempt
            raise error

    def _send(
        self, method: str, url: str, body: Optional[bytes], timeout: Optional[float]
    ) -> Response:
        headers: Dict[str, str] = {"Accept": "*/*", "User-Agent": USER_AGENT}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.signer is not None:
            headers = self.signer(method, url, headers, body or b"")
        elif self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        limit = self.timeout if timeout is None else timeout
        return _open(self._opener, request, limit, f"{method} {url}", self.endpoint)


def _open(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    timeout: float,
    what: str,
    endpoint: str,
) -> Response:
    """Sends ``request`` and reads the whole answer, error answers included."""
    try:
        try:
            with opener.open(request, timeout=timeout) as answer:
                return Response(answer.status, answer.headers, answer.read())
        except urllib.error.HTTPError as answer:
            with answer:
                return Response(answer.code, answer.headers, answer.read())
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise EndpointUnreachable(
                f"no answer from {endpoint} within {timeout:g} s ({what})"
            ) from e
        raise EndpointUnreachable(f"cannot reach {endpoint}: {reason} ({what})") from e
    except (socket.timeout, TimeoutError) as e:
        raise EndpointUnreachable(f"no answer from {endpoint} within {timeout:g} s ({what})") from e
    except http.client.IncompleteRead as e:
        raise EndpointUnreachable(
            f"{endpoint} closed the connection mid-answer after {len(e.partial)} bytes ({what})"
        ) from e
    except (http.client.HTTPException, ConnectionError, OSError) as e:
        raise EndpointUnreachable(f"cannot reach {endpoint}: {e!r} ({what})") from e


_PRESIGNED_OPENER = urllib.request.build_opener()


def fetch_presigned(url: str, start: int, end: int, *, timeout: float, query_id: str) -> bytes:
    """Bytes ``start..end`` (end exclusive) of the object at presigned ``url``: a ranged
    GET with no credentials (the URL carries its signature). A server that ignores the
    range and sends the whole object is sliced here."""
    if end <= start:
        return b""
    request = urllib.request.Request(
        url,
        method="GET",
        headers={"Range": f"bytes={start}-{end - 1}", "User-Agent": USER_AGENT},
    )
    host = url.split("?", 1)[0]
    response = _open(_PRESIGNED_OPENER, request, timeout, f"GET {host}", host)
    if response.status == 206:
        body = response.body
    elif response.status == 200:
        body = response.body[start:end]
    else:
        message = error_message(response.status, "", response.body)
        raise error_for_status(
            response.status,
            f"downloading a piece of the result of query {query_id} from {host}: {message}",
            query_id=query_id,
        )
    if len(body) != end - start:
        raise ProtocolError(
            f"a piece of the result of query {query_id} from {host} has {len(body)} bytes; "
            f"expected {end - start} (bytes {start}..{end})",
            query_id=query_id,
        )
    return body


T = TypeVar("T")


def check_type(value: Any, kind: Type[T], what: str) -> T:
    """``value`` if it is a ``kind``, else a :class:`ProtocolError` naming ``what``."""
    if not isinstance(value, kind):
        raise ProtocolError(f"unexpected answer: {what} is {value!r}")
    return value
