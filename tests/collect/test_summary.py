"""The metrics derived from a batch's window: per request over the responses sent."""

from __future__ import annotations

import pytest

from hairline.collect.metric import Measured
from hairline.collect.summary import CPU, LOAD_SUMMARY


def test_cpu_goodput_errors_and_latency_from_one_arms_window() -> None:
    measured = Measured(
        requests=400, errors=4, latency_p50_us=800.0, latency_p99_us=2500.0,
        cpu_ns=40_000_000, duration_s=2.0,
    )  # fmt: skip

    assert CPU.window({}).values("A", measured) == {"cpu_ns_per_request": 100_000.0}
    assert LOAD_SUMMARY.window({}).values("A", measured) == {
        "goodput_per_s": 198.0,
        "error_rate": pytest.approx(0.01),
        "latency_p50_us": 800.0,
        "latency_p99_us": 2500.0,
    }


def test_an_arm_that_sent_no_response_divides_by_one() -> None:
    """No division by zero: its batch is spoiled anyway (lab/validity.py)."""
    measured = Measured(
        requests=0, errors=0, latency_p50_us=0.0, latency_p99_us=0.0, cpu_ns=5_000,
        duration_s=1.0,
    )  # fmt: skip
    assert CPU.window({}).values("A", measured) == {"cpu_ns_per_request": 5_000.0}
