"""API answers keep the server's file system to itself: an experiment's progress, failure
and gate reason name its logs relative to the lab's folder."""

from __future__ import annotations

from fastapi.testclient import TestClient
from webseed import seed

from hairline.store.db import Store
from hairline.store.models import Experiment
from hairline.web.app import create_app
from hairline.web.auth import create_token


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
    shown = client.get(f"/api/v1/experiments/{failed}", headers=auth).json()
    listed = client.get("/api/v1/experiments", headers=auth).json()["items"][0]
    gate = client.get(f"/api/v1/experiments/{failed}/gate", headers=auth).json()
    relative = f"experiments/{failed}/runs/t0b0a1-A.log"
    for answer in (shown, listed):
        assert answer["failure"] == f"the arm exited (code 1); its log {relative}"
        assert answer["progress"] == f"failed: see {relative}"
    assert relative in gate["reason"] and str(store.home) not in str(gate)
