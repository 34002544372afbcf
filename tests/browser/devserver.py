#!/usr/bin/env python3
"""Development proxy for the web console (standard library only).

Serves the console's three files straight from api/src/console/ (so the page can be
edited without rebuilding the binary) and forwards every other request to a running
`lambdafusion serve`:

    python3 tests/browser/devserver.py --upstream http://127.0.0.1:8080 --port 8090
    # then open http://127.0.0.1:8090/

With --prefix /prod the page and the API are served under /prod/ only (as behind an API
Gateway stage), which checks that the page uses relative URLs alone.
"""

import argparse
import http.client
import http.server
import pathlib
import sys
import urllib.parse

CONSOLE_DIR = pathlib.Path(__file__).resolve().parents[2] / "core" / "src" / "api" / "console"
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
# Hop-by-hop headers (RFC 9110 section 7.6.1) are not forwarded.
HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}


def make_handler(upstream, prefix):
    target = urllib.parse.urlsplit(upstream)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, fmt, *args):  # quiet unless asked
            if self.server.verbose:
                super().log_message(fmt, *args)

        def _route(self):
            path = self.path
            if prefix:
                if path == prefix or path.startswith(prefix + "/") or path.startswith(prefix + "?"):
                    path = path[len(prefix):] or "/"
                else:
                    self.send_error(404, "outside the prefix " + prefix)
                    return None
            return path

        def _serve_file(self, path):
            bare = urllib.parse.urlsplit(path).path
            if self.command == "GET" and bare in FILES:
                name, ctype = FILES[bare]
                body = (CONSOLE_DIR / name).read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)
                return True
            return False

        def _forward(self, path):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            conn = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=60)
            try:
                conn.request(self.command, path, body=body, headers=headers)
                response = conn.getresponse()
                self.send_response(response.status, response.reason)
                for k, v in response.getheaders():
                    if k.lower() not in HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.end_headers()
                while True:
                    chunk = response.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the browser stopped reading (the console reads only the first rows)
            finally:
                conn.close()

        def _handle(self):
            path = self._route()
            if path is None:
                return
            if not self._serve_file(path):
                self._forward(path)

        do_GET = do_POST = do_DELETE = do_PUT = do_HEAD = _handle

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="base URL of `lambdafusion serve`")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--prefix", default="", help="serve under this path prefix, e.g. /prod")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    prefix = args.prefix.rstrip("/")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(args.upstream, prefix))
    server.daemon_threads = True
    server.verbose = args.verbose
    print(f"console dev proxy on http://127.0.0.1:{server.server_address[1]}{prefix}/ -> {args.upstream}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
