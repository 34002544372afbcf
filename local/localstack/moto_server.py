"""moto_server for the local stack, with DynamoDB requests serialized.

moto's DynamoDB is not safe under concurrent writers: TransactWriteItems deep-copies
whole tables up front and, when a condition cancels the transaction, restores that
copy - undoing every write other requests made meanwhile, and possibly restoring an
item caught half-written. lambdafusion runs many conditional transactions at once (a
duplicate commit, the fast path and the stream both finishing a job), so this wrapper
runs DynamoDB and DynamoDB Streams requests one at a time. S3 stays concurrent.

Usage: python moto_server.py -H 127.0.0.1 -p 5050   (same flags as moto_server)
"""

import argparse
import signal
import sys
import threading

from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


class SerializeDynamoDB:
    """WSGI middleware: DynamoDB (and Streams) requests hold one lock end to end."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB"):
            return self.app(environ, start_response)
        with self.lock:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close:
                    close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5050)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        SerializeDynamoDB(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
