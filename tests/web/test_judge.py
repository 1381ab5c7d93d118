"""The gate as progressive-delivery tools ask it (web/judge.py): Argo Rollouts' web provider
reading the documented AnalysisTemplates' JSON paths and conditions, Flagger's webhook
call, the score's query parameters and the wait for a running experiment. In-process
against the real app (TestClient) over a real database; tests/web/test_delivery_providers.py
does the same against a real `hairline serve` with real experiments."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from delivery import Send, argo_measure, flagger_call
from fastapi.testclient import TestClient
from webseed import seed

from hairline.store.db import Store
from hairline.store.models import Experiment, VerdictRow
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.judge import delivery_gate, flagger_request, parse_weights, settled
from hairline.web.limits import MAX_WEBHOOK_BYTES
from hairline.web.queries import Gate, GateRegression
from schema_check import check_api

EXAMPLES = Path(__file__).parents[2] / "examples"


def argo_metric(name: str) -> dict[str, Any]:
    """A metric of examples/argo/analysis-templates.yaml, as the user would apply it."""
    for doc in yaml.safe_load_all((EXAMPLES / "argo" / "analysis-templates.yaml").read_text()):
        for metric in doc["spec"]["metrics"]:
            if metric["name"] == name:
                return dict(metric)
    raise KeyError(name)


def flagger_hook() -> dict[str, Any]:
    canary = yaml.safe_load((EXAMPLES / "flagger" / "canary.yaml").read_text())
    (hook,) = canary["spec"]["analysis"]["webhooks"]
    return dict(hook)


def through(client: TestClient) -> Send:
    """Argo's or Flagger's request, sent to the app in-process whatever its host (in
    process, the tool's timeout has nothing to cut)."""

    def send(method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout_s: float) -> tuple[int, bytes]:  # fmt: skip
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        answer = client.request(method, path, headers=dict(headers), content=body)
        if "json" in answer.headers.get("content-type", ""):
            check_api(method, parts.path, answer.status_code, answer.json())
        return answer.status_code, answer.content

    return send


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(store)) as client:
        yield client


@pytest.fixture
def tokens(store: Store) -> dict[str, str]:
    return {name: create_token(store, name=name, team=team, scope="read")
            for name, team in [("argo", "demo"), ("theirs", "other")]}  # fmt: skip


def add_verdict(store: Store, experiment_id: int, metric: str, label: str,
                direction: str = "higher-is-worse") -> None:  # fmt: skip
    with store.transaction() as session:
        session.add(VerdictRow(
            experiment_id=experiment_id, metric=metric, candidate="B", baseline="A",
            deciding=True, label=label, model="paired-t-none", model_reason="fewest misses",
            relative_effect=0.0, ci_low=-0.01, ci_high=0.01, p_value=0.5,
            threshold="0.02 rel", direction=direction,
        ))  # fmt: skip


def with_score(store: Store, experiment_id: int, score: dict[str, Any]) -> None:
    """The experiment's file had ``[analysis.score]`` = ``score``."""
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        spec = json.loads(row.spec)
        spec["analysis"]["score"] = score
        row.spec = json.dumps(spec)


def finish(store: Store, experiment_id: int) -> None:
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        row.phase, row.finished_at = "done", time.time()
    add_verdict(store, experiment_id, "cpu_ns_per_request", "no change")


def test_gate_is_one_word_a_delivery_tool_acts_on() -> None:
    def gate(answer: str, *, triage: str | None = "x", regressions: int = 0) -> Gate:
        found = tuple(GateRegression("cpu", "B", "A", 0.1, 0.05, 0.15, triage)
                      for _ in range(regressions))  # fmt: skip
        return Gate(1, answer, "done", "", "", found)

    assert delivery_gate(gate("pass"), None, "gate") == "pass"
    assert delivery_gate(gate("fail", triage=None, regressions=1), None, "gate") == "fail"
    # Failing only by inconclusive verdicts (or by a regression of which only an ignored
    # one is left: impossible, the answer is then pass) is for a person to judge.
    assert delivery_gate(gate("fail"), None, "gate") == "inconclusive"
    assert delivery_gate(gate("pending"), None, "score") == "pending"
    assert delivery_gate(gate("error"), None, "gate") == "error"
    # Judged by score, a gate without a scorecard (nothing to score) is inconclusive.
    assert delivery_gate(gate("pass"), None, "score") == "inconclusive"


def test_argo_measures_pass_fail_and_inconclusive_as_the_template_says(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    passing = seed(store, label="no change")
    failing = seed(store, label="regression", effect=0.05)
    unsure = seed(store, label="inconclusive", effect=0.01)  # the default policy: fail
    failed = seed(store, phase="failed")
    metric = argo_metric("hairline-gate")
    args = {"hairline-url": "http://hairline.test", "hairline-token": tokens["argo"]}

    def measured(experiment_id: int) -> tuple[str, Any]:
        m = argo_measure(metric, {**args, "experiment": str(experiment_id)}, send=through(client))
        return m.phase, m.value

    assert measured(passing) == ("Successful", "pass")
    assert measured(failing) == ("Failed", "fail")
    assert measured(unsure) == ("Inconclusive", "inconclusive")
    assert measured(failed) == ("Inconclusive", "error")
    # Another team's experiment is a 403, which Argo takes as an Error measurement.
    theirs = {**args, "experiment": str(passing), "hairline-token": tokens["theirs"]}
    other = argo_measure(metric, theirs, send=through(client))
    assert (other.phase, other.status) == ("Error", 403)


def test_a_running_experiment_is_waited_for_then_judged(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    """The template's request waits (wait_s) while the experiment runs, and answers once it
    has ended; a wait that runs out answers pending, which Argo takes as Inconclusive.

    False failure: none expected: the thread that ends the experiment after 0.3 s would
    have to be held back for the rest of the 60 s wait."""
    running = seed(store, phase="running", label="no change")
    metric = argo_metric("hairline-gate")
    args = {"hairline-url": "http://hairline.test", "hairline-token": tokens["argo"],
            "experiment": str(running)}  # fmt: skip
    short = {**metric, "provider": {"web": {**metric["provider"]["web"], "url":
             metric["provider"]["web"]["url"].replace("wait_s=540", "wait_s=0.2")}}}  # fmt: skip
    ran_out = argo_measure(short, args, send=through(client))
    assert (ran_out.phase, ran_out.value) == ("Inconclusive", "pending")

    ender = threading.Timer(0.3, finish, args=(store, running))
    ender.start()
    started = time.monotonic()
    waited = argo_measure(metric, args, send=through(client))
    ender.join()
    assert (waited.phase, waited.value) == ("Successful", "pass")
    assert time.monotonic() - started < 60


def test_settled_asks_until_the_deadline_without_a_busy_loop() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    asked = []

    def ask() -> Gate:
        asked.append(now[0])
        return Gate(1, "pending" if now[0] < 2.5 else "pass", "running", "", "", ())

    gate = asyncio.run(settled(ask, 10.0, poll_s=1.0, clock=lambda: now[0], sleep=sleep))
    assert gate.answer == "pass" and asked == [0.0, 1.0, 2.0, 3.0]
    gone = asyncio.run(settled(lambda: Gate(1, "pending", "", "", "", ()), 2.5, poll_s=1.0,
                               clock=lambda: now[0], sleep=sleep))  # fmt: skip
    assert gone.answer == "pending" and slept[-3:] == [1.0, 1.0, 0.5]


def test_the_score_judges_by_the_files_groups_and_the_requests_settings(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    """cpu 100 (1 of 1) at weight 3, memory 50 (1 of 2) at weight 1: 87.5, marginal."""
    experiment = seed(store, label="no change")
    add_verdict(store, experiment, "anon_memory_bytes", "regression")
    add_verdict(store, experiment, "peak_memory_bytes", "improvement")
    with_score(store, experiment, {"groups": {
        "cpu": {"weight": 3, "metrics": ["cpu_ns_per_request"]},
        "memory": {"weight": 1, "metrics": ["*_memory_bytes"]},
    }})  # fmt: skip
    auth = {"Authorization": f"Bearer {tokens['argo']}"}

    def ask(query: str) -> dict[str, Any]:
        answer = client.get(f"/api/v1/experiments/{experiment}/gate?{query}", headers=auth)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    plain = ask("")
    assert (plain["answer"], plain["gate"], plain["score"]) == ("fail", "fail", 87.5)
    card = plain["scorecard"]
    assert card["result"] == "marginal" and card["ungrouped"] == []
    rows = [(m["metric"], m["group"], m["classification"], m["passed"]) for m in card["metrics"]]
    assert rows == [
        ("cpu_ns_per_request", "cpu", "pass", True),
        ("anon_memory_bytes", "memory", "high", False),
        ("peak_memory_bytes", "memory", "low", True),
    ]  # fmt: skip
    assert ask("judge=score")["gate"] == "inconclusive"  # marginal: for a person to judge
    heavier = ask("judge=score&weights=cpu:1,memory:3")  # (100 + 150) / 4
    assert (heavier["score"], heavier["gate"]) == (62.5, "fail")
    assert ask("judge=score&pass_score=80&marginal_score=50")["gate"] == "pass"
    # The documented score template: 87.5 is neither >= 95 nor < 75.
    measured = argo_measure(
        argo_metric("hairline-score"),
        {"hairline-url": "http://x", "hairline-token": tokens["argo"],
         "experiment": str(experiment)}, send=through(client),
    )  # fmt: skip
    assert measured.phase == "Inconclusive" and measured.value["score"] == 87.5


def test_a_bad_score_query_is_a_422_that_names_the_fix(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    experiment = seed(store)
    with_score(store, experiment, {"groups": {"cpu": {"metrics": ["cpu_*"]}}})
    auth = {"Authorization": f"Bearer {tokens['argo']}"}

    def refused(query: str) -> dict[str, Any]:
        answer = client.get(f"/api/v1/experiments/{experiment}/gate?{query}", headers=auth)
        assert answer.status_code == 422, answer.text
        body: dict[str, Any] = answer.json()
        return body

    unknown = refused("weights=gpu:2")
    assert "no score group 'gpu'" in unknown["error"] and "are: cpu" in unknown["hint"]
    assert "'cpu' is not GROUP:WEIGHT" in refused("weights=cpu")["error"]
    assert "not valid" in refused("pass_score=50&marginal_score=60")["error"]
    assert "groups.cpu.weight: Input should be less" in refused("weights=cpu:1e7")["error"]
    assert refused("judge=vote")["problems"][0]["field"] == "query.judge"
    assert refused("wait_s=601")["problems"][0]["field"] == "query.wait_s"
    assert parse_weights(" cpu:3, memory:0.5 ,") == {"cpu": 3.0, "memory": 0.5}


def test_flagger_goes_on_only_when_the_gate_passes(
    store: Store, client: TestClient, tokens: dict[str, str]
) -> None:
    """Flagger sends no Authorization header: the token comes in the webhook's metadata."""
    passing = seed(store, label="no change")
    failing = seed(store, label="regression", effect=0.05)
    running = seed(store, phase="running")
    hook = flagger_hook()

    def call(**metadata: str) -> tuple[bool, int, dict[str, Any]]:
        with_metadata = {**hook, "metadata": {**hook["metadata"], "wait_s": "0", **metadata}}
        ok, status, body = flagger_call(with_metadata, name="feed", namespace="prod",
                                        send=through(client))  # fmt: skip
        return ok, status, json.loads(body)

    ok, status, body = call(experiment=str(passing), token=tokens["argo"])
    assert (ok, status, body["gate"]) == (True, 200, "pass")
    ok, status, body = call(experiment=str(failing), token=tokens["argo"])
    assert (ok, status, body["gate"]) == (False, 412, "fail")
    assert body["error"].startswith(f"experiment {failing} does not pass: fail: 1 regression")
    ok, status, body = call(experiment=str(running), token=tokens["argo"])
    assert (ok, status, body["gate"]) == (False, 409, "pending")
    assert "metadata.wait_s" in body["hint"]
    # Refused: the placeholder token, another team's, a misspelt key, no experiment.
    assert call(experiment=str(passing))[1] == 401
    assert call(experiment=str(passing), token=tokens["theirs"])[1] == 403
    ok, status, body = call(experiment=str(passing), token=tokens["argo"], wieghts="cpu:1")
    assert status == 422 and "unknown key(s) wieghts" in body["error"]
    ok, status, body = call(experiment="latest", token=tokens["argo"])
    assert (
        status == 422 and body["error"] == "metadata.experiment: 'latest' is not an experiment id"
    )
    assert call(experiment="999999", token=tokens["argo"])[1] == 404


def test_flagger_metadata_is_typed_and_an_authorization_header_wins() -> None:
    experiment, query, token = flagger_request(
        {"experiment": "42", "token": "hl_meta", "judge": "score", "wait_s": "30"}, "hl_header"
    )
    assert (experiment, query.judge, query.wait_s, token) == (42, "score", 30.0, "hl_header")
    with pytest.raises(Exception, match=r"metadata\.wait_s: Input should be less than or equal"):
        flagger_request({"experiment": "42", "wait_s": "3600"}, None)


def test_a_webhook_body_is_read_without_a_header_token_but_only_a_small_one(
    client: TestClient,
) -> None:
    big = json.dumps({"metadata": {"note": "x" * MAX_WEBHOOK_BYTES}})
    answer = client.post("/api/v1/webhooks/flagger", content=big,
                         headers={"Content-Type": "application/json"})  # fmt: skip
    assert answer.status_code == 413
    # Any other API body without a token is refused before it is read.
    assert client.post("/api/v1/events", json={}).status_code == 401
