"""The A/A page's model choices scored in the background: the page never waits longer than
``wait_s``, says the runs are being scored (and asks again), and shows the choice once it
is there; a new A/A run is scored anew."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from webseed import observe, seed

from hairline.lab.results import aa_experiments, aa_model_choices
from hairline.store.db import Store
from hairline.web.aamodels import HistoryModels
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.deps import COOKIE


def aa_runs(store: Store, folder: Path, runs: int, *, at: float = 1.0e9) -> None:
    rng = np.random.default_rng(int(at) % 1000 + runs)
    for i in range(runs):
        observe(store, seed(store, kind="aa", trials=6, at=at + i), folder, rng=rng)


def test_the_choice_is_the_analysis_rules_and_is_kept_per_set_of_runs(
    store: Store, tmp_path: Path
) -> None:
    aa_runs(store, tmp_path, 4)
    models = HistoryModels(store, wait_s=60)
    try:
        scored = models.choices("api", alpha=0.05)
        assert scored is not None and scored.problem == ""
        ids = aa_experiments(store, "api")
        assert scored.models == aa_model_choices(store, "api", ids=ids, alpha=0.05)
        assert scored.models["cpu_ns_per_request"].runs == 4
        assert models.choices("api", alpha=0.05) is scored  # kept, not scored again
        aa_runs(store, tmp_path, 1, at=2.0e9)
        again = models.choices("api", alpha=0.05)
        assert again is not None and again.models["cpu_ns_per_request"].runs == 5
    finally:
        models.close()


def test_the_page_does_not_wait_for_a_long_scoring_and_says_so(
    store: Store, tmp_path: Path
) -> None:
    """False failure: none: the scoring thread is held by an event until the page has
    answered, then the test waits up to 60 s for the choice (about 0.3 s here)."""
    aa_runs(store, tmp_path, 3)
    app = create_app(store)
    models = HistoryModels(store, wait_s=0.05)
    app.state.aa_models = models
    client = TestClient(app)
    client.cookies.set(COOKIE, create_token(store, name="r", team="demo", scope="read"))
    # A scoring ahead of this one (another service's long history) holds the thread.
    held = threading.Event()
    models._pool.submit(held.wait)
    try:
        started = time.monotonic()
        page = client.get("/aa").text
        assert time.monotonic() - started < 5
        assert "scoring the A/A runs" in page and 'http-equiv="refresh"' in page
        held.set()
        deadline = time.monotonic() + 60
        while "scoring the A/A runs" in page and time.monotonic() < deadline:
            time.sleep(0.1)
            page = client.get("/aa").text
        assert "best of 3 A/A runs" in page and 'http-equiv="refresh"' not in page
    finally:
        held.set()
        models.close()
