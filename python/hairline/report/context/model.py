"""What every experiment report renders: one experiment as the lab's database knows it.

The lab builds an :class:`ExperimentReport` (metadata, arms, hosts, the analysis and the
observations, each possibly absent while an experiment runs or after it failed); the
terminal, Markdown, HTML and JSON renderers read nothing else. Everything in
``hairline.report.context`` is pure: no I/O, no clock.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from hairline.kit.jsonout import documented
from hairline.lab.analysis import Analysis
from hairline.lab.calibrate import Calibration
from hairline.lab.concurrency import Overlap
from hairline.lab.functions import FunctionAnalysis
from hairline.stats.certificate import AaRecord
from hairline.store.observations import Observations

__all__ = [
    "ArmReport",
    "CapacityCurve",
    "CurvePoint",
    "ExperimentReport",
    "HostPair",
    "HostReport",
]


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


@documented
@dataclass(frozen=True)
class CurvePoint:
    """One probe of capacity mode's search: the offered rate and what the arm did at it."""

    rate_per_s: float
    """The offered rate."""
    p99_ms: float
    served_per_s: float
    duration_s: float
    passed: bool
    """Whether the probe met the SLO."""


@documented
@dataclass(frozen=True)
class CapacityCurve:
    """One arm's search in one batch (lab/capacity.py): its latency/throughput curve and
    the knee it found (``max_rate_per_s``)."""

    arm: str
    trial: int
    batch: int
    max_rate_per_s: float
    """The knee: the highest rate that met the SLO."""
    slo_p99_ms: float
    stopped_by: str
    """What ended the search (e.g. "max_rate" when it reached ``max_rate_per_s``)."""
    points: tuple[CurvePoint, ...]
    """The probes, in the order they ran."""


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
class HostPair:
    """One host pair of an experiment: its hosts' names (one per arm) and its trials."""

    pair: int  # 0-based; shown 1-based
    hosts: tuple[str, ...]
    trials: int


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
    # How the rate was calibrated (None when the file gave it); its note is in ``notes``.
    calibration: Calibration | None = None
    # "hardware": one build, the arms are host classes and the verdict compares them;
    # "capacity": the arms' highest rates under the SLO are compared.
    mode: str = "efficiency"
    # Capacity mode: each arm's search in each accepted batch.
    curves: tuple[CapacityCurve, ...] = ()
    # Other experiments and events on its hosts or downstreams while its trials ran
    # (lab/concurrency.py); every renderer warns about them at the top.
    overlaps: tuple[Overlap, ...] = ()
    # Each metric's verdicts on the service's A/A experiments the analysis used as its
    # history ({} without one): half of each verdict's certificate (context/certificate.py).
    aa_records: dict[str, AaRecord] = field(default_factory=dict)
    # [service.profile]: the functions of each candidate against its baseline
    # (lab/functions.py), and, when there are none, why.
    functions: tuple[FunctionAnalysis, ...] = ()
    functions_note: str = ""
    # Each profiled arm's stacks (function names, root first) and their CPU ns per
    # request, the mean over its accepted batches (the runs folder's folded files): the
    # differential flame graph's.
    flame_stacks: Mapping[str, Mapping[tuple[str, ...], float]] = field(default_factory=dict)
    # The functions the diff suggester named when the experiment ran --suggested-by (the
    # source's names, a renamed one's old name too); the reports mark them.
    suggested_functions: tuple[str, ...] = ()
    # When each trial that ended "done" ended, by its index (the observations' trial): the
    # time of its per-trial values where they are exported (report/otlp.py).
    trial_ended_at: Mapping[int, datetime] = field(default_factory=dict)
    # The host pairs whose trials ran side by side ([design] host_pairs on the ray
    # backend; context/pairs.py); () when they ran on one pair.
    host_pairs: tuple[HostPair, ...] = ()

    @property
    def chained(self) -> bool:
        """Whether arms are compared with different baselines (a three-sided experiment),
        so that each arm's line names the arm it is compared with."""
        return len({a.baseline for a in self.arms if a.baseline is not None}) > 1
