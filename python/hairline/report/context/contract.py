"""The JSON contract: ``hairline analyze --json`` and ``hairline run/report --json``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

from hairline.kit.jsonout import to_jsonable
from hairline.lab.analysis import Analysis
from hairline.report.context.capacity import arm_capacities
from hairline.report.context.certificate import certificates
from hairline.report.context.functions import functions_json
from hairline.report.context.model import ExperimentReport
from hairline.report.context.notes import overlap_notes
from hairline.report.context.text import headline
from hairline.report.context.trials import metric_trials
from hairline.stats.certificate import AaRecord

__all__ = ["JSON_SCHEMA", "analysis_json", "experiment_json"]

# Bumped when a key of experiment_json changes meaning or disappears (adding keys does not).
JSON_SCHEMA = 1


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def analysis_json(
    analysis: Analysis, aa: Mapping[str, AaRecord] | None = None
) -> dict[str, object]:
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
                "ci_rel": list(r.comparison.ci_rel),
                "effect_abs": r.comparison.effect_abs,
                "ci_abs": list(r.comparison.ci_abs),
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
            }
            for r in analysis.results
        ],
    }


def experiment_json(report: ExperimentReport) -> dict[str, Any]:
    """The JSON contract of ``hairline run --json`` / ``hairline report --json``.

    Plain JSON values only (NaN and infinities become ``null``), so ``json.dumps`` works
    with ``allow_nan=False``. Top-level keys:

    - ``schema`` (int): :data:`JSON_SCHEMA`, bumped when a key changes meaning.
    - ``experiment_id``, ``service``, ``kind`` (``"ab"``/``"aa"``), ``phase``, ``failure``
      (string or null), ``created_at``, ``started_at``, ``finished_at`` (ISO 8601 or null),
      ``design``, ``trials``, ``trials_done``, ``rate_per_s``, ``duration_s``, ``model``,
      ``html_path`` (string or null), ``notes`` (strings about the measurement, such as
      failed load gates; see :func:`load_notes`).
    - ``overlaps``: ``[{"kind", "what", "reason", "started_at", "ended_at", "trials",
      "note", "text"}]``: other experiments (kind ``"experiment"``) and events (``"deploy"``,
      ``"maintenance"``, ``"other"``) on its hosts, machines or downstreams while its trials
      ran (:func:`~hairline.lab.concurrency.overlaps`); ``trials`` numbered from 1,
      ``ended_at`` null for an event at a point in time, ``text`` the report's warning.
    - ``headline``: ``{"status", "text"}``; status is one of regression, no regression,
      inconclusive, failed, cancelled, running.
    - ``regression`` (bool): true when a metric of a deciding comparison is a regression
      (every comparison decides, except a three-sided experiment's parent against
      production: :attr:`~hairline.lab.analysis.Analysis.deciding`).
    - ``arms``: ``[{"name", "source", "build_key", "build_cached", "build_log", "args",
      "env", "baseline"}]``; ``baseline`` is the arm it is compared with (null for the
      experiment's baseline).
    - ``hosts``: ``[{"host", "name", "address", "cpus": [int], "facts": {name: value}}]``;
      a host index that a replacement host took over (its first died) is listed again.
    - ``mode``: ``"efficiency"``, ``"hardware"`` when the arms are host classes, or
      ``"capacity"``; then ``capacity`` lists each arm's ``max_throughput_per_s`` (mean
      over batches) with ``low_per_s``/``high_per_s`` (its 95% interval, null with one
      batch) and ``batches``, and ``curves`` each arm's probes per batch (``rate_per_s``,
      ``p99_ms``, ``served_per_s``, ``duration_s``, ``passed``) with its knee
      (``max_rate_per_s``), ``slo_p99_ms`` and ``stopped_by``.
    - ``analysis``: null until analysed, else the object of ``hairline analyze --json``
      (:func:`analysis_json`): ``source``, ``baseline``, ``alpha``,
      ``correction``, ``regression`` (of the deciding comparisons), ``comparisons``
      (``[{"arm", "baseline", "deciding"}]``), and ``metrics``, one object per metric and
      candidate arm with ``baseline`` (the arm it was compared with), ``deciding``,
      ``effect_rel``, ``ci_rel``, ``effect_abs``, ``ci_abs``, ``mean_a``,
      ``mean_b``, ``p_value``, ``p_adjusted``, ``model``, ``model_reason``, ``threshold``,
      ``threshold_kind``, ``direction``, ``verdict``, ``reason``, ``n_a``, ``n_b``,
      ``warmup_rows_cut``, ``warnings`` and ``certificate`` (the A/A record of the
      metric on the A/A experiments the analysis used, and the minimum detectable effect).
    - ``functions``: ``{"note", "comparisons"}`` ([service.profile]): ``note`` says why there
      are no function metrics (null when there are, or when the service is not profiled);
      ``comparisons`` has per candidate ``candidate``, ``baseline``, ``fdr``, ``min_share``,
      ``trials``, ``samples_per_batch``, ``compared``, ``pooled``, ``changed`` (each
      function found) and ``functions`` (every function compared, largest effect first),
      each with ``function``, ``cost`` (self or inclusive), ``mean_a_ns``,
      ``mean_b_ns``, ``effect_ns``, ``effect_rel``, ``ci_ns``, ``p_value``, ``p_adjusted``
      (Benjamini-Hochberg), ``share`` (of the baseline's CPU), ``verdict`` (regression,
      improvement, shift, new, gone) and ``shift_with``.
    - ``per_trial``: ``{metric: {"series": bool, "arms": {arm: [{"trial", "value", "rows",
      "rows_cut", "cut_t_s"}]}}}``: per trial, the mean of the rows kept after the warm-up
      cut (see :func:`metric_trials`), trials in order; ``{}`` when nothing was measured.
    """
    head = headline(report)
    trials = (
        metric_trials(report.observations, report.analysis)
        if report.observations is not None
        else ()
    )
    payload: dict[str, Any] = {
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
        "capacity": [asdict(c) for c in arm_capacities(report)],
        "curves": [asdict(c) for c in report.curves],
        "trials": report.trials,
        "trials_done": report.trials_done,
        "rate_per_s": report.rate_per_s,
        "duration_s": report.duration_s,
        "model": report.model,
        "html_path": report.html_path,
        "notes": list(report.notes),
        "functions": functions_json(report.functions, report.functions_note),
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
                "build_log": a.build_log,
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
