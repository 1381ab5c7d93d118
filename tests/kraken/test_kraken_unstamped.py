"""Kraken on a fleet whose kernel gives no receive timestamps: the web server's sample service
runs with ``--test-no-recv-timestamps``, so its queue times start at the read, as on a kernel
that never delivers ``SO_TIMESTAMPNS``. The server test must refuse the per-server capacity
(it would come out too high) and say why with the counts, and the cluster test must mark its
queueing as not measured, in the summary, the JSON and the HTML."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kraken_files import kraken_file, quiet_health
from rich.console import Console

from hairline.kraken.file import load_kraken_file
from hairline.kraken.fleet import FleetSpec, LocalFleet
from hairline.kraken.report import print_summary, render_html, result_json
from hairline.kraken.run import plan_of, run_kraken
from hairline.lb.launch import HAPROXY
from schema_check import check_schema

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def unstamped_fleet(engine_path: Path) -> Iterator[LocalFleet]:
    """One web server (two threads, a cache with room for both: ~1,000/s, so that the test's
    steps stay below its knee) and the rest, behind HAProxy; the web server asks the kernel for
    no receive timestamps."""
    if not HAPROXY.exists():
        pytest.skip("HAProxy is not installed (make sysdeps installs it)")
    spec = FleetSpec(servers=1, threads_per_server=2, cache_slots=2, recv_timestamps=False)
    with LocalFleet(spec, engine=engine_path) as fleet:
        yield fleet


def test_without_kernel_timestamps_the_per_server_capacity_is_refused_and_said_why(
    unstamped_fleet: LocalFleet, tmp_path: Path
) -> None:
    """A cluster test without a per-server capacity: the server test of web1 first, then the
    cluster (web1) for 6 s.

    False failure: under 1e-3 (not measured): the count is exact (every request web1 answers is
    read without a stamp, so the share is 100% against the 1% limit); the server test needs 1,000
    of them to stop early, which the steps from 6% of 1,000/s give by its fourth second of six
    (59, 209, 359, 509/s), and a late stop would still refuse the capacity, failing only the
    check of what stopped it."""
    path = kraken_file(
        tmp_path,
        unstamped_fleet,
        health=quiet_health(tmp_path),
        servers=("web1",),
        start_share=0.1,
        rate_per_s=1000,
        max_duration_s=6,
    )
    result = run_kraken(plan_of(load_kraken_file(path)), fleet=unstamped_fleet)
    server_test = result.server_test
    assert server_test is not None and not server_test.aborted and server_test.restored
    # The server test stopped as soon as it saw the queueing could not be measured.
    assert server_test.stopped_by.startswith("web1's queueing not measured: "), (
        server_test.stopped_by
    )
    (web1,) = server_test.server_capacities
    assert web1.capacity_per_s is None and web1.queued >= 1000
    assert web1.unstamped == web1.queued
    said = f"{web1.unstamped:,.0f} of {web1.queued:,.0f} requests had no kernel receive timestamp"
    assert web1.queueing_unmeasured is not None and said in web1.queueing_unmeasured
    # So no per-server and no theoretical capacity, and the note says why.
    assert result.per_server_capacity_per_s is None and result.theoretical_capacity_per_s is None
    assert any(n.startswith("web1's queueing not measured") for n in result.notes)
    # The cluster test ran, and its queueing is marked as read from the read.
    test = result.test
    assert not test.aborted and test.restored
    marks = [n for n in test.notes if n.startswith("web1's queueing not measured")]
    assert marks and "timed from the read and read low" in marks[0]
    # Everywhere the figures are read: the summary, the JSON (valid against its schema), HTML.
    out = io.StringIO()
    print_summary(result, Console(file=out, width=400))
    assert said in out.getvalue()
    doc = json.loads(json.dumps(result_json(result)))
    check_schema("kraken-report", doc)
    capacity = doc["server_test"]["server_capacities"][0]
    assert capacity["capacity_per_s"] is None and capacity["unstamped"] == capacity["queued"]
    assert any(said in note for note in doc["notes"])
    assert said in render_html(result)
