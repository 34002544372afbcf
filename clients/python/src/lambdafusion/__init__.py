"""Python client for lambdafusion, serverless distributed SQL on AWS Lambda.

::

    import lambdafusion
    con = lambdafusion.connect("http://127.0.0.1:8080")
    table = con.sql("SELECT 1 AS x")          # a pyarrow.Table
    df = table.to_pandas()                     # where pandas is installed

``connect(endpoint, token=...)`` for ``lambdafusion serve --token``;
``connect(url, aws=True)`` (or ``region=...``) signs with SigV4 for an IAM-auth function
URL. ``con.submit(sql)`` returns a :class:`Query` (``status()``, ``wait()``, ``cancel()``,
``result()``); ``con.tables()`` lists the catalog. Errors are the exceptions of
:mod:`lambdafusion.errors`, carrying the API's message verbatim.
"""

from .client import (
    DEFAULT_ENDPOINT,
    MAX_WAIT_SECONDS,
    TERMINAL_STATES,
    Connection,
    Query,
    connect,
)
from .errors import (
    AuthError,
    EndpointUnreachable,
    Forbidden,
    LambdafusionError,
    NotFound,
    Overloaded,
    ProtocolError,
    QueryCancelled,
    QueryError,
    ServerError,
    Unauthorized,
)
from .sigv4 import SigV4Signer

__version__ = "0.1.0"

__all__ = [
    "connect",
    "Connection",
    "Query",
    "SigV4Signer",
    "DEFAULT_ENDPOINT",
    "MAX_WAIT_SECONDS",
    "TERMINAL_STATES",
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
    "__version__",
]
