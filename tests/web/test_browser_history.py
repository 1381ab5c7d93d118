"""A service's history with a change point, in a real headless Chromium against a real
`hairline serve` over a store filled as the lab leaves it: forty pull-request A/Bs of a
service, a lone regression the gate caught (a spike: not a change point) and, from the
twenty-sixth on, a drift of changes each +0.9% (below the 2% threshold: every verdict "no
change") that the page marks between the two commits where it starts.

The screenshot is written under the test's tmp_path (docs/img/dashboard-history-
changepoint.png is a copy).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_browser import chromium, shoot, signed_in
from weblab import served

from hairline.store.db import Store, open_store
from hairline.store.models import Arm, Experiment, Service, VerdictRow
from hairline.web.auth import create_token

pytestmark = pytest.mark.slow
__all__ = ["chromium"]  # the browser fixture, shared with test_browser.py

SERVICE = "checkout"
DRIFT_FROM = 25  # the first experiment (0-based) of the drift


def commit(i: int) -> str:
    return f"{(i * 2654435761) % 16**8:08x}"


def fill(store: Store) -> None:
    rng = np.random.default_rng(29)
    cpu = rng.normal(0.0, 0.004, 40)
    cpu[10] += 0.031  # one change that regressed: its own verdict says so
    cpu[DRIFT_FROM:] += 0.009
    latency = rng.normal(0.0, 0.006, 40)
    with store.transaction() as session:
        service = Service(name=SERVICE, created_at=0.0)
        session.add(service)
        session.flush()
        for i in range(40):
            at = 1.79e9 + 3600.0 * i
            e = Experiment(service_id=service.id, kind="ab", team="demo", phase="done",
                           progress="done", spec=json.dumps({"analysis": {"alpha": 0.05}}),
                           source_file="perf/experiment.toml", artifacts_dir="",
                           created_at=at, updated_at=at, finished_at=at + 600)  # fmt: skip
            session.add(e)
            session.flush()
            session.add(Arm(experiment_id=e.id, name="base", position=0,
                            source=f"git {commit(i - 1)} (hairline-base)"))  # fmt: skip
            session.add(Arm(experiment_id=e.id, name="head", position=1,
                            source=f"git {commit(i)}"))  # fmt: skip
            for metric, effect, half in (("cpu_ns_per_request", cpu[i], 0.008),
                                         ("p99_latency_ms", latency[i], 0.012)):  # fmt: skip
                low, high = effect - half, effect + half
                label = "regression" if low > 0.02 else "no change" if high < 0.02 else (
                    "inconclusive")  # fmt: skip
                session.add(
                    VerdictRow(experiment_id=e.id, metric=metric, candidate="head",
                               baseline="base", deciding=True, label=label,
                               model="trimmed-t-none", model_reason="fewest misses",
                               relative_effect=float(effect), ci_low=float(low),
                               ci_high=float(high), p_value=0.5, threshold="0.02 rel",
                               direction="higher-is-worse")
                )  # fmt: skip


def test_the_service_page_marks_a_drift_and_not_a_lone_regression(
    chromium: Any, tmp_path: Path
) -> None:
    """False failure: none: the history is fixed by its seed (its change points with it)."""
    home = tmp_path / "lab"
    db_url = f"sqlite:///{home / 'hairline.db'}"
    store = open_store(db_url, home=home)
    try:
        fill(store)
        token = create_token(store, name="reader", team="demo", scope="read")
    finally:
        store.close()
    with served(db_url, home, tmp_path / "serve.log", {"reader": token}) as lab:
        page = signed_in(chromium, lab, "reader")
        page.goto(f"{lab.url}/services/{SERVICE}")
        cpu, latency = page.locator("section.metric").all()
        assert cpu.locator("svg line.change").count() == 1
        assert latency.locator("svg line.change").count() == 0
        assert "No change point" in latency.inner_text()
        (row,) = cpu.locator("table.changes tbody tr").all()
        text = row.inner_text()
        # Placed within two experiments of where the drift starts (each of its changes is
        # 2.25 noise units): the last experiment before it and the first after, with the
        # commits their candidates were built from.
        before, after = (int(i) for i in re.findall(r"#(\d+) ", text))
        assert after == before + 1 and abs(after - (DRIFT_FROM + 1)) <= 2, text
        assert f"#{before} {commit(before - 1)}" in text and f"#{after} {commit(after - 1)}" in text
        assert "points" in text
        # The lone regression is drawn as a point, red, and is not a change point.
        assert cpu.locator("svg circle[fill='#b91c1c']").count() == 1
        shoot(page, tmp_path, "dashboard-history-changepoint")
        page.context.close()
