"""The metrics derived from what the runner measured of each arm in a batch's window: CPU
per request (its cgroup's CPU over the responses it sent), goodput, error rate, latency
percentiles (the load engine's summary)."""

from __future__ import annotations

from hairline.collect.metric import Derived, Measured, MetricSpec

__all__ = [
    "CPU",
    "CPU_PER_REQUEST",
    "ERROR_RATE",
    "GOODPUT",
    "LATENCY_P50",
    "LATENCY_P99",
    "LOAD_SUMMARY",
]

CPU_PER_REQUEST = MetricSpec(
    "cpu_ns_per_request",
    "ns/request",
    "higher-is-worse",
    "the CPU the arm's cgroup used over the measurement phase, exited threads and forked "
    "children included, divided by the responses it sent",
)
# What the service controls in an open-loop replay (answers that were not errors, per
# second); the offered rate, which both arms get alike, is not a metric.
GOODPUT = MetricSpec(
    "goodput_per_s",
    "responses/s",
    "lower-is-worse",
    "answers that were not errors, per second of the measurement phase",
)
ERROR_RATE = MetricSpec(
    "error_rate", "errors/request", "higher-is-worse", "errors over the requests sent"
)
LATENCY_P50 = MetricSpec(
    "latency_p50_us", "µs", "higher-is-worse", "the batch's median latency (the engine's)"
)
LATENCY_P99 = MetricSpec(
    "latency_p99_us", "µs", "higher-is-worse", "the batch's 99th percentile latency"
)


def _cpu(m: Measured) -> dict[str, float]:
    return {CPU_PER_REQUEST.name: m.cpu_ns / m.served}


def _served(m: Measured) -> dict[str, float]:
    return {
        GOODPUT.name: (m.requests - m.errors) / m.duration_s,
        ERROR_RATE.name: m.errors / m.served,
        LATENCY_P50.name: m.latency_p50_us,
        LATENCY_P99.name: m.latency_p99_us,
    }


CPU = Derived("cpu", (CPU_PER_REQUEST,), _cpu)
LOAD_SUMMARY = Derived("load", (GOODPUT, ERROR_RATE, LATENCY_P50, LATENCY_P99), _served)
