"""Exceptions raised by the lambdafusion client.

Every exception derives from :class:`LambdafusionError`. When the server answered, the
exception's message (``str(e)`` and ``e.message``) is the API's own text, verbatim: the
``message`` of the ``{"error": {"status", "message"}}`` body, or the ``Message`` of an AWS
error (a function URL refusing a signature), or the job's ``error`` for a query that
failed while running. ``e.status`` is the HTTP status (``None`` when the error did not
come from an HTTP answer, e.g. a query that failed while running).

=============================  =====================================================
exception                      when
=============================  =====================================================
:class:`QueryError`            bad SQL, unknown table or column, a query that failed
                               while running, the result of an unfinished or failed
                               query (HTTP 400, 409, 413, 422, or a ``failed`` job)
:class:`QueryCancelled`        the query was cancelled (a :class:`QueryError`)
:class:`Unauthorized`          401: missing or wrong bearer token
:class:`Forbidden`             403: refused (a wrong or missing SigV4 signature on an
                               IAM-auth function URL, a catalog change by a caller
                               who may not make it)
:class:`NotFound`              404: unknown query id, another caller's query, or an
                               unknown endpoint path
:class:`Overloaded`            503: the engine is saturated (after the client's
                               bounded retries honouring ``Retry-After``)
:class:`ServerError`           any other 5xx
:class:`EndpointUnreachable`   no answer: connection refused, DNS failure, timeout
:class:`ProtocolError`         an answer that is not what the API promises
=============================  =====================================================
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "LambdafusionError",
    "QueryError",
    "QueryCancelled",
    "AuthError",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Overloaded",
    "ServerError",
    "EndpointUnreachable",
    "ProtocolError",
    "error_for_status",
]


class LambdafusionError(Exception):
    """Base class of every error the client raises.

    Attributes:
        message: the error text; the server's own words when it answered.
        status: the HTTP status of the answer, or ``None``.
        query_id: the query the error is about, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        query_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.query_id = query_id

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r})"


class QueryError(LambdafusionError):
    """The query was refused (bad SQL, unknown table, ...) or failed while running.

    Attributes:
        state: the query's final state (``failed``, ``cancelled``) when the error is
            a finished query's, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        query_id: Optional[str] = None,
        state: Optional[str] = None,
    ) -> None:
        super().__init__(message, status=status, query_id=query_id)
        self.state = state


class QueryCancelled(QueryError):
    """The query was cancelled (by this client, another one, or the server)."""


class AuthError(LambdafusionError):
    """The server refused the caller (401 or 403)."""


class Unauthorized(AuthError):
    """401: a missing or wrong bearer token (``lambdafusion serve --token``)."""


class Forbidden(AuthError):
    """403: the caller is known but refused, or its SigV4 signature is wrong or missing."""


class NotFound(LambdafusionError):
    """404: no such query (or another caller's), or no such endpoint."""


class Overloaded(LambdafusionError):
    """503: the engine has too much work waiting; try again later.

    Attributes:
        retry_after: the seconds the server asked to wait (``Retry-After``), if it said.
        retries: how many times the client had already retried before giving up.
    """

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = 503,
        query_id: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message, status=status, query_id=query_id)
        self.retry_after = retry_after
        self.retries = 0


class ServerError(LambdafusionError):
    """A 5xx answer other than 503."""


class EndpointUnreachable(LambdafusionError):
    """The endpoint did not answer: refused connection, unknown host, or a timeout."""


class ProtocolError(LambdafusionError):
    """The server answered something the API does not promise (not JSON, not Arrow)."""


_BY_STATUS: Dict[int, Type[LambdafusionError]] = {
    400: QueryError,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: QueryError,
    413: QueryError,
    422: QueryError,
    503: Overloaded,
}


def error_for_status(
    status: int,
    message: str,
    *,
    query_id: Optional[str] = None,
    retry_after: Optional[float] = None,
) -> LambdafusionError:
    """The exception for an HTTP error answer with ``status`` and the API's ``message``."""
    cls = _BY_STATUS.get(status)
    if cls is Overloaded:
        return Overloaded(message, status=status, query_id=query_id, retry_after=retry_after)
    if cls is None:
        cls = ServerError if status >= 500 else LambdafusionError
    return cls(message, status=status, query_id=query_id)
