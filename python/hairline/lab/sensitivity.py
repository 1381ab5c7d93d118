"""How small a change an experiment file can see: a service's noise, measured with A/A
trials, as the minimum detectable effect against trials and minutes (#30 item 5).

Each A/A trial's relative effect (arm A' against arm A, the same build) is one draw of the
noise a trial carries (ServiceLab section 4, figure 6): their standard deviation ``sd`` is
the per-trial spread of every later A/B on this file. ``n`` trials detect, with ``power``
in a two-sided t test at ``alpha``, a true change of at least the MDE the noncentral t gives
(stats/planning.py ``detectable_effect``); a trial costs the wall time the A/A's trials
took. :func:`sensitivity_from_aa` is pure; :func:`aa_trials_of` reads a finished A/A.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NotRequired

import pyarrow.compute as pc
from sqlalchemy import select
from typing_extensions import TypedDict

from hairline.errors import DataError
from hairline.kit.jsonout import documented
from hairline.lab.results import experiment_observations
from hairline.stats.pairtime import trials_on_pairs
from hairline.stats.planning import detectable_effect, trial_effects
from hairline.store.db import Store
from hairline.store.models import Experiment, Trial
from hairline.store.observations import Observations, observations_from_table

__all__ = [
    "DEFAULT_TRIALS_GRID",
    "HostNoise",
    "MetricSensitivity",
    "NoiseByHost",
    "PairsJson",
    "SensitivityJson",
    "SensitivityReport",
    "aa_trials_of",
    "noise_by_host",
    "sensitivity_from_aa",
]

DEFAULT_TRIALS_GRID = (2, 3, 4, 6, 8, 12, 16, 24, 32)


@dataclass(frozen=True)
class MetricSensitivity:
    """One metric: its per-trial spread and the MDE at each number of trials of the grid
    (a fraction: 0.01 is 1%)."""

    metric: str
    aa_trials: int
    sd_per_trial: float
    mde_by_trials: tuple[tuple[int, float], ...]


@documented
class MdeJson(TypedDict):
    """The minimum detectable effect of one number of trials."""

    trials: int
    minutes: float
    """What that many trials take, at the A/A's median trial time."""
    mde_rel: float
    """The smallest true relative change those trials detect with the power asked."""
    on_pairs: list[PairsJson]
    """Those trials on host pairs side by side: rounds and minutes per number of pairs
    (the MDE stays that of the trials)."""


@documented
class PairsJson(TypedDict):
    """Trials spread over host pairs side by side: one trial per pair at a time."""

    host_pairs: int
    rounds: int
    """ceil(trials / host_pairs): trial times one after another."""
    minutes: float


@documented
class MetricSensitivityJson(TypedDict):
    """One metric's noise per trial and its MDE against trials."""

    metric: str
    aa_trials: int
    """The A/A trials its spread comes from."""
    sd_per_trial_rel: float
    """The standard deviation of an A/A trial's relative effect."""
    mde_rel: list[MdeJson]


@documented
class SkippedJson(TypedDict):
    """A metric with no usable spread, and why."""

    metric: str
    why: str


@documented
class HostNoiseJson(TypedDict):
    """One host's batch values of a metric in the A/A, relative to the grand mean."""

    host: int
    offset_rel: float
    """How far its mean sits from the mean of all."""
    sd_rel: float
    """How much it varies from batch to batch."""


@documented
class NoiseByHostJson(TypedDict):
    """Where a 2-host A/A's per-trial noise of a batch-level metric comes from."""

    metric: str
    batches: int
    common_corr: float
    """The correlation of the two hosts' batch values (what swapping the arms cancels)."""
    hosts: list[HostNoiseJson]


@documented
class SensitivityJson(TypedDict):
    """How small a change an experiment file can see (``hairline sensitivity --json``;
    docs/precision.md)."""

    experiment_id: NotRequired[int]
    """The A/A experiment measured."""
    source: str
    """Its observations."""
    alpha: float
    power: float
    trial_s: float
    """The median wall time of one A/A trial, in seconds."""
    metrics: list[MetricSensitivityJson]
    skipped: list[SkippedJson]
    by_host: list[NoiseByHostJson]


@dataclass(frozen=True)
class SensitivityReport:
    source: str
    alpha: float
    power: float
    trial_s: float  # the median wall time of one A/A trial
    metrics: tuple[MetricSensitivity, ...]
    skipped: tuple[tuple[str, str], ...]  # (metric, why) of metrics with no usable spread
    by_host: tuple[NoiseByHost, ...] = ()  # where each batch-level metric's noise comes from
    # Numbers of host pairs to give each number of trials' time on (the ray backend's
    # [design] host_pairs): ceil(trials / pairs) trial times.
    host_pairs: tuple[int, ...] = (1,)

    def minutes(self, trials: int, host_pairs: int = 1) -> float:
        (on,) = trials_on_pairs(trials, (host_pairs,), self.trial_s)
        assert on.minutes is not None  # a trial time was given
        return on.minutes

    def on_pairs(self, trials: int) -> list[PairsJson]:
        return [
            {"host_pairs": p.host_pairs, "rounds": p.rounds, "minutes": p.minutes or 0.0}
            for p in trials_on_pairs(trials, self.host_pairs, self.trial_s)
        ]

    def to_json(self) -> SensitivityJson:
        return {
            "source": self.source,
            "alpha": self.alpha,
            "power": self.power,
            "trial_s": self.trial_s,
            "metrics": [
                {
                    "metric": m.metric,
                    "aa_trials": m.aa_trials,
                    "sd_per_trial_rel": m.sd_per_trial,
                    "mde_rel": [
                        {
                            "trials": n,
                            "minutes": self.minutes(n),
                            "mde_rel": v,
                            "on_pairs": self.on_pairs(n),
                        }
                        for n, v in m.mde_by_trials
                    ],
                }
                for m in self.metrics
            ],
            "skipped": [{"metric": m, "why": why} for m, why in self.skipped],
            "by_host": [split.to_json() for split in self.by_host],
        }


def sensitivity_from_aa(
    observations: Observations,
    *,
    trial_s: float,
    alpha: float = 0.05,
    power: float = 0.8,
    trials_grid: Sequence[int] = DEFAULT_TRIALS_GRID,
    metrics: Sequence[str] | None = None,
    host_pairs: Sequence[int] = (1,),
) -> SensitivityReport:
    """Per metric of an A/A experiment's observations (``metrics``: these only): the
    per-trial spread of its relative effect and the MDE at each number of trials."""
    found: list[MetricSensitivity] = []
    skipped: list[tuple[str, str]] = []
    for metric, _, sample in observations.samples():
        if metrics is not None and metric not in metrics:
            continue
        if sample.trial is None:
            raise DataError(
                f"{observations.source}: the sensitivity needs the 'trial' column",
                hint="each A/A trial's effect is one draw of the per-trial noise",
            )
        effects = [e for e in trial_effects(sample).tolist() if math.isfinite(e)]
        if len(effects) < 3:
            skipped.append((metric, f"{len(effects)} usable trial effects; 3 are needed"))
            continue
        sd = statistics.stdev(effects)
        if sd == 0.0:
            skipped.append((metric, "the A/A trials' effects do not vary (a constant)"))
            continue
        mde = tuple((n, detectable_effect(sd, n, alpha=alpha, power=power)) for n in trials_grid)
        found.append(MetricSensitivity(metric, len(effects), sd, mde))
    splits = (noise_by_host(observations, m.metric) for m in found)
    return SensitivityReport(
        source=observations.source, alpha=alpha, power=power, trial_s=trial_s,
        metrics=tuple(found), skipped=tuple(skipped),
        by_host=tuple(split for split in splits if split is not None),
        host_pairs=tuple(host_pairs) or (1,),
    )  # fmt: skip


@dataclass(frozen=True)
class HostNoise:
    """One host's batch values of a metric in an A/A: how far its mean sits from the
    mean of all (``offset_rel``: the CPU the engine shares reads lower CPU per request) and
    how much it varies from batch to batch (``sd_rel``), both relative to the grand mean."""

    host: int
    offset_rel: float
    sd_rel: float


@dataclass(frozen=True)
class NoiseByHost:
    """Where a 2-host A/A's per-trial noise comes from. With the arms swapped between a
    trial's two batches, an A/A trial's effect is exactly half the change, from one batch
    to the next, of the difference between the hosts: a host offset that stays put cancels,
    and so does whatever moves both hosts alike (``common_corr``, the correlation of their
    batch values); what is left is each host's own batch-to-batch variation."""

    metric: str
    batches: int
    hosts: tuple[HostNoise, ...]
    common_corr: float

    def to_json(self) -> NoiseByHostJson:
        return {
            "metric": self.metric,
            "batches": self.batches,
            "common_corr": self.common_corr,
            "hosts": [
                {"host": h.host, "offset_rel": h.offset_rel, "sd_rel": h.sd_rel} for h in self.hosts
            ],
        }


def noise_by_host(observations: Observations, metric: str) -> NoiseByHost | None:
    """The host split of ``metric``'s noise in a 2-host A/A with one value per batch and
    host (None otherwise: other layouts, per-request metrics)."""
    table = observations.table
    if "host" not in table.column_names or "batch" not in table.column_names:
        return None
    rows = table.filter(pc.equal(table["metric"], metric)).select(
        ["trial", "batch", "host", "value"]
    )
    by_batch: dict[tuple[int, int], dict[int, float]] = {}
    for trial, batch, host, value in zip(
        *(rows[c].to_pylist() for c in rows.column_names), strict=True
    ):
        cell = by_batch.setdefault((trial, batch), {})
        if host in cell:
            return None  # several values per batch and host: a per-request metric
        cell[host] = value
    pairs = [cell for cell in by_batch.values() if len(cell) == 2]
    hosts = sorted({h for cell in pairs for h in cell})
    if len(hosts) != 2 or len(pairs) < 3:
        return None
    mean = statistics.fmean(v for cell in pairs for v in cell.values())
    series = {h: [cell[h] / mean for cell in pairs] for h in hosts}
    return NoiseByHost(
        metric=metric,
        batches=len(pairs),
        hosts=tuple(
            HostNoise(h, statistics.fmean(series[h]) - 1.0, statistics.stdev(series[h]))
            for h in hosts
        ),
        common_corr=statistics.correlation(series[hosts[0]], series[hosts[1]]),
    )


def aa_trials_of(store: Store, experiment_id: int) -> tuple[Observations, float]:
    """A finished A/A experiment's observations and the median wall time of its trials."""
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        if row is None:
            raise DataError(f"experiment {experiment_id} does not exist in {store.shown_url}")
        if row.kind != "aa" or row.phase != "done":
            raise DataError(
                f"experiment {experiment_id} is a {row.kind} experiment in phase {row.phase}",
                hint="the sensitivity is measured on a finished A/A experiment "
                "(`hairline sensitivity FILE` runs one)",
            )
        spans = [
            finished - started
            for started, finished in session.execute(
                select(Trial.started_at, Trial.finished_at).where(
                    Trial.experiment_id == experiment_id, Trial.state == "done"
                )
            )
            if started is not None and finished is not None
        ]
    table = experiment_observations(store, experiment_id)
    if table is None or not spans:
        raise DataError(f"experiment {experiment_id} has no finished trials")
    source = f"A/A experiment {experiment_id}"
    return observations_from_table(table, source=source), statistics.median(spans)
