"""The JSON contract's shapes: what ``hairline run/aa/report --json`` and ``hairline analyze
--json`` write (``contract.py`` builds them; mypy holds it to these types), and what
docs/schema/experiment-report.json and analysis.json are generated from. A field's
docstring is its description there."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict

from hairline.kit.jsonout import documented
from hairline.report.context.capacity import ArmCapacity
from hairline.report.context.functions import FunctionsJson
from hairline.report.context.model import CapacityCurve
from hairline.report.context.text import Status
from hairline.stats.certificate import CertificateJson
from hairline.stats.verdict import Correction, Direction, Label, ThresholdKind

__all__ = [
    "AnalysisJson",
    "ArmJson",
    "CalibrationJson",
    "CalibrationStepJson",
    "CandidateRateJson",
    "ClusteredJson",
    "ComparisonJson",
    "ExperimentJson",
    "HeadlineJson",
    "HostJson",
    "HostPairJson",
    "MetricJson",
    "MetricTrialsJson",
    "OverlapJson",
    "TrialValueJson",
]


@documented
class ComparisonJson(TypedDict):
    """A candidate arm and the arm it is compared with."""

    arm: str
    baseline: str
    deciding: bool
    """Whether its verdicts decide the outcome (every comparison decides, except a
    three-sided experiment's parent against production)."""


@documented
class MetricJson(TypedDict):
    """One metric of one candidate arm against its baseline."""

    metric: str
    arm: str
    """The candidate."""
    baseline: str
    """The arm it was compared with."""
    deciding: bool
    effect_rel: float
    """The candidate's change relative to the baseline's mean (0.05: 5% higher)."""
    ci_rel: tuple[float, float]
    """The relative effect's confidence interval."""
    effect_abs: float
    """The change in the metric's units."""
    ci_abs: tuple[float, float]
    mean_a: float
    """The baseline's mean."""
    mean_b: float
    """The candidate's mean."""
    p_value: float
    p_adjusted: float
    """After the correction across metrics."""
    model: str
    """The statistical model that compared them."""
    model_reason: str
    """Why that model (adaptive selection's reason)."""
    threshold: float
    """The smallest change that matters, relative or absolute as ``threshold_kind``."""
    threshold_kind: ThresholdKind
    direction: Direction
    verdict: Label
    reason: str
    """Why this verdict, in words."""
    n_a: int
    """The baseline's observations (trials)."""
    n_b: int
    warmup_rows_cut: int
    """Rows cut as warm-up before the comparison."""
    warnings: list[str]
    certificate: CertificateJson
    by_host_pair: ClusteredJson | None
    """Trials on several host pairs: the same comparison with the host pair as the
    cluster; null on one pair."""


@documented
class ClusteredJson(TypedDict):
    """A comparison with the host pair as the cluster (the clustered bootstrap)."""

    effect_rel: float
    ci_rel: tuple[float, float]
    effect_abs: float
    ci_abs: tuple[float, float]
    p_value: float
    clusters: int
    """Host pairs: the clusters."""


@documented
class AnalysisJson(TypedDict):
    """An analysis: one object per metric and candidate arm (``hairline analyze --json``)."""

    source: str
    """The observations analysed."""
    baseline: str
    """The experiment's baseline arm."""
    alpha: float
    correction: Correction
    regression: bool
    """Whether a metric of a deciding comparison is a regression."""
    comparisons: list[ComparisonJson]
    metrics: list[MetricJson]


@documented
class OverlapJson(TypedDict):
    """Another experiment or an event on the experiment's hosts, machines or downstreams
    while its trials ran."""

    kind: str
    """"experiment", "deploy", "maintenance" or "other"."""
    what: str
    """"experiment 12 (svc)", or the event's service."""
    reason: str
    """"same host w2", "same machine m1", "same downstream 127.0.0.1:5432"."""
    started_at: str | None
    """ISO 8601."""
    ended_at: str | None
    """ISO 8601; null for an event at a point in time."""
    trials: list[int]
    """The trials (from 1) it overlapped."""
    note: str
    """An event's note."""
    text: str
    """The report's warning."""


@documented
class HeadlineJson(TypedDict):
    """The outcome and the line that says it."""

    status: Status
    text: str


@documented
class ArmJson(TypedDict):
    """One arm: what was built and how it was started."""

    name: str
    source: str
    """"path /x/y", "git 1a2b3c4 (main)", "same as A"."""
    build_key: str | None
    """The build's content hash; null when nothing was built."""
    build_cached: bool | None
    """Whether the build came from the cache."""
    build_log: str | None
    args: list[str]
    """Words the arm adds to the start command."""
    env: dict[str, str]
    """Variables the arm adds to the environment."""
    baseline: str | None
    """The arm it is compared with; null for the experiment's baseline."""


@documented
class HostPairJson(TypedDict):
    """A host pair whose trials ran beside the others' ([design] host_pairs)."""

    pair: int
    """0-based; the observations' hosts ``pair * arms`` to ``pair * arms + arms - 1``."""
    hosts: list[str]
    """Its hosts' names, one per arm (a replacement's listed too)."""
    trials: int
    """Done trials it ran."""


@documented
class HostJson(TypedDict):
    """A host the experiment ran on (a host index a replacement took over is listed
    again)."""

    host: int
    """The host index the observations use."""
    name: str
    """The inventory's name: "machine/cpu2" locally, the node's elsewhere."""
    address: str | None
    """Where its arms were reached; null for local CPU sets."""
    cpus: list[int]
    facts: dict[str, str]
    """Region, server type, CPU model, arch, kernel, turbo, ..."""


@documented
class CalibrationStepJson(TypedDict):
    """One step of calibration's ramp: a few seconds at one rate on the baseline."""

    rate_per_s: float
    utilization: float
    """The baseline copies' CPU over their CPUs' time, their mean."""
    cpu_ns_per_request: float
    passed: bool
    """Whether every gate held, no host's CPUs were past their limit, and the arm served
    the rate without errors."""
    note: str
    """What failed, when something did."""


@documented
class CandidateRateJson(TypedDict):
    """A candidate rate of calibration for precision, and its short paired A/A steps."""

    rate_per_s: float
    utilization: float
    """The baseline's mean utilisation over its steps."""
    steps: int
    """Steps run (at most the first failing one)."""
    sd_per_trial_rel: float | None
    """The relative standard deviation of an A/A trial's effect (two consecutive steps,
    the arms swapped between them) in the scored metric; null when a step failed."""
    passed: bool
    note: str
    """Why it was left out, when it was."""
    host_differences: list[float | None]
    """Each step's log ratio of the copy on host 0's value to the copy on host 1's (null
    when not measured): consecutive ones give ``sd_per_trial_rel``."""


@documented
class CalibrationJson(TypedDict):
    """How the replay rate was found when the experiment file named none (docs/lab.md,
    "Calibrated load")."""

    rate_per_s: float
    """The rate chosen."""
    mode: Literal["precision", "utilization"]
    """"precision": the candidate at which the deciding metric was most precise per
    minute; "utilization": the rate at which the baseline was ``target_utilization`` busy."""
    target_utilization: float | None
    metric: str | None
    """The metric candidates were scored on; null in utilisation mode."""
    servable_rate_per_s: float | None
    """The highest rate the ramp saw served with every gate holding."""
    reason: str
    """The choice in words ("" in utilisation mode)."""
    seconds: float
    """The calibration's wall time (0 when not recorded)."""
    aa_step_s: float
    """Each A/A step's length."""
    candidates: list[CandidateRateJson]
    steps: list[CalibrationStepJson]


@documented
class TrialValueJson(TypedDict):
    """One arm's value of one metric in one trial."""

    trial: int | str | None
    """The trial as the observations name it."""
    value: float
    """The mean of the rows kept after the warm-up cut."""
    rows: int
    """Rows kept."""
    rows_cut: int
    """Warm-up rows cut before the mean."""
    cut_t_s: float | None
    """For a time series, the time of the first kept row."""


@documented
class MetricTrialsJson(TypedDict):
    """One metric's values per trial, for every arm that measured it."""

    series: bool
    """Whether the metric is a time series (in which warm-up is looked for)."""
    arms: dict[str, list[TrialValueJson]]
    """Per arm, its trials in order."""


@documented
class ExperimentJson(TypedDict):
    """One experiment: its metadata, arms, hosts, analysis and per-trial values
    (``hairline run/aa/demo/report --json``, ``status ID --json``)."""

    schema: int
    """The contract's version, bumped when a key changes meaning or disappears (adding
    keys does not)."""
    experiment_id: int
    service: str
    kind: Literal["ab", "aa"]
    phase: str
    """queued, building, allocating, running, analyzing, done, failed or cancelled."""
    failure: str | None
    """The reason when the phase is failed."""
    created_at: str | None
    """ISO 8601."""
    started_at: str | None
    finished_at: str | None
    design: str
    mode: str
    """"efficiency", "hardware" when the arms are host classes, or "capacity"."""
    capacity: list[ArmCapacity]
    """Capacity mode: each arm's highest rate under the SLO."""
    curves: list[CapacityCurve]
    """Capacity mode: each arm's probes per batch, with its knee."""
    trials: int
    trials_done: int
    rate_per_s: float
    duration_s: float
    model: str
    """"adaptive" or a model's name."""
    html_path: str | None
    notes: list[str]
    """About the measurement, such as failed load gates."""
    calibration: CalibrationJson | None
    """How the rate was calibrated; null when the file gave it."""
    functions: FunctionsJson
    overlaps: list[OverlapJson]
    headline: HeadlineJson
    regression: bool
    """Whether a metric of a deciding comparison is a regression."""
    arms: list[ArmJson]
    hosts: list[HostJson]
    host_pairs: list[HostPairJson]
    """The host pairs whose trials ran side by side; [] when they ran on one pair."""
    analysis: AnalysisJson | None
    """Null until analysed."""
    per_trial: dict[str, MetricTrialsJson]
    """Per metric, the values its verdict stands on; {} when nothing was measured."""
