"""The lab's sections of an experiment file: ``[mode]``, ``[load]``, ``[design]``,
``[analysis]``, ``[hosts]``, and the host class an arm names in hardware mode.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hairline.collect.summary import CPU_PER_REQUEST

__all__ = [
    "CAPACITY_FIELDS",
    "HOST_CLASS_FACTS",
    "AnalysisConfig",
    "DesignConfig",
    "HostClassConfig",
    "HostsConfig",
    "LoadConfig",
    "ModeConfig",
    "ScoreConfig",
    "ScoreGroup",
    "TomlModel",
]


class TomlModel(BaseModel):
    """A table of a TOML file: an unknown field is an error, and values never change. A
    field's docstring is its description in the file's JSON Schema (docs/schema/)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# The facts a hardware-mode arm may ask of its host (hosts/similar.py's ARM_FACTS).
HOST_CLASS_FACTS = ("server_type", "cpu_arch", "cpu_model", "kernel", "turbo")


class HostClassConfig(TomlModel):
    """``[arms.NAME] hosts = { cpu_model = "..." }``: in hardware mode, the machines this
    arm is (ServiceLab section 2); every fact not named here matches between the arms."""

    server_type: str | None = Field(default=None, min_length=1)
    """The machine type, as the host's facts name it (``hairline lab hosts``)."""
    cpu_arch: str | None = Field(default=None, min_length=1)
    """The CPU architecture, e.g. "x86_64"."""
    cpu_model: str | None = Field(default=None, min_length=1)
    """The CPU model, as /proc/cpuinfo names it."""
    kernel: str | None = Field(default=None, min_length=1)
    """The kernel release, as ``uname -r`` prints it."""
    turbo: Literal["on", "off"] | None = None
    """Whether the CPU's turbo boost is on."""

    def facts(self) -> dict[str, str]:
        """The named facts, by host column name."""
        return {k: v for k in HOST_CLASS_FACTS if (v := getattr(self, k)) is not None}


class HostsConfig(TomlModel):
    """``[hosts]``: how nearly identical an experiment's machines must be (docs/hosts.md).
    ``max_cov``: a CPU model or kernel whose coefficient of variation in the service's
    past A/A runs is above this is avoided; "off" never avoids. ``pin``: per arm, the
    hosts (by name) it may run on, e.g. ``{ control = ["w2"], test = ["w3"] }``: an
    autotuning run's test and control clusters (tune/clusters.py); the arms then stay on
    their hosts (``[design] name = "pinned"``)."""

    max_cov: float | Literal["off"] = 0.05
    """Avoid a CPU model or kernel whose coefficient of variation in the service's past A/A
    runs is above this fraction (0.05 for 5%); "off" never avoids."""
    pin: dict[str, list[str]] = Field(default_factory=dict)
    """Per arm, the hosts (by name) it may run on; the design is then "pinned"."""
    local_layout: Literal["split", "duet"] = "split"
    """On the local backend: "split" gives each arm CPUs of its own; "duet" runs every arm
    on the same CPUs and the engine on the last one, so that whatever slows a CPU slows
    every arm alike (on a 2-vCPU VM, nginx's A/A interval at 30 trials read +/-0.28%
    against +/-1.5 to 2.9% split; docs/hosts.md). A duet halves each arm's CPU."""

    @field_validator("max_cov", mode="before")
    @classmethod
    def _cov_in_range(cls, value: object) -> object:
        if value == "off" or (isinstance(value, int | float) and 0 < value <= 10):
            return value
        raise ValueError(f'{value!r}: max_cov is a fraction above 0 (0.05 for 5%), or "off"')

    @property
    def cov_limit(self) -> float | None:
        return None if self.max_cov == "off" else float(self.max_cov)


class LoadConfig(TomlModel):
    """``[load]``. Without ``rate_per_s`` the lab calibrates it: by default the rate at
    which the deciding metric is most precise per minute in short paired A/A steps, below
    the highest rate the lab serves with every gate holding; with ``target_utilization``
    the rate at which the baseline's CPUs are that busy (docs/lab.md, "Calibrated load")."""

    rate_per_s: float | None = Field(default=None, gt=0)
    """The replay's rate, open loop, both arms in lockstep; leave it out to calibrate it."""
    target_utilization: float | None = Field(default=None, gt=0, le=1)
    """Calibrate to this fraction of the baseline's CPUs kept busy instead of for
    precision (leave both it and ``rate_per_s`` out to calibrate for precision)."""
    duration_s: float = Field(gt=0)
    """How long each batch replays the trace, in seconds."""
    calibration_steps: int = Field(default=8, ge=4, le=64)
    """When calibrating for precision: the paired 1 s A/A steps at each candidate rate.
    Fewer calibrate sooner (three candidates take about 3 s a step) and rank the rates
    less surely; four is the fewest that ranks them at all."""
    warmup_rate_per_s: float | None = Field(default=None, gt=0)
    """The warm-up's rate (default: ``rate_per_s``); also where calibration starts."""
    warmup_duration_s: float = Field(default=2.0, ge=0)
    """The warm-up lasts at least this long, and until every warm URL answers 2xx."""
    arrival: Literal["constant", "poisson"] = "constant"
    """The measurement's arrival process: evenly spaced, or Poisson (Treadmill's open loop
    with exponential gaps, which queues as real users do)."""


# More pairs than this is more hosts than one processor's threads and drivers should hold.
MAX_HOST_PAIRS = 64


class DesignConfig(TomlModel):
    """``[design]``. ``trials = "auto"`` runs trials until the verdict of every metric in
    ``decide_on`` is settled at its threshold, or ``max_trials`` (docs/stats.md,
    "Sequential trials")."""

    name: Literal["fully-balanced", "request-balanced", "pinned"] = "fully-balanced"
    """How arms meet hosts per trial. "pinned": each arm stays on its host for every batch,
    no swap (the host effect is then part of the difference): only with [hosts] pin,
    whose clusters passed an A/A."""
    trials: int | Literal["auto"] = Field(default=7)
    """Trials to run, 1 to 1000, or "auto": until every ``decide_on`` verdict is settled."""
    max_trials: int = Field(default=15, ge=3, le=1000)
    """With ``trials = "auto"``: the most trials run."""
    decide_on: list[str] = Field(default_factory=lambda: [CPU_PER_REQUEST.name], min_length=1)
    """With ``trials = "auto"``: the metrics whose verdicts must settle."""
    max_batch_attempts: int = Field(default=3, ge=1, le=20)
    """A spoiled batch is run again this many times at most."""
    mode: Literal["efficiency", "hardware"] = "efficiency"
    """"efficiency": the arms are builds, compared on alike hosts (swapped between batches).
    "hardware": one build; the arms are host classes (``[arms.X] hosts``), each arm stays
    on its host and the verdict compares the hardware (ServiceLab section 2)."""

    host_pairs: int | Literal["auto"] = Field(default=1)
    """Host pairs (one host per arm each) whose trials run side by side, 1 to 64, or
    "auto": as many as the inventory has free and the team's quota allows, at most one per
    trial. More than 1 only on the ray backend; the analysis clusters by host pair."""

    @field_validator("host_pairs", mode="before")
    @classmethod
    def _host_pairs_in_range(cls, value: object) -> object:
        if value == "auto" or (type(value) is int and 1 <= value <= MAX_HOST_PAIRS):
            return value
        raise ValueError(
            f'{value!r}: host_pairs is a whole number from 1 to {MAX_HOST_PAIRS}, or "auto"'
        )

    @property
    def most_host_pairs(self) -> int:
        """The most host pairs this experiment may use: the file's number, or under
        "auto" one per planned trial (a pair with no trial to run would idle)."""
        wanted = MAX_HOST_PAIRS if self.host_pairs == "auto" else int(self.host_pairs)
        return max(1, min(wanted, self.planned_trials))

    @field_validator("trials", mode="before")
    @classmethod
    def _trials_in_range(cls, value: object) -> object:
        # One message for both forms, instead of one per member of the union.
        if value == "auto" or (type(value) is int and 1 <= value <= 1000):
            return value
        raise ValueError(f'{value!r}: trials is a whole number from 1 to 1000, or "auto"')

    @property
    def sequential(self) -> bool:
        return self.trials == "auto"

    @property
    def planned_trials(self) -> int:
        """The trials to make room for: all of them, or at most ``max_trials``."""
        return self.max_trials if self.trials == "auto" else int(self.trials)

    @property
    def schedule(self) -> Literal["fully-balanced", "request-balanced", "pinned"]:
        """The schedule the lab runs: in hardware mode each arm stays on its host ("pinned":
        the hosts are the comparison), else the named design."""
        return "pinned" if self.mode == "hardware" else self.name


# capacity mode's settings: given in any other mode they are an error (config/checks.py).
CAPACITY_FIELDS = (
    "slo_p99_ms",
    "max_error_rate",
    "max_cpu_utilization",
    "probe_s",
    "tolerance",
    "start_rate_per_s",
    "max_rate_per_s",
    "search",
    "target",
    "target_latency_ms",
)


class ModeConfig(TomlModel):
    """``[mode]``: what an experiment measures (docs/capacity.md). "efficiency": the cost
    of serving the same replay (the default); "hardware": one build on different machines
    (also ``[design] mode = "hardware"``); "capacity": the highest rate each arm sustains
    under the SLO (``slo_p99_ms``, ``max_error_rate``, optionally
    ``max_cpu_utilization``), found by short probes of ``probe_s`` and confirmed at
    ``[load] duration_s``, to ``tolerance``. ``search = "pid"`` finds it instead with a
    PID controller (capacity/pid.py) that drives the rate to where the p99 meets
    ``slo_p99_ms`` (``target = "p99"``) or the mean meets ``target_latency_ms``
    (``target = "mean"``), then holds it for ``[load] duration_s``."""

    name: Literal["efficiency", "hardware", "capacity"] = "efficiency"
    """What the experiment measures."""
    slo_p99_ms: float | None = Field(default=None, gt=0)
    """Capacity mode: a rate passes while the p99 latency stays at or below this."""
    max_error_rate: float = Field(default=0.01, ge=0, le=1)
    """Capacity mode: a rate passes while the error rate stays at or below this."""
    max_cpu_utilization: float | None = Field(default=None, gt=0, le=1)
    """Capacity mode: a rate passes while the arm's CPU set is at most this busy (1.0:
    every CPU of the host busy all the time)."""
    probe_s: float = Field(default=1.0, gt=0)
    """Capacity mode: how long each short probe runs, in seconds (shorter than ``[load]
    duration_s``)."""
    tolerance: float = Field(default=0.02, gt=0, lt=0.5)
    """Capacity mode: the final bracket's relative width (0.02: the knee to within 2%)."""
    start_rate_per_s: float | None = Field(default=None, gt=0)
    """Capacity mode: where the search starts (default: ``[load] rate_per_s``, else 100);
    it doubles from here."""
    max_rate_per_s: float | None = Field(default=None, gt=0)
    """Capacity mode: no probe goes above this rate."""
    search: Literal["probe", "pid"] = "probe"
    """Capacity mode: bracket the knee with probes, or drive the rate with a PID
    controller."""
    target: Literal["p99", "mean"] = "p99"
    """With ``search = "pid"``: the latency the controller holds at its target."""
    target_latency_ms: float | None = Field(default=None, gt=0)
    """With ``search = "pid"`` and ``target = "mean"``: the mean latency to hold."""


# A score group's name: a query's ``weights=cpu:3,memory:1`` names it, so no ":" or ",".
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ScoreGroup(TomlModel):
    """``[analysis.score.groups.NAME]``: metrics scored together and the group's weight.
    ``metrics`` are names or shell patterns (``"latency_*"`` also matches
    ``latency_p99_us[/api]``); a metric belongs to the first group that names it.
    ``critical``: a failing metric of the group makes the score 0 (Kayenta's critical
    metrics)."""

    weight: float = Field(default=1.0, gt=0, le=1e6)
    """The group's weight in the score."""
    metrics: list[str] = Field(min_length=1)
    """Metric names or shell patterns; a metric belongs to the first group that names it."""
    critical: bool = False
    """A failing metric of the group makes the score 0."""

    @field_validator("metrics")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        if any(not name.strip() for name in value):
            raise ValueError("a metric name or pattern is empty")
        return value


class ScoreConfig(TomlModel):
    """``[analysis.score]``: the Kayenta-style score of an experiment's deciding verdicts
    (report/scorecard.py, docs/ci.md "Score"): at or above ``pass_score`` it passes, at or
    above ``marginal_score`` it is marginal, below it fails. Without ``groups`` every
    metric is in one group."""

    pass_score: float = Field(default=95.0, ge=0, le=100)
    """At or above this the score passes."""
    marginal_score: float = Field(default=75.0, ge=0, le=100)
    """At or above this (and below ``pass_score``) it is marginal; below, it fails."""
    groups: dict[str, ScoreGroup] = Field(default_factory=dict)
    """``[analysis.score.groups.NAME]``; without any, every metric is in one group."""

    @field_validator("groups")
    @classmethod
    def _group_names(cls, value: dict[str, ScoreGroup]) -> dict[str, ScoreGroup]:
        for name in value:
            if not _GROUP_NAME.match(name):
                raise ValueError(
                    f"group {name!r}: use letters, digits, '.', '_' and '-' (no ':' or ',')"
                )
        return value

    @model_validator(mode="after")
    def _ordered(self) -> ScoreConfig:
        if self.marginal_score > self.pass_score:
            raise ValueError(
                f"marginal_score {self.marginal_score:g} is above pass_score "
                f"{self.pass_score:g}: a marginal score lies between the two"
            )
        return self


class AnalysisConfig(TomlModel):
    """``[analysis]``: how the trials are compared (docs/stats.md)."""

    model: str = "adaptive"
    """The statistical model, or "adaptive": chosen per metric from the service's A/A
    history (``hairline analyze --help`` lists the models)."""
    alpha: float = Field(default=0.05, gt=0, lt=1)
    """The false-positive rate each verdict allows."""
    correction: Literal["none", "holm", "bh"] = "none"
    """The correction across metrics: none, Holm, or Benjamini-Hochberg."""
    seed: int = 0
    """The seed of the analysis's resampling."""
    score: ScoreConfig = Field(default_factory=ScoreConfig)
    """``[analysis.score]``: the Kayenta-style score of the deciding verdicts."""
