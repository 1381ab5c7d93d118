"""An OTLP/HTTP metrics receiver on loopback for the tests: what a collector's ``otlp``
receiver does with ``POST /v1/metrics`` (a protobuf ExportMetricsServiceRequest, maybe
gzipped; answered with an ExportMetricsServiceResponse), from the opentelemetry-proto
package's messages. No OpenTelemetry Collector installs from a registry here (Debian has
none, PyPI and npm neither), so the tests decode what the exporter sends themselves.

``received(request)`` flattens a request into :class:`Received` points: a gauge's name,
unit, value, time, point attributes and the resource's attributes.
"""

from __future__ import annotations

import gzip
import socket
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["Received", "Receiver", "blackhole", "receiver", "refusing"]


@dataclass(frozen=True)
class Received:
    name: str
    unit: str
    value: float
    time_unix_nano: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str


def _value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        found[pair.key] = _value(pair.value)
    return found


def received(request: ExportMetricsServiceRequest) -> list[Received]:
    points = []
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                assert metric.WhichOneof("data") == "gauge", metric.name
                for point in metric.gauge.data_points:
                    value = point.as_double if point.HasField("as_double") else point.as_int
                    points.append(
                        Received(metric.name, metric.unit, float(value), point.time_unix_nano,
                                 _attributes(point.attributes), resource,
                                 scope_metrics.scope.name)
                    )  # fmt: skip
    return points


class Receiver:
    """The server's address and every request it decoded, in order."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.requests: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []  # each request's, names in lower case

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def points(self) -> list[Received]:
        return [p for request in self.requests for p in received(request)]


@contextmanager
def receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on 127.0.0.1 (a port of its own), stopped on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            found.paths.append(self.path)
            found.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.path != "/v1/metrics":
                self.send_error(404)
                return
            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            found.requests.append(request)
            answer = ExportMetricsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test reads the requests, not a log

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found = Receiver(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
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
