"""``hairline report ID --otlp URL`` on a stored experiment, received by an OTLP/HTTP
receiver on loopback (otlp_receiver.py: @elastic/mockotlpserver from npm, which decodes the
exporter's protobuf as a collector does): every verdict and per-trial value the JSON report holds
arrives with its name, attributes and time; a collector that is down or hangs costs a
warning and a bounded wait, never the exit status.

The experiment is test_experiment's three-sided one (stored as the runner stores it, no
load generator): the change 3% above its parent, so ``report`` exits 1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from otlp_receiver import Received, answering, blackhole, receiver, refusing
from test_experiment import store_three_sided
from test_otlp import GITHUB_PULL_REQUEST

from hairline.cli import main
from hairline.report.otlp import VERDICT_CODES
from hairline.report.otlpexport import DEFAULT_TIMEOUT_S
from hairline.store.db import Store, open_store
from hairline.store.models import Arm, Experiment, Trial

# When the stored experiment's trials ended: one a minute from here; it ended after the last.
FIRST_TRIAL_END_S = 1_795_000_000.0
COMMITS = {"parent": "89abcdef", "change": "0123abcd"}


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, int]]:
    """The three-sided experiment, with its trials' end times and the parent and change
    built from git, as the lab records them."""
    folder = tmp_path_factory.mktemp("otlp")
    store = open_store(f"sqlite:///{folder / 'hairline.db'}", home=folder / "home")
    experiment_id = store_three_sided(store, folder, parent=0.0, change=0.03)
    with store.transaction() as session:
        trials = session.query(Trial).filter_by(experiment_id=experiment_id).all()
        for trial in trials:
            trial.finished_at = FIRST_TRIAL_END_S + 60 * trial.index
        row = session.get(Experiment, experiment_id)
        assert row is not None
        row.finished_at = FIRST_TRIAL_END_S + 60 * len(trials)
        for arm in session.query(Arm).filter_by(experiment_id=experiment_id):
            if arm.name in COMMITS:
                arm.source = f"git {COMMITS[arm.name]} (feature)"
    try:
        yield store, experiment_id
    finally:
        store.close()


def report(stored: tuple[Store, int], *args: str, env: dict[str, str] | None = None) -> Result:
    store, experiment_id = stored
    return CliRunner().invoke(
        main,
        ["report", str(experiment_id), "--db", store.url, "--home", str(store.home),
         "--json", "-", *args],
        env={"GITHUB_STEP_SUMMARY": "", **(env or {})},
    )  # fmt: skip


def _nanos(iso: str) -> int:
    return round(datetime.fromisoformat(iso).timestamp() * 1e9)


def by_key(points: list[Received], name: str) -> dict[tuple[Any, ...], Received]:
    found = {
        (p.attributes["hairline.metric"], p.attributes["hairline.arm"],
         p.attributes.get("hairline.trial")): p
        for p in points if p.name == name
    }  # fmt: skip
    assert len(found) == sum(1 for p in points if p.name == name), f"{name}: a key twice"
    return found


def test_the_verdicts_and_trials_arrive_as_the_json_report_has_them(
    stored: tuple[Store, int],
) -> None:
    """False failure: none: seeded rngs (test_experiment's store); the receiver waits up to
    10 s for a request it answered to be decoded (milliseconds here)."""
    # The exporter's own settings apply: a vendor's key, resource attributes of one's own
    # (what hairline sets wins: service.name stays the service measured).
    settings = {
        "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=k3y",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=ci,service.name=other",
    }
    with receiver() as otlp:
        result = report(stored, "--otlp", otlp.url, env={**GITHUB_PULL_REQUEST, **settings})
    assert result.exit_code == 1, result.output  # the change's regression: as without --otlp
    payload = json.loads(result.stdout)
    assert otlp.paths == ["/v1/metrics"]  # the base URL was given; the metrics path added
    assert otlp.headers[0]["x-api-key"] == "k3y"
    assert otlp.headers[0]["content-type"] == "application/x-protobuf"
    assert f"sent {len(otlp.points())} OTLP points to {otlp.url}/v1/metrics" in result.stderr
    points = otlp.points()
    resource = points[0].resource
    assert resource["service.name"] == payload["service"] == "sample-service"
    assert resource["vcs.change.id"] == "1075" and resource["cicd.pipeline.run.id"] == "9753949763"
    assert resource["telemetry.sdk.name"] == "opentelemetry"
    assert resource["deployment.environment.name"] == "ci"
    assert all(p.resource == resource and p.scope == "hairline" for p in points)
    assert {p.attributes["hairline.experiment.id"] for p in points} == {payload["experiment_id"]}

    ended = _nanos(payload["finished_at"])
    metrics = payload["analysis"]["metrics"]
    assert len(metrics) == 4  # two metrics, two comparisons
    for name, field, index in (
        ("hairline.verdict.effect", "effect_rel", None),
        ("hairline.verdict.effect.low", "ci_rel", 0),
        ("hairline.verdict.effect.high", "ci_rel", 1),
        ("hairline.verdict.effect_abs", "effect_abs", None),
        ("hairline.verdict.effect_abs.low", "ci_abs", 0),
        ("hairline.verdict.effect_abs.high", "ci_abs", 1),
        ("hairline.verdict.p_value", "p_adjusted", None),
    ):
        gauge = by_key(points, name)
        for m in metrics:
            expected = m[field] if index is None else m[field][index]
            key = (m["metric"], m["arm"], None)
            if expected is None:  # not finite in the JSON (error_rate is 0 in every arm)
                assert key not in gauge, (name, key)
                continue
            got = gauge[key]
            assert got.value == pytest.approx(expected, rel=1e-12, abs=1e-300), (name, key)
            assert got.time_unix_nano == ended
    codes = by_key(points, "hairline.verdict.code")
    for m in metrics:
        got = codes[(m["metric"], m["arm"], None)]
        assert got.value == VERDICT_CODES[m["verdict"]]
        assert got.attributes["hairline.verdict"] == m["verdict"]
        assert got.attributes["hairline.baseline"] == m["baseline"]
        assert got.attributes["hairline.deciding"] == m["deciding"]
        assert got.attributes["hairline.model"] == m["model"]
        assert got.attributes["vcs.ref.head.revision"] == COMMITS[m["arm"]]
        assert got.attributes.get("vcs.ref.base.revision") == COMMITS.get(m["baseline"])
    assert codes[("cpu_ns_per_request", "change", None)].value == VERDICT_CODES["regression"]

    trials = by_key(points, "hairline.trial.value")
    expected_trials = {
        (metric, arm, value["trial"]): value["value"]
        for metric, per_metric in payload["per_trial"].items()
        for arm, values in per_metric["arms"].items()
        for value in values
    }
    assert len(expected_trials) == 2 * 3 * 7
    assert {k: p.value for k, p in trials.items()} == pytest.approx(expected_trials, rel=1e-12)
    for (_, arm, trial), p in trials.items():
        assert p.time_unix_nano == int((FIRST_TRIAL_END_S + 60 * trial) * 1e9)
        assert p.attributes.get("vcs.ref.head.revision") == COMMITS.get(arm)
        assert p.unit == "" and p.attributes["hairline.experiment.kind"] == "ab"


def _bounded(result: Result, url: str, elapsed_s: float, budget_s: float) -> None:
    assert result.exit_code == 1, result.output  # the verdict's status, export or not
    assert json.loads(result.stdout)["regression"] is True  # the reports are all there
    warning = " ".join(result.stderr.split())  # the console wraps long lines
    assert f"warning: OTLP export to {url}/v1/metrics failed" in warning, warning
    assert "exit status is the verdict's" in warning
    assert elapsed_s < budget_s, elapsed_s


def test_a_collector_that_is_down_costs_a_warning_and_nothing_else(
    stored: tuple[Store, int],
) -> None:
    """False failure: below 1 in 1,000: refused connections fail at once and the exporter
    gives up when its next back-off (1 s, then 2 s) would pass the 3 s timeout, so the
    command takes a few seconds of the 30 s budget (it has taken about 4 s under full
    load); past that only if the machine stalls for 25 s."""
    with refusing() as url:
        started = time.monotonic()
        result = report(stored, "--otlp", url, "--otlp-timeout-s", "3")
        elapsed = time.monotonic() - started
    _bounded(result, url, elapsed, 30.0)
    assert "(Connection refused)" in " ".join(result.stderr.split())


def test_a_collector_that_never_answers_is_given_up_on_after_the_timeout(
    stored: tuple[Store, int],
) -> None:
    """False failure: below 1 in 1,000: the export waits 1 s (--otlp-timeout-s) and this
    module 2 s more at most; the report itself takes about 2 s; the 30 s budget is passed
    only if the machine stalls for 25 s."""
    with blackhole() as url:
        started = time.monotonic()
        result = report(stored, "--otlp", url, "--otlp-timeout-s", "1")
        elapsed = time.monotonic() - started
    _bounded(result, url, elapsed, 30.0)
    assert "(no answer within 1 s)" in " ".join(result.stderr.split())
    assert DEFAULT_TIMEOUT_S > 1  # the default waits longer; the test shortens it


def test_a_url_that_is_not_http_is_refused_before_anything_runs(
    stored: tuple[Store, int],
) -> None:
    result = report(stored, "--otlp", "127.0.0.1:4318")
    assert result.exit_code == 2
    assert "--otlp '127.0.0.1:4318' is not an http(s) URL with a host" in result.output
    assert "http://127.0.0.1:4318" in result.output  # the hint's example


def test_an_endpoint_that_answers_an_error_is_named_with_its_status(
    stored: tuple[Store, int],
) -> None:
    """A URL with a path is used as it is: here one whose server answers 404."""
    with answering(404) as url:
        result = report(stored, "--otlp", f"{url}/v1/traces")
    assert result.exit_code == 1
    warning = " ".join(result.stderr.split())
    assert f"warning: OTLP export to {url}/v1/traces failed" in warning
    assert "(HTTP 404 Not Found)" in warning, warning


@pytest.mark.parametrize("command", ["run", "aa", "demo"])
def test_run_aa_and_demo_take_otlp_and_check_it_before_running(command: str) -> None:
    """`--check` stops before anything runs (demo has none: its bad URL is enough)."""
    example = str(Path(__file__).parents[2] / "examples" / "sample-service" / "experiment.toml")
    args = [] if command == "demo" else [example, "--check"]
    bad = CliRunner().invoke(main, [command, *args, "--otlp", "ftp://collector:4318"])
    assert bad.exit_code == 2, bad.output
    assert "is not an http(s) URL with a host" in bad.output
    if command != "demo":
        good = CliRunner().invoke(main, [command, *args, "--otlp", "http://127.0.0.1:4318"])
        assert good.exit_code == 0 and ": ok (" in good.output, good.output
