"""``--otlp ENDPOINT``: an experiment's gauges (report/otlp.py) sent over OTLP/HTTP with
OpenTelemetry's SDK and exporter (protobuf, ``opentelemetry-exporter-otlp-proto-http``).

The points are handed to the exporter as the SDK's own metrics data, not recorded through a
meter: a meter stamps each point with the time it is read, and these stand for the times
their trials ended. Sending never changes a command's outcome: it is bounded (the exporter
retries within ``timeout_s``, and this module stops waiting shortly after, whatever hangs),
and a failure is an :class:`ExportOutcome` naming the endpoint and why, for a warning.
The exporter's own settings in the environment apply (``OTEL_EXPORTER_OTLP_HEADERS`` for
a vendor's key, ``OTEL_EXPORTER_OTLP_METRICS_COMPRESSION``, certificates), and so does
``OTEL_RESOURCE_ATTRIBUTES`` (what hairline sets wins over it).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from hairline import __version__
from hairline.errors import ConfigError

if TYPE_CHECKING:  # every command's options import this module: it stays light
    from hairline.report.otlp import OtlpBatch

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "METRICS_PATH",
    "ExportOutcome",
    "OtlpTarget",
    "export_otlp",
    "metrics_url",
]

# OTLP/HTTP's path for metrics under a collector's base URL (http://collector:4318).
METRICS_PATH = "/v1/metrics"
# Long enough for a collector across a network to answer (and the exporter to retry a
# refused connection once or twice); short enough that a CI job barely notices one down.
DEFAULT_TIMEOUT_S = 10.0
# Beyond the exporter's own deadline, how long to wait before giving up on it (a name that
# does not resolve can hold a thread past any HTTP timeout).
_GRACE_S = 2.0
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp"
# In the exporter's messages: the system's word for a failed connection ("[Errno 111]
# Connection refused", "[Errno -2] Name or service not known"), and an HTTP answer's status.
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")
_STATUS = re.compile(r"code: (\d+), reason: (.*)")


@dataclass(frozen=True)
class OtlpTarget:
    """Where ``--otlp`` sends (the full metrics URL) and how long it may take."""

    url: str
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class ExportOutcome:
    ok: bool
    url: str
    points: int
    elapsed_s: float
    reason: str  # why it failed ("" when it did not)

    @property
    def text(self) -> str:
        """What a command prints: the points sent, or a warning naming the endpoint."""
        if self.ok:
            return f"sent {self.points} OTLP points to {self.url}"
        return (
            f"warning: OTLP export to {self.url} failed after {self.elapsed_s:.1f} s "
            f"({self.reason}); nothing else changes: the reports are written and the exit "
            "status is the verdict's"
        )


def metrics_url(endpoint: str) -> str:
    """``--otlp``'s URL: a collector's base URL gets OTLP's metrics path
    (``http://host:4318`` -> ``http://host:4318/v1/metrics``); a URL with a path is used as
    it is. A ConfigError for anything but an http(s) URL with a host."""
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"--otlp {endpoint!r} is not an http(s) URL with a host",
            hint="give the OTLP/HTTP endpoint of a collector, e.g. --otlp "
            "http://127.0.0.1:4318 (its metrics path /v1/metrics is added)",
        )
    if parts.path in ("", "/"):
        parts = parts._replace(path=METRICS_PATH)
    return urlunsplit(parts)


class _Captured(logging.Handler):
    """The exporter's log lines while it sends: its reason goes into our one warning
    instead of a traceback-like stream on the terminal."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _exporter_logs() -> Iterator[_Captured]:
    logger = logging.getLogger(_EXPORTER_LOGGER)
    handler, propagate = _Captured(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _reason(messages: list[str], timeout_s: float) -> str:
    """Why the export failed, in a few words, from the exporter's log lines (it logs a
    transient error's cause, then only that it gave up)."""
    text = " ".join(messages)
    if found := _ERRNO.search(text):
        return found.group(1).strip()
    if found := _STATUS.search(text):
        return f"HTTP {found.group(1)} {found.group(2)}".strip()
    if not messages or "due to timeout" in text or "timed out" in text:
        return f"no answer within {timeout_s:g} s"
    return messages[-1][:300]


def _metrics_data(batch: OtlpBatch) -> Any:
    """The batch as the SDK's MetricsData (one resource, the scope ``hairline``)."""
    from opentelemetry.sdk.metrics.export import (
        Gauge,
        Metric,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    metrics = [
        Metric(
            name=gauge.name,
            description=gauge.description,
            unit=gauge.unit,
            data=Gauge(
                data_points=[
                    NumberDataPoint(
                        attributes=dict(p.attributes),
                        start_time_unix_nano=0,
                        time_unix_nano=p.time_unix_nano,
                        value=p.value,
                    )
                    for p in gauge.points
                ]
            ),
        )
        for gauge in batch.gauges
    ]
    return MetricsData(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource.create(dict(batch.resource)),
                scope_metrics=[
                    ScopeMetrics(
                        scope=InstrumentationScope("hairline", __version__),
                        metrics=metrics,
                        schema_url="",
                    )
                ],
                schema_url="",
            )
        ]
    )


def export_otlp(batch: OtlpBatch, target: OtlpTarget) -> ExportOutcome:
    """Send ``batch`` to ``target``; never raises, never takes much longer than
    ``target.timeout_s``."""
    started = time.monotonic()
    if not batch.gauges:
        return ExportOutcome(False, target.url, 0, 0.0, "the experiment has no verdict or "
                             "per-trial value to export")  # fmt: skip
    result: dict[str, object] = {}

    def send(handler: _Captured) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
            from opentelemetry.sdk.metrics.export import MetricExportResult

            exporter = OTLPMetricExporter(endpoint=target.url, timeout=target.timeout_s)
            try:
                sent = exporter.export(_metrics_data(batch))
            finally:
                exporter.shutdown()
            result["ok"] = sent is MetricExportResult.SUCCESS
            if not result["ok"]:
                result["reason"] = _reason(handler.messages, target.timeout_s)
        except Exception as err:  # an export must not change the command's outcome
            result["ok"], result["reason"] = False, f"{type(err).__name__}: {err}"

    with _exporter_logs() as handler:
        # A daemon thread: if the exporter hangs past every timeout, the command still ends.
        worker = threading.Thread(target=send, args=(handler,), name="otlp-export", daemon=True)
        worker.start()
        worker.join(target.timeout_s + _GRACE_S)
    elapsed = time.monotonic() - started
    if worker.is_alive():
        return ExportOutcome(False, target.url, batch.point_count, elapsed,
                             f"no answer within {target.timeout_s:g} s")  # fmt: skip
    ok = bool(result.get("ok"))
    return ExportOutcome(ok, target.url, batch.point_count, elapsed, str(result.get("reason", "")))
