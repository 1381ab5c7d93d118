"""`hairline history SERVICE` on a lab whose store holds a service's verdicts: each change
point with the commits either side, its size and p-value, as a table and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hairline.cli import main
from hairline.store.db import Store, open_store
from hairline.store.models import Arm, Experiment, Service, VerdictRow
from schema_check import check_schema


def finished_ab(store: Store, *, metric: str, effect: float, at: float, source: str) -> int:
    """One finished A/B of service api as the lab leaves it: its candidate arm B as built,
    and B's deciding verdict on ``metric``."""
    with store.transaction() as session:
        service = session.query(Service).filter_by(name="api").one_or_none()
        if service is None:
            service = Service(name="api", created_at=0.0)
            session.add(service)
            session.flush()
        e = Experiment(service_id=service.id, kind="ab", team="demo", phase="done", spec="{}",
                       source_file="f", artifacts_dir="", created_at=at, updated_at=at,
                       finished_at=at + 60)  # fmt: skip
        session.add(e)
        session.flush()
        session.add(Arm(experiment_id=e.id, name="B", position=1, source=source))
        session.add(
            VerdictRow(experiment_id=e.id, metric=metric, candidate="B", baseline="A",
                       deciding=True, label="no change", model="paired-t-none",
                       model_reason="fewest misses", relative_effect=effect,
                       ci_low=effect - 0.01, ci_high=effect + 0.01, p_value=0.5,
                       threshold="0.04 rel", direction="higher-is-worse")
        )  # fmt: skip
        return e.id


@pytest.fixture
def lab(tmp_path: Path) -> list[str]:
    """A SQLite lab: service api with 24 experiments of cpu (the last ten +2.5 points,
    noise 0.5), and a flat p99; its --db and --home."""
    home = tmp_path / "home"
    url = f"sqlite:///{home / 'hairline.db'}"
    store = open_store(url, home=home)
    effects = np.random.default_rng(7).normal(0.0, 0.005, 24)
    effects[14:] += 0.025
    try:
        for i, effect in enumerate(effects):
            finished_ab(store, metric="cpu", effect=float(effect), at=1.0e9 + i,
                        source=f"git {i:07x}a (main)")  # fmt: skip
        for i in range(12):
            finished_ab(store, metric="p99", effect=0.001 * (i % 3), at=2.0e9 + i,
                        source="path /src")  # fmt: skip
    finally:
        store.close()
    return ["--db", url, "--home", str(home)]


def test_history_marks_the_commit_range_size_and_p_value(lab: list[str]) -> None:
    done = CliRunner().invoke(main, ["history", "api", "--metric", "cpu", *lab])
    assert done.exit_code == 0, done.output
    assert "api · cpu: 24 experiments, #1 to #24, 1 change point(s)" in done.output
    assert "#14 000000da" in done.output and "#15 000000ea" in done.output
    assert "p99" not in done.output


def test_history_json_to_stdout_has_every_metric_and_each_change(lab: list[str]) -> None:
    done = CliRunner().invoke(main, ["history", "api", "--json", "-", *lab])
    assert done.exit_code == 0, done.output
    payload = json.loads(done.stdout)
    check_schema("history", payload)
    assert payload["schema"] == 1 and payload["service"] == "api"
    assert payload["settings"] == {"alpha": 0.005, "permutations": 399, "seed": 0, "limit": 100}
    by_metric = {m["metric"]: m for m in payload["metrics"]}
    assert by_metric["p99"]["changes"] == [] and len(by_metric["p99"]["experiments"]) == 12
    (change,) = by_metric["cpu"]["changes"]
    assert change["last_before"]["experiment_id"] == 14
    assert change["last_before"]["commit"] == "000000da"
    after = change["first_after"]
    assert after == {
        "experiment_id": 15, "candidate": "B", "commit": "000000ea",
        "source": "git 000000ea (main)", "relative_effect": after["relative_effect"],
    }  # fmt: skip
    assert 0.02 < change["size"] < 0.03 and change["p_value"] <= 0.005
    assert change["size"] == pytest.approx(change["after"] - change["before"])


def test_history_json_to_a_file_and_the_same_answer_twice(lab: list[str], tmp_path: Path) -> None:
    out = tmp_path / "h.json"
    first = CliRunner().invoke(main, ["history", "api", "--json", str(out), *lab])
    assert first.exit_code == 0 and f"wrote {out}" in first.output
    again = CliRunner().invoke(main, ["history", "api", "--json", "-", *lab])
    assert json.loads(out.read_text()) == json.loads(again.stdout)


def test_an_unknown_service_or_metric_exits_2_with_a_hint(lab: list[str]) -> None:
    nothing = CliRunner().invoke(main, ["history", "nope", *lab])
    assert nothing.exit_code == 2 and "no experiment of service 'nope'" in nothing.output
    metric = CliRunner().invoke(main, ["history", "api", "--metric", "p50", *lab])
    assert metric.exit_code == 2 and "no verdict on 'p50'" in metric.output
    assert "its metrics: cpu, p99" in metric.output
