"""An OTLP/HTTP metrics receiver on loopback for the tests: @elastic/mockotlpserver from npm
(pinned in web/package-lock.json, installed by `make build`), run by otlp_receiver.js, which
decodes ``POST /v1/metrics`` (a protobuf ExportMetricsServiceRequest) as a collector's
``otlp`` receiver does and prints each request as a JSON line. No OpenTelemetry Collector
itself installs from a registry here (Debian has none, PyPI and npm neither).

``Receiver.points()`` flattens what arrived into :class:`Received` points: a gauge's name,
unit, value, time, point attributes and the resource's attributes. ``refusing``,
``blackhole`` and ``answering`` are collectors that fail: down, hanging, answering an error.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Received", "Receiver", "answering", "blackhole", "receiver", "refusing"]

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGE = _ROOT / "web" / "node_modules" / "@elastic" / "mockotlpserver"
_SCRIPT = Path(__file__).with_name("otlp_receiver.js")
# How long a request's decoded body may trail the exporter's answer: the receiver answers
# first and decodes after (it took milliseconds here).
_SETTLE_S = 10.0


@dataclass(frozen=True)
class Received:
    name: str
    unit: str
    value: float
    time_unix_nano: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str


def received(request: Mapping[str, Any]) -> list[Received]:
    """The gauge points of one normalised ExportMetricsServiceRequest (int64 values come as
    strings, as protobuf's JSON mapping has them)."""
    points = []
    for resource_metrics in request.get("resourceMetrics", []):
        resource = dict(resource_metrics.get("resource", {}).get("attributes", {}))
        for scope_metrics in resource_metrics.get("scopeMetrics", []):
            scope = scope_metrics.get("scope", {}).get("name", "")
            for metric in scope_metrics.get("metrics", []):
                assert "gauge" in metric, metric["name"]
                for point in metric["gauge"].get("dataPoints", []):
                    value = point["asDouble"] if "asDouble" in point else point["asInt"]
                    points.append(
                        Received(metric["name"], metric.get("unit", ""), float(value),
                                 int(point["timeUnixNano"]), dict(point.get("attributes", {})),
                                 resource, scope)
                    )  # fmt: skip
    return points


class Receiver:
    """The receiver's address and what it got, in order: each request's path and headers
    (names in lower case) and each metrics request, decoded."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def heard(self, message: Mapping[str, Any]) -> None:
        with self._lock:
            if "request" in message:
                self.paths.append(message["request"]["path"])
                self.headers.append(
                    {k.lower(): v for k, v in message["request"]["headers"].items()}
                )
            elif "metrics" in message:
                self.requests.append(message["metrics"])

    def settled(self) -> bool:
        with self._lock:
            return len(self.requests) == self.paths.count("/v1/metrics")

    def points(self) -> list[Received]:
        deadline = time.monotonic() + _SETTLE_S
        while not self.settled():
            assert time.monotonic() < deadline, "a metrics request was never decoded"
            time.sleep(0.01)
        with self._lock:
            return [p for request in self.requests for p in received(request)]


@contextmanager
def receiver() -> Iterator[Receiver]:
    """@elastic/mockotlpserver on 127.0.0.1 (a port of its own), stopped on exit."""
    node = shutil.which("node")
    if node is None or not _PACKAGE.is_dir():
        missing = "node is not installed" if node is None else f"{_PACKAGE} is missing"
        pytest.fail(
            f"no OTLP receiver: {missing} (`make build` installs the npm packages of "
            "web/package-lock.json)",
            pytrace=False,
        )
    process = subprocess.Popen(
        [node, str(_SCRIPT), str(_PACKAGE)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None and process.stdin is not None
    try:
        first = process.stdout.readline()
        if not first:
            raise AssertionError(f"otlp_receiver.js did not start: {process.communicate()[1]}")
        found = Receiver(json.loads(first)["listening"])

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                found.heard(json.loads(line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        yield found
    finally:
        process.stdin.close()  # it stops when its stdin closes
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def answering(status: int) -> Iterator[str]:
    """A loopback URL whose server answers every POST with ``status`` and no body: a
    collector that refuses what it is sent."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_error(status)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def refusing() -> Iterator[str]:
    """A loopback URL whose port is held (bound) but never listened on: every connection
    is refused, as by a collector that is down."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


@contextmanager
def blackhole() -> Iterator[str]:
    """A loopback URL whose port accepts connections (the kernel completes them) and never
    answers: a collector that hangs."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        yield f"http://127.0.0.1:{silent.getsockname()[1]}"
