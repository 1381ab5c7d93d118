"""A service under test for the isolation tests: it answers health, and on request reaches
out (a TCP connect, or an HTTP call) and says how that went.

    python isolated_service.py HOST PORT

GET /connect?to=127.0.0.1:6379   -> "ok 0.001" or "ConnectionRefusedError 0.001"
GET /call?method=POST&url=http://127.0.0.1:9000/orders -> "<status> <body>" or the error
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/connect":
            host, _, port = query["to"].rpartition(":")
            started = time.monotonic()
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
                outcome = "ok"
            except OSError as err:
                outcome = type(err).__name__
            body = f"{outcome} {time.monotonic() - started:.3f}"
        elif url.path == "/call":
            request = urllib.request.Request(
                query["url"], method=query.get("method", "GET"), data=b"x" * 3 or None
            )
            if request.get_method() in ("GET", "HEAD"):
                request.data = None
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    body = f"{response.status} {response.read().decode()}"
            except (urllib.error.URLError, OSError) as err:
                body = f"error {err}"
        else:
            body = "ok"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
