"""Test fixtures: a real ``lambdafusion serve``, free ports, and a tiny HTTP server that
plays a deployment's answers where the embedded engine has none (presigned results)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

#: The repository root (clients/python/tests -> ../../..).
REPO = Path(__file__).resolve().parents[3]

#: The lambdafusion binary the tests run.
BIN = Path(os.environ.get("LAMBDAFUSION_BIN", REPO / "target" / "debug" / "lambdafusion"))

CITIES_CSV = (
    "city,pop,area\nOslo,709000,454.0\nBergen,291000,465.3\nOslo,1,1.5\nTromso,77000,2521.0\n"
)


def free_port() -> int:
    """A TCP port nothing listens on right now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> Dict[str, str]:
    """This process's environment without lambdafusion / AWS settings that would change
    what the client or the server does, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAMBDAFUSION_", "AWS_"))
        and k.lower() not in ("http_proxy", "https_proxy")
    }
    env.update(extra)
    return env


class Server:
    """``lambdafusion serve`` on a free port, its cwd a temporary directory holding
    ``cities.csv``; stopped by :meth:`stop`."""

    def __init__(self, *args: str, token: Optional[str] = None) -> None:
        if not BIN.exists():
            raise RuntimeError(
                f"{BIN} is missing: build it (cargo build -p lambdafusion-cli) "
                "or set LAMBDAFUSION_BIN"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="lambdafusion-py-"))
        (self.dir / "cities.csv").write_text(CITIES_CSV)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "serve.log", "wb")
        self.process = subprocess.Popen(
            [
                str(BIN),
                "serve",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--data-dir",
                str(self.dir / "data"),
                # The directory it runs in (cities.csv) is readable only when named.
                "--allow-path",
                str(self.dir),
                *args,
            ],
            cwd=self.dir,
            # The token through the environment: a command line is visible in ps.
            env=clean_env(RUST_LOG="warn", **({"LAMBDAFUSION_TOKEN": token} if token else {})),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_healthy(token)

    def _wait_healthy(self, token: Optional[str], within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"lambdafusion serve exited: {self.logs()}")
            try:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                probe = urllib.request.Request(self.url + "/health", headers=headers)
                with urllib.request.urlopen(probe, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        logs = self.logs()
        self.stop()
        raise RuntimeError(f"lambdafusion serve not healthy within {within} s: {logs}")

    def logs(self) -> str:
        """The last lines the server printed."""
        if not self.log.closed:
            self.log.flush()
        return (self.dir / "serve.log").read_text(errors="replace")[-3000:]

    def cpu_seconds(self) -> Optional[float]:
        """CPU time the server process used so far (Linux ``/proc``), else ``None``."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        # utime and stime are fields 14 and 15 of stat(5), here 12 and 13 after the ")".
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


Handler = Callable[[http.server.BaseHTTPRequestHandler], Tuple[int, Dict[str, str], bytes]]


class FakeServer:
    """A threaded HTTP server on 127.0.0.1 answering with ``routes[(method, path)]``
    (path without the query string). Records every request as ``(method, path with
    query, headers)`` in :attr:`requests`."""

    def __init__(self, routes: Dict[Tuple[str, str], Handler]) -> None:
        self.routes = routes
        self.requests: List[Tuple[str, str, Dict[str, str]]] = []
        fake = self

        class _Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(length) if length else b""
                fake.requests.append((self.command, self.path, dict(self.headers.items())))
                route = fake.routes.get((self.command, self.path.split("?", 1)[0]))
                if route is None:
                    status, headers, body = (
                        404,
                        {},
                        json.dumps(
                            {
                                "error": {
                                    "status": 404,
                                    "message": "no such endpoint; see /v1/queries",
                                }
                            }
                        ).encode(),
                    )
                else:
                    status, headers, body = route(self)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            do_GET = do_POST = do_DELETE = _any

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def json_answer(status: int, doc: object, **headers: str) -> Tuple[int, Dict[str, str], bytes]:
    """A JSON answer for :class:`FakeServer` routes."""
    return status, {"Content-Type": "application/json", **headers}, json.dumps(doc).encode()


def wait_until(predicate: Callable[[], bool], within: float, what: str) -> None:
    """Polls ``predicate`` until it holds, or fails naming ``what``."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {within} s")


def api_error(status: int, message: str) -> Tuple[int, Dict[str, str], bytes]:
    """The API's error shape."""
    return json_answer(status, {"error": {"status": status, "message": message}})


def ipc_bytes(table) -> bytes:  # type: ignore[no-untyped-def]
    """``table`` as an Arrow IPC stream (LZ4-compressed, as the engine writes pieces)."""
    import pyarrow as pa
    import pyarrow.ipc

    sink = pa.BufferOutputStream()
    options = pyarrow.ipc.IpcWriteOptions(compression="lz4")
    with pyarrow.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def optional(name: str) -> Optional[object]:
    """The module ``name`` if it imports, else ``None``."""
    try:
        return __import__(name)
    except ImportError:
        return None
