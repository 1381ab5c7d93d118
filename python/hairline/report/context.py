"""What every experiment report renders: one experiment as the lab's database knows it.

The lab builds an :class:`ExperimentReport` (metadata, arms, hosts, the analysis and the
observations, each possibly absent while an experiment runs or after it failed); the
terminal, Markdown, HTML and JSON renderers read nothing else. Everything here is pure: no
I/O, no clock.

Two derived views are shared by the renderers:

- :func:`headline`: the one-line outcome (regression found, no regression, inconclusive,
  failed, cancelled, in progress).
- :func:`metric_trials`: per metric, arm and trial, the mean of the rows the analysis
  kept. For a time series (per-request rows with a varying ``t``) the warm-up is cut as the
  analysis cuts it (:func:`hairline.stats.cut_warmup`, per trial and arm), so the per-trial
  values are the ones the verdict stands on.
"""

from __future__ import annotations

import shlex
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from hairline.hosts.similar import mismatches
from hairline.lab.analysis import Analysis, MetricAnalysis
from hairline.report.jsonout import to_jsonable
from hairline.stats import DegenerateDataWarning, MetricSample, cut_warmup
from hairline.store.observations import Observations

__all__ = [
    "JSON_SCHEMA",
    "ArmReport",
    "ExperimentReport",
    "Headline",
    "HostReport",
    "MetricTrials",
    "Status",
    "TrialValue",
    "analysis_json",
    "comparison_text",
    "deciding_text",
    "effect_text",
    "experiment_json",
    "headline",
    "host_notes",
    "load_notes",
    "metric_trials",
    "number_text",
    "threshold_text",
]

# Bumped when a key of experiment_json changes meaning or disappears (adding keys does not).
JSON_SCHEMA = 1

# Fewer time-ordered rows than this per trial and arm is not a series (as in lab.analysis).
_MIN_SERIES_ROWS = 20

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Status = Literal["regression", "no regression", "inconclusive", "failed", "cancelled", "running"]


@dataclass(frozen=True)
class ArmReport:
    name: str  # "A", "B", ...
    source: str  # human description: "path /x/y", "git 1a2b3c4 (main)", "same as A"
    build_key: str | None  # content hash of the build, None if nothing was built
    build_cached: bool | None  # True when the build came from the cache
    build_log: Path | None
    # What the arm adds to the service's start command and environment: two arms that
    # differ only here (a flag, a setting) must not look identical in a report.
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # The arm this one is compared with; None for the experiment's baseline.
    baseline: str | None = None

    @property
    def setup(self) -> str:
        """``args --flag x; env LEVEL=9``, or "" when the arm adds nothing."""
        parts = []
        if self.args:
            parts.append("args " + shlex.join(self.args))
        if self.env:
            parts.append("env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env))
        return "; ".join(parts)


@dataclass(frozen=True)
class HostReport:
    host: int  # host index used in observations
    cpus: tuple[int, ...]
    facts: dict[str, str]  # region, server_type, cpu_model, arch, kernel, turbo, ...
    name: str = ""  # the inventory's name: "machine/cpu2" locally, the node's elsewhere
    address: str | None = None  # where its arms were reached (None for local CPU sets)

    @property
    def where(self) -> str:
        """``node3 at 10.0.0.3, CPUs 0-3``: the host as a reader finds it again."""
        cpus = ",".join(str(c) for c in self.cpus) or "none"
        name = f"{self.name} " if self.name else ""
        at = f"at {self.address}, " if self.address else ""
        return f"{name}{at}CPUs {cpus}"


@dataclass(frozen=True)
class ExperimentReport:
    experiment_id: int
    service: str
    kind: Literal["ab", "aa"]
    phase: str  # queued|building|allocating|running|analyzing|done|failed|cancelled
    failure: str | None  # the reason when phase == "failed"
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    design: str  # e.g. "fully-balanced"
    trials: int
    trials_done: int
    rate_per_s: float
    duration_s: float
    model: str  # "adaptive" or a model name
    arms: tuple[ArmReport, ...]
    hosts: tuple[HostReport, ...]
    analysis: Analysis | None  # None until analysed / when failed
    observations: Observations | None  # None when nothing measured
    html_path: Path | None = None  # where the HTML report was written, if any
    notes: tuple[str, ...] = ()  # about the measurement itself, e.g. failed load gates
    # "hardware": one build, the arms are host classes and the verdict compares them.
    mode: str = "efficiency"

    @property
    def chained(self) -> bool:
        """Whether arms are compared with different baselines (a three-sided experiment),
        so that each arm's line names the arm it is compared with."""
        return len({a.baseline for a in self.arms if a.baseline is not None}) > 1


def host_notes(
    hosts: tuple[HostReport, ...], *, arm_classes: Mapping[str, Mapping[str, str]] | None = None
) -> tuple[str, ...]:
    """What a reader must know about the hosts: in hardware mode, that the arms are host
    classes and the verdict compares the hardware; and any fact on which the hosts differ
    beyond that (ServiceLab section 4.1: results compare only between nearly identical
    machines). Local CPU sets of one machine match by construction."""
    notes = []
    compared: set[str] = set()
    if arm_classes:
        compared = {k for facts in arm_classes.values() for k in facts}
        classes = "; ".join(
            f"{arm}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in facts.items())
            for arm, facts in arm_classes.items()
        )
        notes.append(
            f"hardware mode: one build on every arm; the arms are host classes ({classes}), "
            "each on its own host in every batch, so the verdict compares the hardware"
        )
    differ = mismatches([h.facts for h in hosts], expected=compared)
    if differ:
        listed = "; ".join(
            f"{fact.replace('_', ' ')} "
            + ", ".join(f"{v} (host {h.host})" for h, v in zip(hosts, values, strict=True))
            for fact, values in differ.items()
        )
        notes.append(
            f"WARNING: the experiment's hosts differ in {listed}: a difference between arms "
            "may come from the hosts (the fully balanced design's swap cancels a fixed one)"
        )
    return tuple(notes)


def load_notes(summaries: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """One note per validity gate of the engine that failed in any batch.

    ``summaries`` maps a batch's name (``t0b1``) to the engine's summary JSON of its
    measurement. The measurements are kept either way; the note says how far the load
    was from what was asked, so a reader can judge the verdict.
    """
    failed: dict[str, list[tuple[float, str, str]]] = {}
    for batch, summary in summaries.items():
        for gate in summary.get("gates") or ():
            if not gate.get("passed", True):
                value = float(gate.get("value") or 0.0)
                failed.setdefault(str(gate.get("name")), []).append(
                    (value, batch, str(gate.get("detail", "")))
                )
    notes = []
    for name, hits in sorted(failed.items()):
        value, batch, detail = max(hits)
        notes.append(
            f"load gate {name} failed in {len(hits)} of {len(summaries)} batches "
            f"(worst {batch}: {detail}); the measurements are kept"
        )
    return tuple(notes)


@dataclass(frozen=True)
class Headline:
    status: Status
    text: str


@dataclass(frozen=True)
class TrialValue:
    """One arm's value of one metric in one trial."""

    trial: int | str | None  # the trial as the observations name it (None: no trial column)
    value: float  # mean of the rows kept
    rows: int  # rows kept
    rows_cut: int  # warm-up rows cut before the mean
    cut_t_s: float | None  # time of the first kept row, for a time series


@dataclass(frozen=True)
class MetricTrials:
    """Per-trial values of one metric, for every arm that measured it."""

    metric: str
    series: bool  # a time series, in which warm-up is looked for
    by_arm: Mapping[str, tuple[TrialValue, ...]]  # in the observations' arm order

    @property
    def rows_cut(self) -> int:
        return sum(v.rows_cut for values in self.by_arm.values() for v in values)


def effect_text(result: MetricAnalysis) -> tuple[str, str]:
    """The effect and its interval as the verdict judged them: percent or metric units."""
    c = result.comparison
    if result.verdict.rule.kind == "relative":
        lo, hi = c.ci_rel
        return _pct(c.effect_rel), f"[{_pct(lo)}, {_pct(hi)}]"
    lo, hi = c.ci_abs
    return _signed(c.effect_abs), f"[{_signed(lo)}, {_signed(hi)}]"


def threshold_text(result: MetricAnalysis) -> str:
    """``1%``, ``0.001`` or ``1% (lower worse)``."""
    rule = result.verdict.rule
    text = f"{rule.threshold * 100:g}%" if rule.kind == "relative" else f"{rule.threshold:g}"
    return text + (" (lower worse)" if rule.direction == "lower-is-worse" else "")


def number_text(x: float) -> str:
    """A measured value for people: ``157,918``, ``135.4``, ``0.0012``, ``n/a``."""
    if x != x:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x * 100:+.2f}%"


def _signed(x: float) -> str:
    return "n/a" if x != x else f"{x:+.4g}"


def comparison_text(result: MetricAnalysis) -> str:
    """``change vs parent``: a candidate with the arm it was compared with."""
    return f"{result.candidate} vs {result.baseline}"


def _names(
    results: tuple[MetricAnalysis, ...], *, limit: int, with_effect: bool, chained: bool = False
) -> str:
    many_arms = chained or len({r.candidate for r in results}) > 1
    parts = []
    for r in results[:limit]:
        arm = comparison_text(r) if chained else r.candidate
        name = r.metric + (f" ({arm})" if many_arms else "")
        parts.append(f"{name} {effect_text(r)[0]}" if with_effect else name)
    more = len(results) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def deciding_text(analysis: Analysis) -> str:
    """Which comparisons decide the outcome and the exit status, in a sentence."""
    deciding = [f"{c} against {b}" for c, b in analysis.comparisons if analysis.decides(c)]
    context = [f"{c} against {b}" for c, b in analysis.comparisons if not analysis.decides(c)]
    text = f"{' and '.join(deciding)} decide{'s' if len(deciding) == 1 else ''} the outcome"
    if context:
        text += f"; {', '.join(context)} {'is' if len(context) == 1 else 'are'} context"
    return text + "."


def _context(analysis: Analysis) -> str:
    """What the comparisons that do not decide found, when they found a regression: the
    parent against production, in a three-sided experiment."""
    found = analysis.context_regressions
    if not found:
        return ""
    names = _names(found, limit=3, with_effect=True, chained=True)
    return f"; not deciding: regression in {names}"


def headline(report: ExperimentReport) -> Headline:
    """The experiment's outcome in one line, for titles, PR comments and logs."""
    prefix = "A/A check: " if report.kind == "aa" else ""
    progress = f"{report.trials_done} of {report.trials} trials"
    if report.phase == "failed":
        reason = (report.failure or "").strip().splitlines()
        return Headline("failed", f"{prefix}failed: {reason[0] if reason else 'no reason given'}")
    if report.phase == "cancelled":
        return Headline("cancelled", f"{prefix}cancelled after {progress}")
    analysis = report.analysis
    if analysis is None:
        if report.phase == "done":
            return Headline("inconclusive", f"{prefix}done, but nothing was analysed")
        return Headline("running", f"{prefix}{report.phase}: {progress} done")
    # Only the deciding comparisons set the outcome; in a three-sided experiment the
    # parent's difference from production is told after it (it is already in production).
    chained = analysis.chained
    deciding = tuple(r for r in analysis.results if analysis.decides(r.candidate))
    context = _context(analysis)
    regressions = analysis.regressions
    if regressions:
        found = _names(regressions, limit=3, with_effect=True, chained=chained)
        if report.kind == "aa":
            # A and B are the same build, so any difference is the lab's noise, not code.
            return Headline("regression", f"{prefix}false alarm in {found}{context}")
        return Headline("regression", f"regression found in {found}{context}")
    unsure = tuple(r for r in deciding if r.verdict.label == "inconclusive")
    if unsure:
        names = _names(unsure, limit=3, with_effect=False, chained=chained)
        return Headline(
            "inconclusive",
            f"{prefix}inconclusive: {len(unsure)} of {len(deciding)} metrics neither "
            f"show nor rule out a regression ({names}){context}",
        )
    better = tuple(r for r in deciding if r.verdict.label == "improvement")
    text = f"{prefix}no regression in {len(deciding)} metrics"
    pairs = {comparison_text(r) for r in deciding}
    if chained and len(pairs) == 1:
        text += f" of {next(iter(pairs))}"
    if better:
        text += f"; improved: {_names(better, limit=3, with_effect=True, chained=chained)}"
    return Headline("no regression", text + context)


def _labels(column: pa.ChunkedArray | None, n: int) -> tuple[IntArray, list[Any]]:
    """Integer codes and the label of each code, labels sorted (None last)."""
    if column is None:
        return np.zeros(n, dtype=np.int64), [None]
    encoded = pc.dictionary_encode(column).combine_chunks()
    raw = np.asarray(
        pc.fill_null(pc.cast(encoded.indices, pa.int64()), -1).to_numpy(zero_copy_only=False),
        dtype=np.int64,
    )
    labels: list[Any] = encoded.dictionary.to_pylist()
    if (raw < 0).any():
        raw = np.where(raw < 0, len(labels), raw)
        labels.append(None)
    # One column has one type, so labels compare; the single None (if any) goes last.
    order = sorted(
        range(len(labels)),
        key=lambda i: (labels[i] is None, labels[i] if labels[i] is not None else 0),
    )
    rank = np.empty(len(labels), dtype=np.int64)
    rank[order] = np.arange(len(labels))
    return rank[raw], [labels[i] for i in order]


def _is_series(t: FloatArray | None, codes: IntArray) -> bool:
    """Whether every trial has a time series long enough to look for warm-up in."""
    if t is None or len(t) == 0 or np.all(t == t[0]):
        return False
    return bool(np.unique(codes, return_counts=True)[1].min() >= _MIN_SERIES_ROWS)


def metric_trials(
    observations: Observations, analysis: Analysis | None = None
) -> tuple[MetricTrials, ...]:
    """Per-trial means of every metric and arm, after the warm-up cut the analysis made.

    A series is cut when the analysis cut rows from it, or when there is no analysis yet (as
    the default analysis would); a series the analysis left whole is left whole here too.
    """
    cut_by_analysis: dict[str, bool] = {}
    if analysis is not None:
        for r in analysis.results:
            cut_by_analysis[r.metric] = cut_by_analysis.get(r.metric, False) or bool(
                r.warmup_rows_cut
            )
    table = observations.table
    out: list[MetricTrials] = []
    for metric in observations.metrics:
        rows = table.filter(pc.equal(table.column("metric"), metric))
        arms = rows.column("arm").to_numpy(zero_copy_only=False)
        values = rows.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
        t = (
            rows.column("t").to_numpy(zero_copy_only=False).astype(np.float64)
            if "t" in rows.column_names
            else None
        )
        codes, labels = _labels(
            rows.column("trial") if "trial" in rows.column_names else None, len(values)
        )
        by_arm: dict[str, tuple[TrialValue, ...]] = {}
        series_seen = False
        for arm in observations.arms:
            mask = arms == arm
            if not mask.any():
                continue
            arm_t = None if t is None else t[mask]
            series = _is_series(arm_t, codes[mask])
            series_seen = series_seen or series
            cut = series and cut_by_analysis.get(metric, analysis is None)
            by_arm[arm] = _arm_trials(values[mask], codes[mask], arm_t, labels, cut=cut)
        out.append(MetricTrials(metric=metric, series=series_seen, by_arm=by_arm))
    return tuple(out)


def _arm_trials(
    values: FloatArray, codes: IntArray, t: FloatArray | None, labels: list[Any], *, cut: bool
) -> tuple[TrialValue, ...]:
    cut_rows: dict[int, int] = {}
    cut_at: dict[int, float | None] = {}
    if cut and t is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateDataWarning)
            found = cut_warmup(
                MetricSample.from_arrays(values, np.zeros(len(values)), trial=codes, t=t)
            )
        assert found.sample.trial is not None  # a trial column went in
        values, codes = found.sample.value, found.sample.trial
        for trial_cut in found.cuts:
            code = int(trial_cut.trial or 0)
            cut_rows[code], cut_at[code] = trial_cut.n_cut, trial_cut.cut_t_s
    trials: list[TrialValue] = []
    for code in np.unique(codes):
        kept = values[codes == code]
        trials.append(
            TrialValue(
                trial=labels[int(code)],
                value=float(np.mean(kept)),
                rows=len(kept),
                rows_cut=cut_rows.get(int(code), 0),
                cut_t_s=cut_at.get(int(code)),
            )
        )
    return tuple(trials)


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def analysis_json(analysis: Analysis) -> dict[str, object]:
    """The JSON contract of ``hairline analyze --json``: one object per metric and arm.

    ``regression`` is true when a deciding comparison found one (every comparison decides
    unless arms name baselines of their own; see :attr:`Analysis.deciding`)."""
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
    - ``mode``: ``"efficiency"``, or ``"hardware"`` when the arms are host classes.
    - ``analysis``: null until analysed, else the object of ``hairline analyze --json``
      (:func:`analysis_json`): ``source``, ``baseline``, ``alpha``,
      ``correction``, ``regression`` (of the deciding comparisons), ``comparisons``
      (``[{"arm", "baseline", "deciding"}]``), and ``metrics``, one object per metric and
      candidate arm with ``baseline`` (the arm it was compared with), ``deciding``,
      ``effect_rel``, ``ci_rel``, ``effect_abs``, ``ci_abs``, ``mean_a``,
      ``mean_b``, ``p_value``, ``p_adjusted``, ``model``, ``model_reason``, ``threshold``,
      ``threshold_kind``, ``direction``, ``verdict``, ``reason``, ``n_a``, ``n_b``,
      ``warmup_rows_cut``, ``warnings``.
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
        "trials": report.trials,
        "trials_done": report.trials_done,
        "rate_per_s": report.rate_per_s,
        "duration_s": report.duration_s,
        "model": report.model,
        "html_path": report.html_path,
        "notes": list(report.notes),
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
        "analysis": None if report.analysis is None else analysis_json(report.analysis),
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
