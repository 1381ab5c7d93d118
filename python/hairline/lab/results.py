"""An experiment's finished trials, its service's A/A history, and their analysis.

The one place that turns stored trials into an :class:`~hairline.lab.analysis.Analysis`:
the processor's analysis phase, the sequential design's looks and the reports all call
:func:`analyze_experiment`, so they agree.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import select

from hairline.config import ExperimentConfig
from hairline.errors import HairlineError
from hairline.lab.analysis import Analysis, AnalysisOptions, analyze
from hairline.stats.sequential import FIRST_LOOK, look_alpha, settled
from hairline.store.db import Store
from hairline.store.models import Experiment, Service, Trial
from hairline.store.observations import (
    Observations,
    observations_from_table,
    read_observations,
)

__all__ = [
    "aa_experiments",
    "aa_history",
    "analysis_alpha",
    "analysis_options",
    "analyze_experiment",
    "experiment_observations",
    "settled_at_look",
]


def experiment_observations(store: Store, experiment_id: int) -> pa.Table | None:
    """The done trials' observations of one experiment, in trial order."""
    with store.transaction() as session:
        paths = list(
            session.scalars(
                select(Trial.observations)
                .where(Trial.experiment_id == experiment_id, Trial.state == "done")
                .order_by(Trial.index)
            )
        )
    tables = [read_observations(Path(p)).table for p in paths if p]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def aa_experiments(store: Store, service: str) -> list[int]:
    """The finished A/A experiments of ``service``: its history."""
    with store.transaction() as session:
        return list(
            session.scalars(
                select(Experiment.id)
                .join(Service, Service.id == Experiment.service_id)
                .where(Service.name == service, Experiment.kind == "aa", Experiment.phase == "done")
                .order_by(Experiment.id)
            )
        )


def aa_history(
    store: Store, service: str, *, exclude: int | None = None, ids: list[int] | None = None
) -> Observations | None:
    """A/A experiments of ``service`` (``ids``, default all finished ones) as one history
    with an experiment column."""
    if ids is None:
        ids = aa_experiments(store, service)
    tables = []
    for eid in ids:
        if eid == exclude:
            continue
        table = experiment_observations(store, eid)
        if table is not None:
            tables.append(table.append_column("experiment", pa.array([eid] * len(table))))
    if not tables:
        return None
    combined = pa.concat_tables(tables, promote_options="permissive")
    return observations_from_table(combined, source=f"A/A history of {service}")


def analysis_alpha(config: ExperimentConfig) -> float:
    """The level of every test and interval of ``config``'s analysis: the file's alpha, or
    under ``trials = "auto"`` the per-look level that keeps the whole sequential procedure's
    false-positive rate at alpha (docs/stats.md, "Sequential trials")."""
    if not config.design.sequential:
        return config.analysis.alpha
    # Calibrated for the model the looks use: the one named, or the per-trial fallback
    # (adaptive choice from A/A history is then approximate; docs/stats.md).
    model = None if config.analysis.model == "adaptive" else config.analysis.model
    return look_alpha(config.analysis.alpha, FIRST_LOOK, config.design.max_trials, model)


def analysis_options(config: ExperimentConfig) -> AnalysisOptions:
    return AnalysisOptions(
        model=config.analysis.model,
        alpha=analysis_alpha(config),
        policies=config.policies(),
        correction=config.analysis.correction,
        seed=config.analysis.seed,
    )


def analyze_experiment(
    store: Store,
    experiment_id: int,
    config: ExperimentConfig,
    *,
    history_ids: list[int] | None = None,
    metrics: Collection[str] | None = None,
) -> Analysis:
    """Analyse an experiment's finished trials against its service's A/A history
    (``history_ids``, default: every finished A/A experiment of the service); only
    ``metrics`` when given (a sequential look needs only the metrics it decides on, and
    per-request latency rows are most of the data)."""
    table = experiment_observations(store, experiment_id)
    if table is None:
        raise HairlineError(f"experiment {experiment_id} has no finished trials to analyse")
    if metrics is not None:
        table = table.filter(pc.is_in(table["metric"], pa.array(sorted(metrics))))
    observations = observations_from_table(table, source=f"experiment {experiment_id}")
    history = aa_history(store, config.service.name, exclude=experiment_id, ids=history_ids)
    return analyze(
        observations, analysis_options(config), history=history, baseline=config.baseline_arm
    )


def settled_at_look(
    store: Store, experiment_id: int, config: ExperimentConfig, *, history_ids: list[int]
) -> tuple[bool, dict[str, str]]:
    """One look of the sequential design: whether every metric of ``[design] decide_on`` has
    a settled verdict (regression, improvement, or no change as large as its threshold)
    for every candidate, and the labels seen."""
    wanted = set(config.design.decide_on)
    analysis = analyze_experiment(
        store, experiment_id, config, history_ids=history_ids, metrics=wanted
    )
    labels: dict[str, str] = {
        f"{r.metric} ({r.candidate})": r.verdict.label
        for r in analysis.results
        if r.metric in wanted
    }
    seen = {r.metric for r in analysis.results}
    return bool(labels) and wanted <= seen and all(map(settled, labels.values())), labels
