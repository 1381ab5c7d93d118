"""``/metrics`` scraped as Prometheus scrapes it, parsed by prometheus_client's own text
parser, and checked against the rows in the database (SQLite and PostgreSQL): queue depth,
running experiments, ended ones, verdict counts by service and result, the A/A false-
positive rate over the /aa page's window; a token sees its team's, an admin every team's.
The last test scrapes a real ``hairline serve`` after real experiments."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from sqlalchemy import func, select
from weblab import SERVICE, WebLab, http
from webseed import seed

from hairline.store.db import Store, open_store
from hairline.store.models import Experiment, Service, VerdictRow
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.health import binomial_band
from hairline.web.views_trends import AA_WINDOW_RUNS

# The demo team's A/A history of "api": 21 runs, the oldest flagged (it falls out of the
# 20-run window), then 4 flagged among the 20 in the window (and one inconclusive, which is
# no false positive).
AA_LABELS = (
    ["regression"] + ["no change"] * 3 + ["regression", "improvement", "inconclusive"]
    + ["no change"] * 5 + ["regression"] + ["no change"] * 6 + ["regression", "no change"]
)  # fmt: skip
QUEUED_FOR_S = 300.0


@pytest.fixture
def lab(store: Store) -> dict[str, str]:
    """Team demo: service api with 2 A/B regressions, 1 no change and the A/A history above;
    2 queued experiments (the older one waiting QUEUED_FOR_S), 1 running, 1 failed. Team
    other: service web with a regression and one queued. The tokens by name."""
    now = time.time()
    for label in ("regression", "no change", "regression"):
        seed(store, service="api", label=label, at=1.0e9)
    for i, label in enumerate(AA_LABELS):
        seed(store, service="api", kind="aa", label=label, at=1.0e9 + 60 * i)
    seed(store, service="api", phase="queued", at=now - QUEUED_FOR_S)
    seed(store, service="api", phase="queued", at=now - 10)
    seed(store, service="api", phase="running", trials=3)
    seed(store, service="api", phase="failed")
    seed(store, service="web", team="other", label="regression")
    seed(store, service="web", team="other", phase="queued", at=now)
    return {
        name: create_token(store, name=name, team=team, scope=scope)
        for name, team, scope in [("admin", "ops", "admin"), ("demo-read", "demo", "read")]
    }


def scrape(client: TestClient, token: str | None, accept: str = "") -> dict[str, list[Sample]]:
    headers = {"Accept": accept} if accept else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    answer = client.get("/metrics", headers=headers)
    assert answer.status_code == 200, answer.text
    return samples(text_string_to_metric_families(answer.text))


def samples(families: Iterable[object]) -> dict[str, list[Sample]]:
    found: dict[str, list[Sample]] = {}
    for family in families:
        for sample in family.samples:  # type: ignore[attr-defined]
            found.setdefault(sample.name, []).append(sample)
    return found


def value(found: dict[str, list[Sample]], name: str, **labels: str) -> float:
    (match,) = [s for s in found[name] if s.labels == labels]
    return float(match.value)


def stored_verdicts(
    store: Store, service: str, kind: str, team: str | None = None
) -> dict[str, int]:
    """Deciding verdicts of done experiments (of ``team``) by label, counted straight from
    the rows."""
    query = (
        select(VerdictRow.label, func.count())
        .join(Experiment, Experiment.id == VerdictRow.experiment_id)
        .join(Service, Service.id == Experiment.service_id)
        .where(Service.name == service, Experiment.kind == kind, VerdictRow.deciding,
               Experiment.phase == "done")
        .group_by(VerdictRow.label)
    )  # fmt: skip
    if team is not None:
        query = query.where(Experiment.team == team)
    with store.transaction() as session:
        rows = session.execute(query).all()
    return {label: int(n) for label, n in rows}


def test_an_admin_scrapes_the_queue_the_verdicts_and_the_aa_health_of_every_team(
    store: Store, lab: dict[str, str]
) -> None:
    """False failure: none in practice: the oldest queued experiment's age is read within
    the test's own run (the bound allows 60 s for it)."""
    found = scrape(TestClient(create_app(store)), lab["admin"])
    assert value(found, "hairline_queue_depth", team="demo") == 2
    assert value(found, "hairline_queue_depth", team="other") == 1
    age = value(found, "hairline_queue_oldest_age_seconds", team="demo")
    assert QUEUED_FOR_S <= age < QUEUED_FOR_S + 60
    assert value(found, "hairline_experiments_running", team="demo") == 1
    assert value(found, "hairline_experiments_running", team="other") == 0
    ended = {(s.labels["team"], s.labels["kind"], s.labels["phase"]): s.value
             for s in found["hairline_experiments_ended_total"]}  # fmt: skip
    assert ended == {("demo", "ab", "done"): 3, ("demo", "aa", "done"): 21,
                     ("demo", "ab", "failed"): 1, ("other", "ab", "done"): 1}  # fmt: skip

    for service, kind in (("api", "ab"), ("api", "aa"), ("web", "ab")):
        scraped = {s.labels["result"]: s.value for s in found["hairline_verdicts_total"]
                   if s.labels["service"] == service and s.labels["kind"] == kind}  # fmt: skip
        assert scraped == stored_verdicts(store, service, kind), (service, kind)
    assert value(found, "hairline_verdicts_total", service="api", kind="ab",
                 result="regression") == 2  # fmt: skip

    key = {"service": "api", "metric": "cpu_ns_per_request"}
    window = AA_LABELS[-AA_WINDOW_RUNS:]
    flagged = sum(label in ("regression", "improvement") for label in window)
    assert flagged == 4 and len(AA_LABELS) == AA_WINDOW_RUNS + 1
    assert value(found, "hairline_aa_runs", **key) == AA_WINDOW_RUNS
    assert value(found, "hairline_aa_false_positives", **key) == flagged
    assert value(found, "hairline_aa_false_positive_rate", **key) == flagged / AA_WINDOW_RUNS
    low, high = binomial_band(AA_WINDOW_RUNS, 0.05)
    assert value(found, "hairline_aa_band_low", **key) == low
    assert value(found, "hairline_aa_band_high", **key) == high == 3  # 4 flagged: above it
    assert value(found, "hairline_aa_alpha", service="api") == 0.05


def test_a_teams_token_sees_its_own_teams_series_only(store: Store, lab: dict[str, str]) -> None:
    found = scrape(TestClient(create_app(store)), lab["demo-read"])
    assert {s.labels["team"] for s in found["hairline_queue_depth"]} == {"demo"}
    assert {s.labels["service"] for s in found["hairline_verdicts_total"]} == {"api"}
    assert {s.labels["service"] for s in found["hairline_aa_runs"]} == {"api"}


def test_without_a_token_prometheus_gets_a_401_not_the_login_page(
    store: Store, lab: dict[str, str]
) -> None:
    client = TestClient(create_app(store))
    for headers in ({}, {"Authorization": "Bearer hl_revoked-or-made-up"}):
        answer = client.get("/metrics", headers=headers)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.headers["content-type"].startswith("application/json")
        assert "hairline token create" in answer.json()["detail"]


def test_openmetrics_is_answered_when_asked_for(store: Store, lab: dict[str, str]) -> None:
    client = TestClient(create_app(store))
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    answer = client.get(
        "/metrics", headers={"Accept": accept, "Authorization": f"Bearer {lab['admin']}"}
    )
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/openmetrics-text")
    assert answer.text.endswith("# EOF\n")
    assert "hairline_verdicts_total{" in answer.text


def test_a_served_lab_counts_the_experiments_it_ran(
    web_lab: WebLab, web_runs: dict[str, int]
) -> None:
    """A real ``hairline serve`` over HTTP (uvicorn), after the session's A/B and A/A of
    the sample service: the scraped counts are the API's."""
    status, text, headers = http("GET", f"{web_lab.url}/metrics",
                                 token=web_lab.tokens["demo-read"])  # fmt: skip
    assert status == 200 and headers["content-type"].startswith("text/plain")
    found = samples(text_string_to_metric_families(text))
    for experiment_id in (web_runs["regression"], web_runs["aa"]):
        status, shown, _ = web_lab.request(
            "GET", f"/api/v1/experiments/{experiment_id}", token="demo-read"
        )
        assert status == 200 and shown["phase"] == "done", shown
    scraped = {
        (s.labels["kind"], s.labels["result"]): s.value
        for s in found["hairline_verdicts_total"] if s.labels["service"] == SERVICE
    }  # fmt: skip
    assert scraped.get(("ab", "regression"), 0) >= 1  # the 30% CPU regression
    store = open_store(web_lab.db_url, home=web_lab.home)  # the served lab's own database
    try:
        for kind in ("ab", "aa"):
            counted = stored_verdicts(store, SERVICE, kind, team="demo")
            assert {r: v for (k, r), v in scraped.items() if k == kind} == counted, kind
    finally:
        store.close()
    assert value(found, "hairline_aa_runs", service=SERVICE, metric="cpu_ns_per_request") >= 1
