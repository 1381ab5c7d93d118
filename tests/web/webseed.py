"""Rows as the lab leaves them, for the web layer's tests over a real database."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from hairline.store.db import Store
from hairline.store.models import Experiment, Service, Trial, VerdictRow
from hairline.store.observations import write_observations


def seed(
    store: Store, *, service: str = "api", team: str = "demo", kind: str = "ab",
    phase: str = "done", label: str = "no change", metric: str = "cpu_ns_per_request",
    effect: float = 0.0, at: float = 1.0e9, model: str = "paired-t-none", trials: int = 1,
    origin: str = "cli",
) -> int:  # fmt: skip
    """One experiment as the lab leaves it: ``trials`` trials (the first done, the rest
    done only when the experiment is), and a deciding verdict of ``metric`` when done."""
    with store.transaction() as session:
        row = session.query(Service).filter_by(name=service).one_or_none()
        if row is None:
            row = Service(name=service, created_at=0.0)
            session.add(row)
            session.flush()
        e = Experiment(
            service_id=row.id, kind=kind, team=team, phase=phase, progress=f"{phase}: trial 1",
            spec=json.dumps({"analysis": {"alpha": 0.05}}), source_file="f", artifacts_dir="",
            created_at=at, updated_at=at, finished_at=at + 60 if phase == "done" else None,
            origin=origin,
        )  # fmt: skip
        session.add(e)
        session.flush()
        for index in range(trials):
            state = "done" if phase == "done" or index == 0 else "pending"
            session.add(Trial(experiment_id=e.id, index=index, state=state, attempts=1))
        if phase == "done":
            session.add(
                VerdictRow(
                    experiment_id=e.id, metric=metric, candidate="B", baseline="A",
                    deciding=True, label=label, model=model, model_reason="fewest misses",
                    relative_effect=effect, ci_low=effect - 0.01, ci_high=effect + 0.01,
                    p_value=0.01, threshold="0.02 rel", direction="higher-is-worse",
                )
            )  # fmt: skip
        return e.id


def observe(
    store: Store, experiment_id: int, folder: Path, *, rng: np.random.Generator,
    effect: float = 0.0, metric: str = "cpu_ns_per_request",
) -> None:  # fmt: skip
    """Give each done trial of a seeded experiment an observations file as the lab writes
    one: ``metric`` per arm (A, B) with 1% noise, B ``effect`` (relative) above A."""
    with store.transaction() as session:
        trials = session.query(Trial).filter_by(experiment_id=experiment_id, state="done").all()
        for trial in trials:
            rows = {
                "trial": [trial.index] * 2,
                "arm": ["A", "B"],
                "metric": [metric] * 2,
                "value": [1000 * rng.normal(1, 0.01), 1000 * (1 + effect) * rng.normal(1, 0.01)],
            }
            path = folder / f"e{experiment_id}t{trial.index}.parquet"
            write_observations(path, pa.table(rows))
            trial.observations = str(path)
