"""An experiment's finished trials, its service's A/A history, and their analysis.

The one place that turns stored trials into an :class:`~hairline.lab.analysis.Analysis`:
the processor's analysis phase, the sequential design's looks and the reports all call
:func:`analyze_experiment`, so they agree.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from hairline.config import ExperimentConfig
from hairline.errors import HairlineError
from hairline.kit.jsonout import to_jsonable, write_json
from hairline.lab.analysis import (
    Analysis,
    AnalysisOptions,
    MetricAnalysis,
    analyze,
    history_choice,
    history_runs,
)
from hairline.stats.certificate import AaRecord, aa_record, is_false_positive
from hairline.stats.data import Comparison
from hairline.stats.sequential import FIRST_LOOK, settled
from hairline.stats.verdict import MetricRule, Verdict
from hairline.store.db import Store
from hairline.store.models import Experiment, Service, Trial, VerdictRow
from hairline.store.observations import (
    Observations,
    observations_from_table,
    read_observations,
)

__all__ = [
    "HistoryModel",
    "aa_experiments",
    "aa_history",
    "aa_model_choices",
    "analysis_options",
    "analyze_experiment",
    "experiment_observations",
    "load_analysis",
    "save_analysis",
    "settled_at_look",
    "store_verdict_rows",
    "stored_history",
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


@dataclass(frozen=True)
class HistoryModel:
    """The model adaptive selection picks for one metric from its service's A/A history."""

    metric: str
    model: str | None  # None: too few runs or no model qualified; each A/B then falls back
    reason: str
    runs: int  # the A/A runs of the metric in the history


def aa_model_choices(
    store: Store, service: str, *, ids: list[int], alpha: float, seed: int = 0
) -> dict[str, HistoryModel]:
    """Per metric, the model the next A/B of ``service`` analysed with ``model =
    "adaptive"`` would choose from the A/A experiments ``ids`` (its history: every
    finished A/A, :func:`aa_experiments`), and why: the analysis's own rule
    (:func:`~hairline.lab.analysis.history_choice`) on the same runs. Where it names no
    model, the A/B falls back to one chosen by its own trials and hosts."""
    history = aa_history(store, service, ids=ids)
    if history is None:
        return {}
    chosen = {}
    for metric in sorted(pc.unique(history.table.column("metric")).to_pylist()):
        runs = history_runs(history, str(metric))
        best, reason = history_choice(runs, alpha=alpha, rng=np.random.default_rng(seed))
        chosen[str(metric)] = HistoryModel(str(metric), best, reason, len(runs))
    return chosen


def analysis_options(config: ExperimentConfig) -> AnalysisOptions:
    return AnalysisOptions(
        model=config.analysis.model,
        alpha=config.analysis.alpha,
        # Under trials = "auto" every analysis is a look: each metric is tested at the level
        # that keeps all looks together at alpha, for the model it uses (docs/stats.md).
        sequential=(FIRST_LOOK, config.design.max_trials) if config.design.sequential else None,
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
        observations,
        analysis_options(config),
        history=history,
        baseline=config.baseline_arm,
        baselines=config.comparisons,
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
    deciding = [r for r in analysis.results if r.metric in wanted]
    labels: dict[str, str] = {f"{r.metric} ({r.candidate})": r.verdict.label for r in deciding}
    seen = {r.metric for r in analysis.results}
    # The verdict, not its label: "no change" under a zero threshold is only p >= alpha,
    # which more trials may overturn.
    done = bool(deciding) and wanted <= seen and all(settled(r.verdict) for r in deciding)
    return done, labels


# -- the stored record of an analysis ----------------------------------------------------
#
# The analysis phase stores its result once (verdict rows for listings, this file for
# reports); `run`, `report` and `status` read it back instead of analysing again, so they
# can never disagree. Re-analysis happens only when asked (`hairline report --reanalyse`).

_ANALYSIS_FILE = "verdicts.json"
_ANALYSIS_VERSION = 1


def store_verdict_rows(session: Session, experiment_id: int, analysis: Analysis) -> None:
    """Replace the experiment's verdict rows (what listings count) with ``analysis``'s:
    each with the arm it was compared with and whether it decides the outcome."""
    session.execute(delete(VerdictRow).where(VerdictRow.experiment_id == experiment_id))
    for r in analysis.results:
        c: Comparison = r.comparison
        rule = r.verdict.rule
        session.add(
            VerdictRow(
                experiment_id=experiment_id,
                metric=r.metric,
                candidate=r.candidate,
                baseline=r.baseline,
                deciding=analysis.decides(r.candidate),
                label=r.verdict.label,
                model=r.model,
                model_reason=r.model_reason,
                relative_effect=_finite(c.effect_rel),
                absolute_effect=_finite(c.effect_abs),
                ci_low=_finite(c.ci_rel[0]),
                ci_high=_finite(c.ci_rel[1]),
                p_value=_finite(c.p_value),
                threshold=f"{rule.threshold:g}" + ("" if rule.kind == "absolute" else " rel"),
                direction=rule.direction,
            )
        )


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def save_analysis(artifacts: Path, analysis: Analysis, history_ids: list[int]) -> Path:
    """Write ``analysis`` (and the A/A history it used) to the experiment's artifacts,
    atomically."""
    payload = {
        "version": _ANALYSIS_VERSION,
        "history_experiments": history_ids,
        "analysis": to_jsonable(analysis),
    }
    return write_json(artifacts / _ANALYSIS_FILE, payload)


def _f(value: object) -> float:
    """A stored float; JSON's null stands for NaN."""
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def _pair(value: Any) -> tuple[float, float]:
    lo, hi = value
    return _f(lo), _f(hi)


def load_analysis(artifacts: Path) -> Analysis | None:
    """The stored analysis of an experiment, or None when it has none (it never finished,
    or was analysed before analyses were stored)."""
    path = artifacts / _ANALYSIS_FILE
    try:
        payload = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise HairlineError(
            f"{path}: the stored analysis cannot be read ({err})",
            hint="run `hairline report ID --reanalyse` to analyse the trials again",
        ) from None
    if payload.get("version") != _ANALYSIS_VERSION:
        return None
    data = payload["analysis"]
    results = []
    for r in data["results"]:
        v = r["verdict"]
        comparison = _comparison(v["comparison"])
        verdict = Verdict(
            metric=v["metric"], comparison=comparison, rule=MetricRule(**v["rule"]),
            p_adjusted=_f(v["p_adjusted"]), label=v["label"], reason=v["reason"],
            settled=bool(v.get("settled", False)),
        )  # fmt: skip
        results.append(
            MetricAnalysis(
                metric=r["metric"],
                candidate=r["candidate"],
                # Stored before arms had baselines of their own: the experiment's.
                baseline=r.get("baseline", data["baseline"]),
                model=r["model"],
                model_reason=r["model_reason"],
                warmup_rows_cut=int(r["warmup_rows_cut"]),
                verdict=verdict,
                by_host_pair=_comparison(r["by_host_pair"]) if r.get("by_host_pair") else None,
            )
        )
    return Analysis(
        source=data["source"],
        baseline=data["baseline"],
        alpha=_f(data["alpha"]),
        correction=data["correction"],
        results=tuple(results),
        deciding=tuple(data.get("deciding") or ()),
        host_pair_trials=tuple(int(n) for n in data.get("host_pair_trials") or ()),
    )


def _comparison(c: dict[str, Any]) -> Comparison:
    return Comparison(
        model=c["model"], mean_a=_f(c["mean_a"]), mean_b=_f(c["mean_b"]),
        effect_abs=_f(c["effect_abs"]), effect_rel=_f(c["effect_rel"]),
        ci_abs=_pair(c["ci_abs"]), ci_rel=_pair(c["ci_rel"]), p_value=_f(c["p_value"]),
        alpha=_f(c["alpha"]), n_a=int(c["n_a"]), n_b=int(c["n_b"]),
        warnings=tuple(c["warnings"]),
        details={k: _f(x) for k, x in (c.get("details") or {}).items()},
    )  # fmt: skip


def aa_records(store: Store, ids: Sequence[int], alpha: float) -> dict[str, AaRecord]:
    """Per metric, what the deciding verdicts of the finished A/A experiments ``ids`` said:
    the A/A record a certificate shows (stats/certificate.py). A run with several deciding
    comparisons (three arms) is one run, a false positive if any of them is."""
    if not ids:
        return {}
    with store.transaction() as session:
        rows = session.execute(
            select(VerdictRow.experiment_id, VerdictRow.metric, VerdictRow.label)
            .join(Experiment, Experiment.id == VerdictRow.experiment_id)
            .where(VerdictRow.experiment_id.in_(list(ids)), VerdictRow.deciding,
                   Experiment.kind == "aa", Experiment.phase == "done")
            .order_by(VerdictRow.id)
        ).all()  # fmt: skip
    labels: dict[str, dict[int, str]] = {}
    for eid, metric, label in rows:
        found = labels.setdefault(metric, {})
        if eid not in found or not is_false_positive(found[eid]):
            found[eid] = label
    return {m: aa_record(list(by_run.values()), alpha) for m, by_run in sorted(labels.items())}


def stored_history(artifacts: Path) -> list[int] | None:
    """The A/A experiments an analysis used (to analyse again the same way)."""
    for name in (_ANALYSIS_FILE, "analysis.json"):
        with contextlib.suppress(OSError, ValueError):
            ids = json.loads((artifacts / name).read_text()).get("history_experiments")
            return [int(i) for i in ids] if ids is not None else None
    return None
