"""A small shop service for the DiffSuggester example (README.md): three endpoints, each
running its own function, and one function they share.

    python3 shop.py --port 8080 [--host 127.0.0.1] [--work 1.0]

/search and /item are most of production's cost; /invoice is about a tenth of it, and only
/invoice runs ``invoice_tax``, the function the example's change makes twice as costly.
Every request burns real CPU (``burn``), a few hundred microseconds in all, so CPU per
request tells the versions apart. Standard library only: any python3 runs it.
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# Units of `burn` per request, about 1.4 us of CPU each on a 3 GHz Xeon; --work scales them.
WORK = {"search": 260, "item": 180, "invoice": 100, "invoice_tax": 180, "render": 40}
scale = 1.0


def burn(units: float) -> int:
    """Deterministic CPU work standing in for a real computation."""
    acc = 0
    for i in range(int(units * scale * 20)):
        acc = (acc * 31 + i) & 0xFFFFFFFF
    return acc


def render(payload: dict[str, object]) -> bytes:
    """Every endpoint's answer goes through here: the shared function."""
    payload["check"] = burn(WORK["render"])
    return json.dumps(payload).encode()


def search(query: str) -> dict[str, object]:
    return {"query": query, "hits": burn(WORK["search"]) % 97}


def item(item_id: str) -> dict[str, object]:
    return {"item": item_id, "stock": burn(WORK["item"]) % 13}


def invoice_tax(order: str) -> int:
    """Only /invoice runs this: the function the example's change modifies."""
    return burn(WORK["invoice_tax"]) % 1000


def invoice(order: str) -> dict[str, object]:
    lines = burn(WORK["invoice"]) % 7 + 1
    return {"order": order, "lines": lines, "tax_cents": invoice_tax(order)}


ROUTES = {"/search": ("q", search), "/item": ("id", item), "/invoice": ("order", invoice)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the load generator reuses its connections

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
            return
        route = ROUTES.get(url.path)
        if route is None:
            self._send(404, b"not found\n", "text/plain")
            return
        name, handle = route
        value = parse_qs(url.query).get(name, [""])[0]
        self._send(200, render(handle(value)), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a line per request would cost more CPU than the request


def main() -> None:
    global scale
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--work", type=float, default=1.0, help="scale every endpoint's work")
    args = parser.parse_args()
    scale = args.work
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
