"""Prometheus text format, parsed from a real HTTP endpoint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hairline.arms.local import free_port, wait_http_ok
from hairline.collect.prometheus import counters_per_request, parse_text, scrape
from hairline.errors import HairlineError

TEXT = """\
# HELP sample_requests_total Requests served.
# TYPE sample_requests_total counter
sample_requests_total{endpoint="/api/feed",status="200"} 120
sample_requests_total{status="200",endpoint="/api/profile"} 80 1700000000000
sample_warm 1
bad line here
sample_weird{path="/a \\"quoted\\" b"} 2.5e3
sample_nan NaN
"""


def test_parse_text_keys_by_name_and_sorted_labels() -> None:
    samples = parse_text(TEXT)
    assert samples[("sample_requests_total", (("endpoint", "/api/feed"), ("status", "200")))] == 120
    assert (
        samples[("sample_requests_total", (("endpoint", "/api/profile"), ("status", "200")))] == 80
    )
    assert samples[("sample_warm", ())] == 1
    assert samples[("sample_weird", (("path", '/a \\"quoted\\" b'),))] == 2500
    assert len(samples) == 4


def test_scrape_a_real_endpoint_and_fail_clearly(tmp_path: Path) -> None:
    (tmp_path / "metrics").write_text(TEXT)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/metrics", timeout_s=10)
        assert scrape(f"http://127.0.0.1:{port}/metrics")[("sample_warm", ())] == 1
    finally:
        server.kill()
        server.wait()
    with pytest.raises(HairlineError, match=f"cannot scrape metrics from http://127.0.0.1:{port}"):
        scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=0.5)


def test_a_counters_increase_per_request_overall_and_per_labelled_endpoint() -> None:
    before = parse_text(
        'reads_total 100\nrows_total{endpoint="/a"} 10\nrows_total{endpoint="/b"} 0\n'
    )
    after = parse_text(
        'reads_total 300\nrows_total{endpoint="/a"} 70\nrows_total{endpoint="/b"} 5\n'
    )

    per_request = counters_per_request(
        before, after, ["reads_total", "rows_total"],
        requests=100, endpoint_requests={"/a": 30, "/b": 0},
    )  # fmt: skip

    # /b served nothing: no value rather than a division by zero.
    assert per_request == {"reads_total": 2.0, "rows_total[/a]": 2.0}
