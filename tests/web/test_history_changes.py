"""Change points on a service's history: found in the stored verdicts, placed between the
right experiments with their commits, drawn on the service page's chart and listed under
it."""

from __future__ import annotations

import re

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import update
from webseed import seed

from hairline.store.db import Store
from hairline.store.models import Arm
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.changes import metric_changes
from hairline.web.deps import COOKIE
from hairline.web.pagedata import HistoryPoint, metric_history
from hairline.web.svg import history_svg

# Thirty experiments, the last twelve 3 points worse (noise 0.5 points): a regression
# below a 4% threshold that no single verdict calls one.
EFFECTS = np.round(np.random.default_rng(29).normal(0.0, 0.005, 30), 4)
EFFECTS[18:] += 0.03


def seeded_history(store: Store) -> list[int]:
    ids = [seed(store, effect=float(e), at=1.0e9 + i) for i, e in enumerate(EFFECTS)]
    with store.transaction() as session:
        for i, eid in enumerate(ids):
            session.add(Arm(experiment_id=eid, name="A", position=0, source="git 00000000"))
            session.add(Arm(experiment_id=eid, name="B", position=1, source=f"git {i:08x} (main)"))
    return ids


def point(eid: int, effect: float | None) -> HistoryPoint:
    return HistoryPoint(eid, float(eid), "B", "no change", effect, None, None, 0.02,
                        "higher-is-worse", "path /src")  # fmt: skip


def test_a_change_is_found_between_the_right_experiments_and_commits(store: Store) -> None:
    ids = seeded_history(store)
    history = metric_history(store, "api", None)
    points = history["cpu_ns_per_request"]
    assert points[5].commit == "00000005" and points[5].source == "git 00000005 (main)"
    (change,) = metric_changes(points)
    assert change.index == 18
    assert change.last_before.experiment_id == ids[17] and change.last_before.commit == "00000011"
    assert change.first_after.experiment_id == ids[18] and change.first_after.commit == "00000012"
    assert abs(change.size - 0.03) < 0.005 and change.p_value <= 0.005


def test_points_without_an_effect_are_left_out_and_never_border_a_change() -> None:
    effects: list[float | None] = [0.0, 0.001, -0.001, 0.0005, None, 0.0, -0.0005, 0.001]
    effects += [0.05, 0.051, None, 0.049, 0.05, 0.052, 0.048, 0.05]
    points = [point(i + 1, e) for i, e in enumerate(effects)]
    (change,) = metric_changes(points)
    assert (change.last_before.experiment_id, change.first_after.experiment_id) == (8, 9)
    assert points[0].commit is None  # a path source has no commit


def test_the_chart_marks_each_change_and_each_levels_median() -> None:
    points = [point(i + 1, 0.0 if i < 10 else 0.04) for i in range(20)]
    changes = metric_changes(points)
    svg = history_svg("cpu", points, changes)
    assert svg.count('class="change"') == 1 and svg.count('class="level"') == 2
    assert "between experiment 10 and 11: +4.00 points" in svg
    assert "<svg" in history_svg("cpu", points) and 'class="change"' not in history_svg(
        "cpu", points
    )


def test_the_service_page_draws_and_lists_the_change_point(store: Store) -> None:
    ids = seeded_history(store)
    client = TestClient(create_app(store))
    client.cookies.set(COOKIE, create_token(store, name="r", team="demo", scope="read"))
    page = client.get("/services/api").text
    assert page.count('class="change"') == 1
    (row,) = re.findall(r'<table class="changes">.*?</table>', page, flags=re.DOTALL)
    assert f'href="/experiments/{ids[17]}"' in row and "<code>00000011</code>" in row
    assert f'href="/experiments/{ids[18]}"' in row and "<code>00000012</code>" in row
    assert re.search(r"\+\d\.\d\d points", row)
    # Without the candidate's arm row (experiments from before arms were kept) the page
    # still lists the change, by experiment.
    with store.transaction() as session:
        session.execute(update(Arm).values(source="the service's start command"))
    page = client.get("/services/api").text
    assert "<code>" not in re.findall(r'<table class="changes">.*?</table>', page, re.DOTALL)[0]
