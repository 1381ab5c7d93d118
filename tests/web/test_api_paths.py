"""API answers keep the server's file system to itself: an experiment's progress, failure
and gate reason name its logs relative to the lab's folder."""

from __future__ import annotations

from fastapi.testclient import TestClient
from webseed import seed

from hairline.store.db import Store
from hairline.store.models import Experiment
from hairline.web.app import create_app
from hairline.web.auth import create_token
from schema_check import check_api


def test_a_failures_paths_are_relative_to_the_lab(store: Store) -> None:
    failed = seed(store, phase="failed")
    log = store.home / "experiments" / str(failed) / "runs" / "t0b0a1-A.log"
    with store.transaction() as session:
        row = session.get(Experiment, failed)
        assert row is not None
        row.failure = f"the arm exited (code 1); its log {log}"
        row.progress = f"failed: see {log}"
    token = create_token(store, name="r", team="demo", scope="read")
    client = TestClient(create_app(store))
    auth = {"Authorization": f"Bearer {token}"}
    answers = {
        path: client.get(path, headers=auth)
        for path in (f"/api/v1/experiments/{failed}", "/api/v1/experiments",
                     f"/api/v1/experiments/{failed}/gate")
    }  # fmt: skip
    for path, answer in answers.items():
        check_api("GET", path, answer.status_code, answer.json())
    shown, listing, gate = (a.json() for a in answers.values())
    listed = listing["items"][0]
    relative = f"experiments/{failed}/runs/t0b0a1-A.log"
    for answer in (shown, listed):
        assert answer["failure"] == f"the arm exited (code 1); its log {relative}"
        assert answer["progress"] == f"failed: see {relative}"
    assert relative in gate["reason"] and str(store.home) not in str(gate)
