"""The JSON contract: ``hairline analyze --json`` and ``hairline run/report --json``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from hairline.kit.jsonout import to_jsonable
from hairline.lab.analysis import Analysis
from hairline.lab.calibrate import Calibration, servable_rate
from hairline.report.context.capacity import arm_capacities
from hairline.report.context.certificate import certificates
from hairline.report.context.functions import functions_json
from hairline.report.context.jsontypes import (
    AnalysisJson,
    CalibrationJson,
    ClusteredJson,
    ExperimentJson,
)
from hairline.report.context.model import ExperimentReport
from hairline.report.context.notes import overlap_notes
from hairline.report.context.pairs import host_pairs_json
from hairline.report.context.text import headline
from hairline.report.context.trials import metric_trials
from hairline.stats.certificate import AaRecord
from hairline.stats.data import Comparison

__all__ = ["JSON_SCHEMA", "analysis_json", "experiment_json"]

# Bumped when a key of experiment_json changes meaning or disappears (adding keys does not).
JSON_SCHEMA = 1


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _path(path: Path | None) -> str | None:
    return None if path is None else str(path)


def analysis_json(analysis: Analysis, aa: Mapping[str, AaRecord] | None = None) -> AnalysisJson:
    """The JSON contract of ``hairline analyze --json``: one object per metric and arm.

    ``regression`` is true when a deciding comparison found one (every comparison decides
    unless arms name baselines of their own; see :attr:`Analysis.deciding`). Each metric's
    ``certificate`` holds its record on the service's A/A history (``aa_history``: runs,
    flagged, alpha, the binomial ``band`` of flagged counts alpha explains, ``calibrated``;
    null without ``aa``) and ``mde``, the smallest change the experiment detects with
    probability ``power``, relative or in the metric's units (``mde_kind``) as its threshold
    is (stats/certificate.py)."""
    certs = certificates(analysis, aa or {})
    return {
        "source": analysis.source,
        "baseline": analysis.baseline,
        "alpha": analysis.alpha,
        "correction": analysis.correction,
        "regression": bool(analysis.regressions),
        "comparisons": [
            {"arm": candidate, "baseline": base, "deciding": analysis.decides(candidate)}
            for candidate, base in analysis.comparisons
        ],
        "metrics": [
            {
                "metric": r.metric,
                "arm": r.candidate,
                "baseline": r.baseline,
                "deciding": analysis.decides(r.candidate),
                "effect_rel": r.comparison.effect_rel,
                "ci_rel": r.comparison.ci_rel,
                "effect_abs": r.comparison.effect_abs,
                "ci_abs": r.comparison.ci_abs,
                "mean_a": r.comparison.mean_a,
                "mean_b": r.comparison.mean_b,
                "p_value": r.comparison.p_value,
                "p_adjusted": r.verdict.p_adjusted,
                "model": r.model,
                "model_reason": r.model_reason,
                "threshold": r.verdict.threshold,
                "threshold_kind": r.verdict.rule.kind,
                "direction": r.verdict.direction,
                "verdict": r.verdict.label,
                "reason": r.verdict.reason,
                "n_a": r.comparison.n_a,
                "n_b": r.comparison.n_b,
                "warmup_rows_cut": r.warmup_rows_cut,
                "warnings": list(r.comparison.warnings),
                "certificate": certs[(r.metric, r.candidate)].to_json(),
                "by_host_pair": _clustered(r.by_host_pair),
            }
            for r in analysis.results
        ],
    }


def _clustered(c: Comparison | None) -> ClusteredJson | None:
    if c is None:
        return None
    return {
        "effect_rel": c.effect_rel, "ci_rel": c.ci_rel, "effect_abs": c.effect_abs,
        "ci_abs": c.ci_abs, "p_value": c.p_value,
        "clusters": int(c.details.get("n_clusters", 0)),
    }  # fmt: skip


def calibration_json(calibration: Calibration | None) -> CalibrationJson | None:
    """The calibration's JSON: its choice, candidates and ramp steps."""
    if calibration is None:
        return None
    precision = calibration.target_utilization is None
    return {
        "rate_per_s": calibration.rate_per_s,
        "mode": "precision" if precision else "utilization",
        "target_utilization": calibration.target_utilization,
        "metric": calibration.metric or None,
        "servable_rate_per_s": servable_rate(calibration.steps),
        "reason": calibration.reason,
        "seconds": calibration.seconds,
        "aa_step_s": calibration.aa_step_s,
        "candidates": [
            {
                "rate_per_s": c.rate_per_s,
                "utilization": c.utilization,
                "steps": c.steps,
                "sd_per_trial_rel": c.sd_per_trial,
                "passed": c.passed,
                "note": c.note,
                "host_differences": [d if math.isfinite(d) else None for d in c.host_differences],
            }
            for c in calibration.candidates
        ],
        "steps": [
            {
                "rate_per_s": s.rate_per_s,
                "utilization": s.utilization,
                "cpu_ns_per_request": s.cpu_ns_per_request,
                "passed": s.passed,
                "note": s.note,
            }
            for s in calibration.steps
        ],
    }


def experiment_json(report: ExperimentReport) -> dict[str, Any]:
    """The JSON contract of ``hairline run --json`` / ``hairline report --json``: an
    :class:`~hairline.report.context.jsontypes.ExperimentJson`, whose fields say what each
    key holds (and docs/schema/experiment-report.json, generated from it).

    Plain JSON values only (NaN and infinities become ``null``), so ``json.dumps`` works
    with ``allow_nan=False``. ``schema`` is :data:`JSON_SCHEMA`, bumped when a key changes
    meaning; ``analysis`` is the object of ``hairline analyze --json``
    (:func:`analysis_json`); ``per_trial`` holds per trial the mean of the rows kept after
    the warm-up cut (see :func:`metric_trials`).
    """
    head = headline(report)
    trials = (
        metric_trials(report.observations, report.analysis)
        if report.observations is not None
        else ()
    )
    payload: ExperimentJson = {
        "schema": JSON_SCHEMA,
        "experiment_id": report.experiment_id,
        "service": report.service,
        "kind": report.kind,
        "phase": report.phase,
        "failure": report.failure,
        "created_at": _when(report.created_at),
        "started_at": _when(report.started_at),
        "finished_at": _when(report.finished_at),
        "design": report.design,
        "mode": report.mode,
        "capacity": list(arm_capacities(report)),
        "curves": list(report.curves),
        "trials": report.trials,
        "trials_done": report.trials_done,
        "rate_per_s": report.rate_per_s,
        "duration_s": report.duration_s,
        "model": report.model,
        "html_path": _path(report.html_path),
        "notes": list(report.notes),
        "calibration": calibration_json(report.calibration),
        "functions": functions_json(
            report.functions, report.functions_note, report.suggested_functions
        ),
        "overlaps": [
            {
                "kind": o.kind,
                "what": o.what,
                "reason": o.reason,
                "started_at": _when(o.started_at),
                "ended_at": _when(o.ended_at),
                "trials": list(o.trials),
                "note": o.note,
                "text": text,
            }
            for o, text in zip(report.overlaps, overlap_notes(report.overlaps), strict=True)
        ],
        "headline": {"status": head.status, "text": head.text},
        "regression": report.analysis is not None and bool(report.analysis.regressions),
        "arms": [
            {
                "name": a.name,
                "source": a.source,
                "build_key": a.build_key,
                "build_cached": a.build_cached,
                "build_log": _path(a.build_log),
                "args": list(a.args),
                "env": dict(a.env),
                "baseline": a.baseline,
            }
            for a in report.arms
        ],
        "hosts": [
            {
                "host": h.host,
                "name": h.name,
                "address": h.address,
                "cpus": list(h.cpus),
                "facts": dict(h.facts),
            }
            for h in report.hosts
        ],
        "host_pairs": host_pairs_json(report.host_pairs),
        "analysis": (
            None if report.analysis is None else analysis_json(report.analysis, report.aa_records)
        ),
        "per_trial": {
            m.metric: {
                "series": m.series,
                "arms": {
                    arm: [
                        {
                            "trial": v.trial,
                            "value": v.value,
                            "rows": v.rows,
                            "rows_cut": v.rows_cut,
                            "cut_t_s": v.cut_t_s,
                        }
                        for v in values
                    ]
                    for arm, values in m.by_arm.items()
                },
            }
            for m in trials
        },
    }
    plain: dict[str, Any] = to_jsonable(payload)
    return plain
