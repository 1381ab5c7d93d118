"""The dashboard's pages over a real database (SQLite and PostgreSQL) filled with rows as
the lab writes them, through the application in-process: who sees what, the list's paging
and live rows, triage and its audit trail, A/A health and a service's history, and the
host facts of an experiment's arms.

The pages with a real run behind them (an experiment's report, live progress in a
browser) are tested in test_browser.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from webseed import observe, seed

from hairline.lab.analysis import AnalysisOptions, analyze
from hairline.lab.results import aa_history, experiment_observations
from hairline.store.db import Store
from hairline.store.models import Arm, Host, Run, Trial
from hairline.store.observations import observations_from_table
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.deps import COOKIE
from hairline.web.pagedata import experiment_hosts
from hairline.web.queries import gate_of
from hairline.web.views_experiments import PAGE_SIZE


@pytest.fixture
def tokens(store: Store) -> dict[str, str]:
    return {
        name: create_token(store, name=name, team=team, scope=scope)
        for name, team, scope in [("admin", "ops", "admin"), ("demo-read", "demo", "read"),
                                  ("demo-submit", "demo", "submit"),
                                  ("demo-triage", "demo", "triage"),
                                  ("other-submit", "other", "submit"),
                                  ("other-triage", "other", "triage")]
    }  # fmt: skip


@pytest.fixture
def client(store: Store) -> TestClient:
    return TestClient(create_app(store))


def browser(client: TestClient, tokens: dict[str, str], name: str) -> TestClient:
    client.cookies.set(COOKIE, tokens[name])
    return client


def test_a_browser_without_a_token_gets_the_login_form_then_its_page(
    client: TestClient, tokens: dict[str, str]
) -> None:
    answer = client.get("/regressions?triaged=1")
    assert answer.status_code == 401 and 'name="token"' in answer.text
    assert 'value="/regressions?triaged=1"' in answer.text  # where it goes after
    wrong = client.post("/login", data={"token": "hl_nope", "next": "/aa"})
    assert wrong.status_code == 401 and "unknown or revoked" in wrong.text
    signed = client.post(
        "/login", data={"token": tokens["demo-read"], "next": "/aa"}, follow_redirects=False
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/aa"
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert client.get("/aa").status_code == 200
    client.post("/logout", follow_redirects=False)
    assert client.get("/aa").status_code == 401


def test_the_api_keeps_answering_json_without_a_token(client: TestClient) -> None:
    answer = client.get("/api/v1/experiments")
    assert answer.status_code == 401 and answer.headers["content-type"].startswith(
        "application/json"
    )


def test_a_team_sees_its_own_experiments_and_an_admin_every_team(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    mine, theirs = seed(store, team="demo"), seed(store, team="other")
    page = browser(client, tokens, "demo-read").get("/experiments").text
    assert f'id="experiment-{mine}"' in page and f'id="experiment-{theirs}"' not in page
    assert client.get(f"/experiments/{theirs}").status_code == 404  # not even its existence
    everyone = browser(client, tokens, "admin").get("/experiments").text
    assert f'id="experiment-{theirs}"' in everyone


def test_the_list_pages_by_keyset_and_polls_only_while_something_runs(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    ids = [seed(store, at=1.0e9 + i) for i in range(PAGE_SIZE + 2)]
    browser(client, tokens, "demo-read")
    first = client.get("/experiments").text
    older = re.search(r'class="older" href="([^"]+)"', first)
    assert older is not None and f"before={ids[2]}" in older.group(1).replace("&amp;", "&")
    second = client.get(older.group(1).replace("&amp;", "&")).text
    assert re.findall(r'id="experiment-(\d+)"', second) == [str(ids[1]), str(ids[0])]
    assert "hx-trigger" not in first  # nothing active: no polling
    running = seed(store, phase="running", at=2.0e9)
    rows = client.get("/experiments/rows").text
    assert 'hx-trigger="every 2s"' in rows and f'id="experiment-{running}"' in rows
    assert 'data-phase="running"' in rows


def test_filters_narrow_the_list_and_a_bad_one_is_named(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    failing = seed(store, label="regression", effect=0.05)
    passing = seed(store, service="web")
    browser(client, tokens, "demo-read")
    listed = client.get("/experiments?verdict=fail").text
    assert f'id="experiment-{failing}"' in listed and f'id="experiment-{passing}"' not in listed
    by_service = client.get("/experiments?service=web").text
    assert re.findall(r'id="experiment-(\d+)"', by_service) == [str(passing)]
    bad = client.get("/experiments?since=yesterday")
    assert bad.status_code == 422 and "since" in bad.text and "YYYY-MM-DD" in bad.text


def test_acknowledging_a_regression_is_stored_audited_and_kept_failing(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    failing = seed(store, label="regression", effect=0.05)
    form = {"experiment_id": str(failing), "metric": "cpu_ns_per_request", "candidate": "B",
            "note": "known: new parser"}  # fmt: skip
    reader = browser(client, tokens, "demo-read")
    page = reader.get("/regressions").text
    assert f"/experiments/{failing}" in page and "acknowledge" not in page  # read: no buttons
    assert reader.post("/regressions/triage", data={**form, "state": "ignored"}).status_code == 403
    # The token that submits an experiment cannot wave its regression through.
    submitter = browser(client, tokens, "demo-submit")
    assert "acknowledge" not in submitter.get("/regressions").text
    denied = submitter.post("/regressions/triage", data={**form, "state": "ignored"})
    assert denied.status_code == 403 and "needs &#39;triage&#39;" in denied.text
    outsider = browser(client, tokens, "other-triage")
    refused = outsider.post("/regressions/triage", data={**form, "state": "ignored"})
    assert refused.status_code == 422 and "may see" in refused.text
    triager = browser(client, tokens, "demo-triage")
    assert "acknowledge" in triager.get("/regressions").text
    why = triager.post("/regressions/triage", data={**form, "note": " ", "state": "ignored"})
    assert why.status_code == 422 and "say why" in why.text
    done = triager.post("/regressions/triage", data={**form, "state": "acknowledged"})
    assert done.status_code == 200  # followed back to the list
    assert f'href="/experiments/{failing}"' not in done.text.split("<h2>Audit trail")[0]
    assert "triage.acknowledged" in done.text and "known: new parser" in done.text
    shown = triager.get("/regressions?triaged=1").text
    assert "t-acknowledged" in shown and "by demo-triage" in shown
    assert gate_of(store, failing).answer == "fail"  # acknowledged still blocks a release
    triager.post("/regressions/triage", data={**form, "state": "ignored"})
    gate = gate_of(store, failing)
    assert gate.answer == "pass" and "1 regression(s) ignored by triage" in gate.reason


def test_aa_health_counts_false_positives_in_the_window(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    labels = ["no change"] * 6 + ["improvement", "regression", "regression", "inconclusive"]
    for i, label in enumerate(labels):
        seed(store, kind="aa", label=label, at=1.0e9 + i)
    seed(store, model="trimmed-t-none", at=2.0e9)
    page = browser(client, tokens, "demo-read").get("/aa").text
    assert "3 of 10 (30.00%)" in page  # improvement and both regressions
    assert "0–2" in page  # Binomial(10, 0.05)'s 95% range
    assert 'class="above"' in page  # 3 > 2: the model is looser than alpha
    # Rows without observations files leave adaptive selection nothing to score: the page
    # says so, and does not pass off the newest A/B's model as the A/A history's choice.
    assert "trimmed-t-none" not in page and "kept no observations" in page
    assert page.count("<svg") == 1


def test_aa_health_names_the_model_the_analysis_chooses_from_the_aa_runs(
    store: Store, client: TestClient, tokens: dict[str, str], tmp_path: Path
) -> None:
    """False failure: none: every value is drawn from a seeded generator."""
    rng = np.random.default_rng(31)
    for i in range(8):
        aa = seed(store, kind="aa", trials=6, at=1.0e9 + i)
        observe(store, aa, tmp_path, rng=rng)
    # The newest A/B's verdict row names a model adaptive selection cannot pick here (these
    # runs have no host column): what the old page showed, and wrongly.
    ab = seed(store, model="bootstrap-host", trials=6, at=2.0e9)
    observe(store, ab, tmp_path, rng=rng, effect=0.03)
    page = browser(client, tokens, "demo-read").get("/aa").text
    (cell,) = re.findall(r'<td class="l model">(.*?)</td>', page, flags=re.S)
    # The model the A/B's own analysis chooses with this A/A history (lab/analysis.py).
    table = experiment_observations(store, ab)
    assert table is not None
    analysed = analyze(
        observations_from_table(table, source="ab"), AnalysisOptions(alpha=0.05),
        history=aa_history(store, "api", exclude=ab),
    )  # fmt: skip
    (result,) = analysed.results
    assert result.model_reason == "adaptive: best of 8 A/A runs"
    assert f"<code>{result.model}</code>" in cell and "best of 8 A/A runs" in cell
    assert "bootstrap-host" not in page
    # Kept until the service's set of A/A runs changes: a ninth run is scored anew.
    nine = seed(store, kind="aa", trials=6, at=1.5e9)
    observe(store, nine, tmp_path, rng=rng)
    assert "best of 9 A/A runs" in client.get("/aa").text


def test_a_service_page_draws_each_metric_over_its_experiments(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    ids = [seed(store, effect=e, at=1.0e9 + i) for i, e in enumerate((0.0, 0.004, 0.03))]
    seed(store, metric="p99_latency_ms", effect=0.01)
    seed(store, team="other", effect=0.5)  # another team's: not drawn for demo
    page = browser(client, tokens, "demo-read").get("/services/api").text
    assert page.count("<svg") == 2 and "p99_latency_ms" in page
    assert all(f'href="/experiments/{i}"' in page for i in ids)
    assert "+50.00%" not in page
    assert client.get("/services/nothing").status_code == 404


def test_host_facts_are_side_by_side_with_the_differing_ones_marked(store: Store) -> None:
    experiment = seed(store)
    facts = [{"cpu_model": "EPYC 7B13", "kernel": "6.1", "turbo": "off"},
             {"cpu_model": "EPYC 7B13", "kernel": "6.8", "turbo": "off"}]  # fmt: skip
    with store.transaction() as session:
        hosts = [Host(name=f"m/cpu{i}", backend="local", machine="m", cpus=str(i),
                      facts=json.dumps(f)) for i, f in enumerate(facts)]  # fmt: skip
        session.add_all(hosts)
        session.flush()
        for batch in (0, 1):
            for arm, host in zip("AB", hosts if batch == 0 else hosts[::-1], strict=True):
                session.add(
                    Run(experiment_id=experiment, trial=0, batch=batch, arm=arm,
                        host_id=host.id, host_index=0, processor="p",
                        facts=host.facts, started_at=1.0)
                )  # fmt: skip
    groups = experiment_hosts(store, experiment)
    assert [g.batches for g in groups] == [((0, 0),), ((0, 1),)]  # the swap: two groups
    first = groups[0]
    assert first.arms == ("A", "B") and first.hosts == ("m/cpu0", "m/cpu1")
    assert dict(first.facts)["kernel"] == ("6.1", "6.8")
    assert first.differ == {"kernel"}


def test_a_build_log_is_served_from_the_recorded_path_only(
    store: Store, client: TestClient, tokens: dict[str, str], tmp_path: Path
) -> None:
    mine, theirs = seed(store), seed(store, team="other")
    log = tmp_path / "build-a.log"
    log.write_text("cargo build --release\n    Finished release\n")
    with store.transaction() as session:
        for experiment in (mine, theirs):
            session.add_all([
                Arm(experiment_id=experiment, name="A", position=0, source="path .",
                    build_log=str(log)),
                Arm(experiment_id=experiment, name="B", position=1, source="path ."),
            ])  # fmt: skip
    browser(client, tokens, "demo-read")
    served = client.get(f"/experiments/{mine}/build-log/A")
    assert served.status_code == 200 and "Finished release" in served.text
    assert served.headers["content-type"].startswith("text/plain")
    assert client.get(f"/experiments/{mine}/build-log/B").status_code == 404  # none recorded
    assert client.get(f"/experiments/{mine}/build-log/..%2F..%2Fetc%2Fpasswd").status_code == 404
    assert client.get(f"/experiments/{theirs}/build-log/A").status_code == 404  # other team


def test_the_services_page_is_a_table_of_counts_last_runs_and_open_regressions(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    seed(store, service="api", kind="aa", at=1.0e9)
    seed(store, service="api", label="regression", effect=0.05, at=1.1e9)
    triaged = seed(store, service="api", label="regression", effect=0.04, at=1.2e9)
    seed(store, service="api", label="regression", effect=0.06, at=1.3e9, origin="bisect")
    last = seed(store, service="api", phase="running", at=1.4e9)
    seed(store, service="web", at=1.0e9)
    seed(store, service="secret", team="other", at=1.0e9)
    reader = browser(client, tokens, "demo-triage")
    answer = reader.post(
        "/regressions/triage",
        data={"experiment_id": triaged, "metric": "cpu_ns_per_request", "candidate": "B",
              "state": "acknowledged", "note": "expected"},
        follow_redirects=False,
    )  # fmt: skip
    assert answer.status_code == 303
    page = reader.get("/services").text
    rows = dict(re.findall(r'<tr id="service-(\w+)"[^>]*>(.*?)</tr>', page, flags=re.S))
    assert set(rows) == {"api", "web"}  # another team's service is not shown
    cells = [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in re.findall(
        r"<td[^>]*>(.*?)</td>", rows["api"], flags=re.S)]  # fmt: skip
    # experiments, finished A/A runs, the newest (running), open regressions: the one
    # untriaged (the acknowledged one and the bisection's step are not open).
    assert cells[1:3] == ["5", "1"]
    assert cells[3].startswith(f"#{last} running")
    assert cells[4] == "1"
    assert (
        'href="/services/api"' in rows["api"] and 'href="/experiments?service=api"' in rows["api"]
    )
    assert re.findall(r"<td[^>]*>(.*?)</td>", rows["web"], flags=re.S)[4] == "0"


def test_the_status_line_counts_trials_as_the_list_and_the_report_do(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    fixed = seed(store, trials=7)
    sequential = seed(store, trials=10)
    with store.transaction() as session:
        for experiment, states in (
            (fixed, {6: "excluded"}),
            (sequential, {4: "excluded", **dict.fromkeys(range(6, 10), "skipped")}),
        ):
            for trial in session.query(Trial).filter_by(experiment_id=experiment):
                trial.state = states.get(trial.index, trial.state)  # fmt: skip
    reader = browser(client, tokens, "demo-read")
    line = reader.get(f"/experiments/{fixed}/live").text
    # The page: "6 of 7 trials" in the report beside "7 trial(s) ended" here.
    assert "6 of 7 trials done, 1 left out (spoiled in every attempt)" in line
    assert "ended" not in line
    line = reader.get(f"/experiments/{sequential}/live").text
    assert "5 of 6 trials done, 1 left out (spoiled in every attempt), 4 more not needed" in line
    assert re.search(rf'<tr id="experiment-{fixed}".*?<td[^>]*>6/7</td>', reader.get(
        "/experiments").text, flags=re.S)  # fmt: skip
