"""The Kraken controller end to end on the session's fleet: four sample services sharing a
limited cache, and the rest of the region, behind a real HAProxy; the users' traffic from
the engine through it. Every test leaves the original weights and no process behind."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kraken_files import EXAMPLES, kraken_file, quiet_health, served_rate_health

from hairline.kraken.file import load_kraken_file
from hairline.kraken.fleet import LocalFleet
from hairline.kraken.report import render_html, result_json
from hairline.kraken.results import KrakenResult
from hairline.kraken.run import plan_of, run_kraken
from hairline.lb.haproxy import HAProxyRuntime
from schema_check import check_schema
from suitekit import live_processes_with

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def nothing_left(kraken_fleet: LocalFleet) -> Iterator[None]:
    yield
    lb = HAProxyRuntime(kraken_fleet.socket_path, kraken_fleet.backend)
    assert lb.weights() == kraken_fleet.original_weights
    assert not live_processes_with("hairline.kraken.watchdog")
    assert not live_processes_with(f"users={kraken_fleet.frontend_url}")


def run(path: Path, fleet: LocalFleet) -> KrakenResult:
    return run_kraken(plan_of(load_kraken_file(path)), fleet=fleet)


@pytest.fixture(scope="module")
def cluster_run(kraken_fleet: LocalFleet, tmp_path_factory: pytest.TempPathFactory) -> KrakenResult:
    """The example's health metrics on the fleet: a server test of web1, then the cluster."""
    folder = tmp_path_factory.mktemp("cluster")
    path = kraken_file(folder, kraken_fleet, health=EXAMPLES / "health.toml")
    return run(path, kraken_fleet)


def test_a_cluster_on_a_limited_cache_falls_short_of_theoretical_and_names_the_cache(
    cluster_run: KrakenResult,
) -> None:
    """False failure: probably under 1e-3, from a single recorded run. One recorded run of the
    example (docs/kraken.md, a 2 s control interval where this file has 1 s) found 497/s per server
    (bounds 300 to 700) and 990/s of 1,989, a fraction of 0.50 (bounds 0.3 to 0.75): wide margins,
    but how much they vary is not known."""
    result = cluster_run
    assert result.found, result.test.stopped_by
    assert result.server_test is not None and not result.server_test.aborted
    # One server alone: its queueing delay crossed 20 ms near 1 / (work + cache) per s.
    assert result.per_server_capacity_per_s is not None
    assert 300 < result.per_server_capacity_per_s < 700
    assert result.theoretical_capacity_per_s == pytest.approx(4 * result.per_server_capacity_per_s)
    # Measured from the kernel's receive timestamps: the service counts the requests without
    # one, and (next to) none were (tests/kraken/test_kraken_unstamped.py has a kernel without).
    (web1,) = result.server_test.server_capacities
    assert web1.unstamped is not None and web1.queued > 1000
    assert web1.queueing_unmeasured is None and web1.unstamped <= 0.01 * web1.queued
    # The cache serves ~1,000 gets/s for all four: the cluster stops well short.
    assert result.measured_capacity_per_s is not None
    assert result.measured_capacity_per_s < 0.75 * result.theoretical_capacity_per_s
    fraction = result.fraction_of_theoretical
    assert fraction is not None and 0.3 < fraction < 0.75
    bottleneck = result.test.bottleneck
    assert bottleneck is not None and bottleneck.component == "cache"
    assert bottleneck.growth["cache"] > 0.05
    assert result.test.restored and result.server_test.restored


def test_the_reports_carry_the_series_and_figure_8(cluster_run: KrakenResult) -> None:
    """False failure: none beyond the run it reads (the module's cluster_run, shared with the test
    above): the rest is the rendering."""
    doc = result_json(cluster_run)
    check_schema("kraken-report", json.loads(json.dumps(doc)))
    assert doc["bottleneck"] == "cache" and doc["weights_restored"] is True
    steps = doc["test"]["steps"]
    assert steps and {"share", "weights", "levels", "values", "breakdown"} <= steps[0].keys()
    assert doc["test"]["samples"][0]["values"].keys() == {
        "worker_utilization", "queue_delay", "user_p99", "user_errors"
    }  # fmt: skip
    page = render_html(cluster_run)
    for title in (
        "Measured against theoretical capacity",
        "Share of the users",
        "Health metric queue_delay",
        "Latency breakdown over load",
    ):
        assert title in page
    assert page.count("<svg") >= 8 and "<script" not in page


def test_steps_shrink_from_15_to_1_point_near_a_threshold(
    kraken_fleet: LocalFleet, tmp_path: Path
) -> None:
    """False failure: under 1e-3 (not measured): the served rate runs 300, 525, 750/s at 20, 35 and
    50% of 1,500/s; only 750 is near a boundary (CAUTIOUS at 750), and either side of it the near
    rule (10% of 780) gives the same 1-point step."""
    # 1,500 users/s: 780/s on the cluster is its threshold, 10% below it 702/s (47% share).
    health = served_rate_health(
        tmp_path,
        "BOLD = [0, 700], MODERATE = [700, 750], CAUTIOUS = [750, 780], "
        "NOMORE = [780, 900], BACKOFF = [900, inf]",
    )
    path = kraken_file(tmp_path, kraken_fleet, health=health, extra_test="hold_intervals = 2\n",
                       per_server=100)  # fmt: skip
    result = run(path, kraken_fleet)
    increases = [round(s.next_share - s.share, 4) for s in result.test.steps
                 if s.action == "increase"]  # fmt: skip
    assert increases[:2] == [0.15, 0.15]
    assert 0.01 in increases
    after_first_small = increases[increases.index(0.01) :]
    assert set(after_first_small) == {0.01}
    assert result.test.stopped_by.startswith("served at NOMORE") or "NOMORE" in str(
        result.test.stopped_by
    )


def test_a_metric_at_backoff_sends_the_weights_back_within_one_control_interval(
    kraken_fleet: LocalFleet, tmp_path: Path
) -> None:
    """False failure: about 1e-2 (not measured). The decision after the first sample at or above
    510/s comes at that sample or one 0.5 s sample later, so the 1.0 s bound fails only with an
    engine interval half a second late; but 35% of 1,500/s is 525/s, 3% above the BACKOFF boundary
    of 510, and a served rate measured 3% low holds at NOMORE and stops without a back-off: the
    rate's measurement error is not recorded."""
    # 20% of 1,500/s is 300/s (BOLD); one 15-point step makes it 525/s: BACKOFF.
    health = served_rate_health(
        tmp_path,
        "BOLD = [0, 400], MODERATE = [400, 450], CAUTIOUS = [450, 500], "
        "NOMORE = [500, 510], BACKOFF = [510, inf]",
    )
    path = kraken_file(tmp_path, kraken_fleet, health=health, per_server=100)
    result = run(path, kraken_fleet)
    test = result.test
    first_high = next(s.t_s for s in test.samples if (s.values["served"] or 0) >= 510)
    # The decision at the sample that first saw it, or at the next control interval.
    back = next(s for s in test.steps if s.action in ("back_off", "stop") and s.t_s >= first_high)
    assert back.t_s - first_high <= 1.0
    assert back.next_share == pytest.approx(0.20, abs=0.005)
    assert back.share == pytest.approx(0.35, abs=0.005)
    assert "served" in test.stopped_by and "BACKOFF" in test.stopped_by
    assert test.restored


def test_an_unreachable_load_balancer_aborts_and_the_weights_come_back(
    kraken_fleet: LocalFleet, tmp_path: Path
) -> None:
    """False failure: about 1e-5: the link is back 1.5 s after the cut, and the watchdog keeps
    trying for 30 s."""
    # The test reaches HAProxy through a link that goes away after the first shift and
    # comes back 1.5 s later: the controller aborts, its own restore fails, and the
    # watchdog, trying for up to 30 s, puts the weights back.
    link = tmp_path / "admin.sock"
    link.symlink_to(kraken_fleet.socket_path)
    path = kraken_file(
        tmp_path, kraken_fleet, health=quiet_health(tmp_path), socket=link, per_server=100
    )
    plan = plan_of(load_kraken_file(path))

    def cut(phase: str, step: object) -> None:
        if link.is_symlink():
            link.unlink()
            threading.Timer(1.5, lambda: link.symlink_to(kraken_fleet.socket_path)).start()

    result = run_kraken(plan, fleet=None, on_step=cut)
    test = result.test
    assert test.aborted and not result.found
    assert test.stopped_by.startswith("fault: cannot reach HAProxy's admin socket")
    assert not test.restored
    assert any("restoring the weights failed" in note for note in test.notes)
    # run_kraken returned after the watchdog had restored them (nothing_left checks).
