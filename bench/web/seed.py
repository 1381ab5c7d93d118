"""A lab's history for the web benchmark: N experiments with their arms, trials, verdicts
and triage, written straight into a hairline database (SQLite or PostgreSQL).

The mix, seeded: 12 teams of 5 services each; 35% periodic A/A runs (origin "schedule"),
the rest A/B runs from the command line, the API and bisection, a tenth of them with three
arms; created over the last 90 days, oldest first. The newest few dozen are still active
(queued, building, allocating, running, analyzing: trials part done); of the rest 90% are
done, 7% failed, 3% cancelled. Every candidate of a done experiment has six metric
verdicts; an A/B regresses in 12% of runs, an A/A reports a false positive in 5%; a fifth
of the regressions are acknowledged and a tenth ignored.

    from seed import seed
    counts = seed(store, experiments=10_000, seed=14)
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, func, insert, select

from hairline.store.db import Store
from hairline.store.models import ACTIVE_PHASES, Arm, Experiment, Service, Triage, Trial, VerdictRow

__all__ = ["METRICS", "TEAMS", "Seeded", "seed"]

TEAMS = tuple(f"team-{i:02d}" for i in range(12))
SERVICES_PER_TEAM = 5
METRICS = (
    ("cpu_ns_per_request", "higher-is-worse", "1%"),
    ("anon_memory_bytes", "higher-is-worse", "2%"),
    ("latency_us", "higher-is-worse", "5%"),
    ("latency_p50_us", "higher-is-worse", "5%"),
    ("latency_p99_us", "higher-is-worse", "10%"),
    ("goodput_per_s", "lower-is-worse", "1%"),
)
ACTIVE_NEWEST = 40  # the newest experiments still in the lab
DAYS_S = 90 * 86400.0
_BATCH_ROWS = 5_000


@dataclass(frozen=True)
class Seeded:
    experiments: int
    arms: int
    trials: int
    verdicts: int
    triage: int
    services: tuple[str, ...]
    newest_id: int
    oldest_id: int


def _table(model: Any) -> Table:
    return cast(Table, model.__table__)


def _chunks(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(rows), _BATCH_ROWS):
        yield rows[start : start + _BATCH_ROWS]


def seed(store: Store, *, experiments: int, seed: int = 14, now: float | None = None) -> Seeded:
    """Write ``experiments`` experiments (ids 1..N when the database is empty)."""
    rng = random.Random(seed)
    now = time.time() if now is None else now
    services = [(team, f"{team}-svc{j}") for team in TEAMS for j in range(SERVICES_PER_TEAM)]
    with store.transaction() as session:
        service_rows = [{"name": name, "created_at": now - DAYS_S} for _, name in services]
        session.execute(insert(_table(Service)), service_rows)
    with store.autocommit() as connection:
        ids = dict(connection.execute(select(Service.name, Service.id)).all())
        next_id = int(connection.scalar(select(func.max(Experiment.id))) or 0) + 1
    rows: dict[str, list[dict[str, Any]]] = {"e": [], "a": [], "t": [], "v": [], "x": []}
    first_id = next_id
    for index in range(experiments):
        experiment_id = next_id + index
        team, service = rng.choice(services)
        created = now - DAYS_S * (1 - index / experiments) + rng.uniform(0, 60)
        _experiment(rows, rng, experiment_id, team, ids[service], created,
                    active=index >= experiments - ACTIVE_NEWEST, home=str(store.home))  # fmt: skip
    with store.transaction() as session:
        for key, model in (("e", Experiment), ("a", Arm), ("t", Trial), ("v", VerdictRow)):
            for chunk in _chunks(rows[key]):
                session.execute(insert(_table(model)), chunk)
        # Triage names verdicts by (experiment, metric, candidate): unique per experiment.
        for chunk in _chunks(rows["x"]):
            session.execute(insert(_table(Triage)), chunk)
    return Seeded(
        experiments=experiments, arms=len(rows["a"]), trials=len(rows["t"]),
        verdicts=len(rows["v"]), triage=len(rows["x"]),
        services=tuple(name for _, name in services),
        newest_id=first_id + experiments - 1, oldest_id=first_id,
    )  # fmt: skip


def _experiment(
    rows: dict[str, list[dict[str, Any]]],
    rng: random.Random,
    experiment_id: int,
    team: str,
    service_id: int,
    created: float,
    *,
    active: bool,
    home: str,
) -> None:
    aa = rng.random() < 0.35
    if aa:
        submitted_by, origin = "scheduler", "schedule"
    else:
        submitted_by, origin = rng.choice(
            [("cli", ""), ("cli", ""), (f"{team}-ci", "api"), ("cli", "bisect")]
        )
    if active:
        phase = rng.choice(ACTIVE_PHASES)
    else:
        draw = rng.random()
        phase = "done" if draw < 0.90 else ("failed" if draw < 0.97 else "cancelled")
    n_trials = rng.choice((3, 5, 7))
    started = created + rng.uniform(5, 600)
    finished = None if active else started + n_trials * rng.uniform(20, 90)
    ran = {"queued": 0, "building": 0, "allocating": 0, "analyzing": n_trials}.get(
        phase, rng.randrange(n_trials) if phase in ("running", "failed", "cancelled") else n_trials
    )
    progress = {
        "queued": "queued", "building": "building A", "allocating": "waiting for hosts",
        "running": f"trial {ran + 1} of {n_trials}", "analyzing": "analyzing",
        "done": "done", "failed": "failed", "cancelled": "cancelled",
    }[phase]  # fmt: skip
    rows["e"].append({
        "id": experiment_id, "service_id": service_id, "kind": "aa" if aa else "ab",
        "team": team, "phase": phase,
        "failure": "arm B never became healthy (GET /healthz: connection refused)"
        if phase == "failed" else None,
        "spec": "{}", "source_file": f"/srv/{team}/perf/experiment.toml",
        "artifacts_dir": f"{home}/experiments/{experiment_id}", "progress": progress,
        "created_at": created, "started_at": None if phase == "queued" else started,
        "finished_at": finished, "updated_at": finished or started,
        "lease_owner": None, "lease_expires_at": None, "claims": 0 if phase == "queued" else 1,
        "cancel_requested": phase == "cancelled", "rate_per_s": 3500.0, "calibration": None,
        "priority": -1001 if aa else 0, "region": "local", "submitted_by": submitted_by,
        "origin": origin,
    })  # fmt: skip
    arms = ["A", "B"] if aa or rng.random() < 0.9 else ["A", "B", "C"]
    for position, arm in enumerate(arms):
        rows["a"].append({
            "experiment_id": experiment_id, "name": arm, "position": position,
            "source": "same as A" if aa and position else f"git rev{rng.randrange(10**6):06x}",
            "build_key": f"{rng.getrandbits(64):016x}", "build_cached": position > 0,
            "artifact": None, "build_log": None,
        })  # fmt: skip
    for trial in range(n_trials):
        state = "done" if trial < ran else ("abandoned" if phase in ("failed", "cancelled")
                                            else "pending")  # fmt: skip
        rows["t"].append({
            "experiment_id": experiment_id, "index": trial, "state": state, "note": None,
            "attempts": 1 if state == "done" else 0,
            "observations": f"{home}/experiments/{experiment_id}/trial-{trial}.parquet"
            if state == "done" else None,
            "processor": "lab:bench", "started_at": started if state == "done" else None,
            "finished_at": started + 30 * (trial + 1) if state == "done" else None,
        })  # fmt: skip
    if phase != "done":
        return
    for candidate in arms[1:]:
        regress_metric = None
        if rng.random() < (0.05 if aa else 0.12):
            regress_metric = rng.choice(METRICS)[0]
        for metric, direction, threshold in METRICS:
            regressed = metric == regress_metric
            effect = rng.uniform(0.012, 0.08) if regressed else rng.gauss(0, 0.003)
            label = "regression" if regressed else (
                "improvement" if effect < -0.008 else "no change")  # fmt: skip
            rows["v"].append({
                "experiment_id": experiment_id, "metric": metric, "candidate": candidate,
                "baseline": "A", "deciding": True, "label": label,
                "model": "trimmed-t-none", "model_reason": "adaptive: lowest FNR",
                "relative_effect": effect, "absolute_effect": effect * 1000,
                "ci_low": effect - 0.004, "ci_high": effect + 0.004,
                "p_value": 0.001 if regressed else rng.uniform(0.05, 1),
                "threshold": threshold, "direction": direction,
            })  # fmt: skip
            if regressed and rng.random() < 0.3:
                rows["x"].append({
                    "experiment_id": experiment_id, "metric": metric, "candidate": candidate,
                    "state": "acknowledged" if rng.random() < 2 / 3 else "ignored",
                    "actor": f"{team}-lead", "note": "", "at": (finished or created) + 3600,
                })  # fmt: skip
