"""A test service that burns a known CPU time per request, as a real server would spend it.

    python burn_server.py PORT MODE BURN_MS LEDGER

MODE ``threads``: a ``ThreadingHTTPServer`` (a thread per connection, gone when the
connection closes). MODE ``fork``: a ``ForkingHTTPServer`` (a process per request).

On SIGUSR1 the server reaps its finished children and appends to LEDGER the CPU time (ns)
the kernel's rusage counts for it: itself (exited threads included) plus its reaped
children. That is the independent measure a test compares an arm's cgroup CPU with.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from socketserver import ForkingMixIn
from types import FrameType


class ForkingHTTPServer(ForkingMixIn, HTTPServer):
    pass


def rusage_ns() -> int:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return int(total * 1e9)


def main() -> None:
    port, mode, burn_ms, ledger = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
    clock = time.thread_time_ns if mode == "threads" else time.process_time_ns

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            if self.path != "/healthz":
                start = clock()
                x = 0
                while clock() - start < burn_ms * 1e6:
                    x += 1
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server_class = ThreadingHTTPServer if mode == "threads" else ForkingHTTPServer
    server = server_class(("127.0.0.1", port), Handler)
    leader = os.getpid()

    def report(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != leader:
            return
        for pid in list(getattr(server, "active_children", None) or ()):
            os.waitpid(pid, 0)
            server.active_children.discard(pid)  # type: ignore[attr-defined]
        with open(ledger, "a") as f:
            f.write(f"{rusage_ns()}\n")

    signal.signal(signal.SIGUSR1, report)
    server.serve_forever()


if __name__ == "__main__":
    main()
