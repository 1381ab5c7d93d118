"""The lab's sections of an experiment file: ``[mode]``, ``[load]``, ``[design]``,
``[analysis]``, ``[hosts]``, and the host class an arm names in hardware mode.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
    """A table of a TOML file: an unknown field is an error, and values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# The facts a hardware-mode arm may ask of its host (hosts/similar.py's ARM_FACTS).
HOST_CLASS_FACTS = ("server_type", "cpu_arch", "cpu_model", "kernel", "turbo")


class HostClassConfig(TomlModel):
    """``[arms.NAME] hosts = { cpu_model = "..." }``: in hardware mode, the machines this
    arm is (ServiceLab section 2); every fact not named here matches between the arms."""

    server_type: str | None = Field(default=None, min_length=1)
    cpu_arch: str | None = Field(default=None, min_length=1)
    cpu_model: str | None = Field(default=None, min_length=1)
    kernel: str | None = Field(default=None, min_length=1)
    turbo: Literal["on", "off"] | None = None

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
    pin: dict[str, list[str]] = Field(default_factory=dict)

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
    """``[load]``. Without ``rate_per_s`` the lab calibrates it: a short ramp on the
    baseline finds the rate at which the arm's CPUs are ``target_utilization`` busy
    (docs/lab.md, "Calibrated load")."""

    rate_per_s: float | None = Field(default=None, gt=0)
    target_utilization: float = Field(default=0.6, gt=0, le=1)
    duration_s: float = Field(gt=0)
    warmup_rate_per_s: float | None = Field(default=None, gt=0)
    warmup_duration_s: float = Field(default=2.0, ge=0)
    # The measurement's arrival process: evenly spaced, or Poisson (Treadmill's open loop
    # with exponential gaps, which queues as real users do).
    arrival: Literal["constant", "poisson"] = "constant"


class DesignConfig(TomlModel):
    """``[design]``. ``trials = "auto"`` runs trials until the verdict of every metric in
    ``decide_on`` is settled at its threshold, or ``max_trials`` (docs/stats.md,
    "Sequential trials")."""

    # "pinned": each arm stays on its host for every batch, no swap (the host effect is
    # then part of the difference): only with [hosts] pin, whose clusters passed an A/A.
    name: Literal["fully-balanced", "request-balanced", "pinned"] = "fully-balanced"
    trials: int | Literal["auto"] = Field(default=7)
    max_trials: int = Field(default=15, ge=3, le=1000)
    decide_on: list[str] = Field(default_factory=lambda: ["cpu_ns_per_request"], min_length=1)
    max_batch_attempts: int = Field(default=3, ge=1, le=20)
    # "efficiency": the arms are builds, compared on alike hosts (swapped between batches).
    # "hardware": one build; the arms are host classes (``[arms.X] hosts``), each arm stays
    # on its host and the verdict compares the hardware (ServiceLab section 2).
    mode: Literal["efficiency", "hardware"] = "efficiency"

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
    slo_p99_ms: float | None = Field(default=None, gt=0)
    max_error_rate: float = Field(default=0.01, ge=0, le=1)
    # A fraction of the arm's CPU set (1.0: every CPU of the host busy all the time).
    max_cpu_utilization: float | None = Field(default=None, gt=0, le=1)
    probe_s: float = Field(default=1.0, gt=0)
    tolerance: float = Field(default=0.02, gt=0, lt=0.5)
    start_rate_per_s: float | None = Field(default=None, gt=0)
    max_rate_per_s: float | None = Field(default=None, gt=0)
    search: Literal["probe", "pid"] = "probe"
    target: Literal["p99", "mean"] = "p99"
    target_latency_ms: float | None = Field(default=None, gt=0)


# A score group's name: a query's ``weights=cpu:3,memory:1`` names it, so no ":" or ",".
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ScoreGroup(TomlModel):
    """``[analysis.score.groups.NAME]``: metrics scored together and the group's weight.
    ``metrics`` are names or shell patterns (``"latency_*"`` also matches
    ``latency_p99_us[/api]``); a metric belongs to the first group that names it.
    ``critical``: a failing metric of the group makes the score 0 (Kayenta's critical
    metrics)."""

    weight: float = Field(default=1.0, gt=0, le=1e6)
    metrics: list[str] = Field(min_length=1)
    critical: bool = False

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
    marginal_score: float = Field(default=75.0, ge=0, le=100)
    groups: dict[str, ScoreGroup] = Field(default_factory=dict)

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
    model: str = "adaptive"
    alpha: float = Field(default=0.05, gt=0, lt=1)
    correction: Literal["none", "holm", "bh"] = "none"
    seed: int = 0
    score: ScoreConfig = Field(default_factory=ScoreConfig)
