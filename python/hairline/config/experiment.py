"""An experiment file's models: the service (build, start, health, metrics), the arms, and
the experiment that holds them with the lab's sections; an arm's start command.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from hairline.collect.registry import MAX_THROUGHPUT
from hairline.config.isolation import IsolationConfig
from hairline.config.policy import (
    BUILTIN_DIRECTIONS,
    DIRECTIONS,
    FAMILY_POLICIES,
    MetricPolicy,
    builtin_direction,
    parse_threshold,
)
from hairline.config.profiling import ProfileConfig
from hairline.config.sections import (
    AnalysisConfig,
    DesignConfig,
    HostClassConfig,
    HostsConfig,
    LoadConfig,
    ModeConfig,
    TomlModel,
)
from hairline.config.suggest import SuggestConfig
from hairline.errors import ConfigError
from hairline.kit.durations import duration_s

__all__ = [
    "AA_MIN_EVERY_S",
    "NAME_PATTERN",
    "START_PLACEHOLDERS",
    "AaConfig",
    "ArmConfig",
    "BuildConfig",
    "ExperimentConfig",
    "MetricConfig",
    "ServiceConfig",
    "ServiceFile",
    "parse_every_s",
    "start_command",
]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# {host}: the address the service must listen on (127.0.0.1 locally, the Ray node's IP on
# the ray backend).
# {hairline}: this hairline as a command (`python -m hairline` of the interpreter that runs
# the arm), for arms that are hairline processes themselves (`{hairline} route fleet ...`).
START_PLACEHOLDERS = ("port", "host", "artifact", "cpus", "engine", "workdir", "arm", "hairline")


class MetricConfig(TomlModel):
    """``[metrics.NAME]``: the smallest change that matters and which way is worse."""

    threshold: str = "1%"
    """The smallest change that matters: relative with %, else absolute in the metric's
    unit ("0.001")."""
    direction: str | None = None
    """Which way is worse: "higher-is-worse" (or "higher") or "lower-is-worse" (or
    "lower"); default: the built-in metric's own direction, else higher-is-worse."""

    def policy(self, metric: str = "") -> MetricPolicy:
        direction = (
            DIRECTIONS[self.direction.lower()]
            if self.direction is not None
            else builtin_direction(metric)
        )
        return MetricPolicy(threshold=parse_threshold(self.threshold), direction=direction)


class BuildConfig(TomlModel):
    """``[service.build]``: a shell command run in a copy of the arm's source tree."""

    command: str | None = None
    """Run with ``sh -c`` in a copy of the arm's tree, with the arm's environment."""
    artifact: str | None = None
    """What the build produces, relative to the tree; ``{artifact}`` in start points here."""
    timeout_s: float = Field(default=1800.0, gt=0)
    """A build that runs longer fails."""


# Shorter periods would keep the lab busy with A/A runs; ServiceLab runs them every 2 hours.
AA_MIN_EVERY_S = 60.0


def parse_every_s(text: str) -> float:
    """``"30m"``, ``"2h"``, ``"1d"`` -> seconds; at least :data:`AA_MIN_EVERY_S`."""
    every_s = duration_s(text, units=("m", "h", "d"))
    if every_s is None:
        raise ConfigError(
            f"{text!r} is not a period",
            hint='write a number and a unit: m (minutes), h (hours) or d (days), e.g. "2h"',
        )
    if every_s < AA_MIN_EVERY_S:
        raise ConfigError(
            f"{text!r} is shorter than the shortest period, 1m",
            hint='write "1m" or longer; every 2h is what ServiceLab runs',
        )
    return every_s


class AaConfig(TomlModel):
    """``[aa]``: periodic A/A runs of the service (``hairline lab schedule add``), whose
    results give each metric's false-positive rate and drive adaptive model selection."""

    every: str | None = None
    """The period: a number and m, h or d ("2h"), at least 1m."""

    @property
    def every_s(self) -> float | None:
        """The period in seconds (None: no periodic runs); config/checks.py checked it."""
        return None if self.every is None else parse_every_s(self.every)


class ServiceConfig(TomlModel):
    """How to build, start, health-check and measure one program."""

    name: str = Field(pattern=NAME_PATTERN)
    """The service's name: its A/A history, schedules and reports are kept under it."""
    start: str = Field(min_length=1)
    """The command that starts one arm; placeholders: {port}, {host}, {artifact}, {cpus},
    {workdir}, {engine}, {arm}, {hairline} (docs/lab.md, "Files")."""
    health: str = "/healthz"
    """A path that must answer 2xx within ``health_timeout_s`` of the start."""
    health_timeout_s: float = Field(default=30.0, gt=0)
    """How long the service may take to answer ``health``, in seconds."""
    warm: str | None = None
    """A path that answers 2xx once the service is warm (the warm-up lasts until it does)."""
    warm_timeout_s: float = Field(default=60.0, gt=0)
    """How long the warm-up may wait for ``warm``, in seconds."""
    metrics_path: str | None = None
    """A path that answers Prometheus text, scraped around each batch."""
    counters: list[str] = Field(default_factory=list)
    """Prometheus counters reported per request (per endpoint if labelled endpoint=)."""
    collect: list[str] = Field(default_factory=list)
    """Optional built-in collectors to run as well, e.g. ``["context_switches"]``
    (docs/lab.md, "Metrics")."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for the build and the start."""
    build: BuildConfig = Field(default_factory=BuildConfig)
    """``[service.build]``: how each arm is built."""
    metrics: dict[str, MetricConfig] = Field(default_factory=dict)
    """``[service.metrics]``: per metric, the threshold and direction."""
    aa: AaConfig = Field(default_factory=AaConfig)
    """``[service.aa]``: periodic A/A runs."""
    max_error_rate: float = Field(default=0.01, ge=0, le=1)
    """A batch in which an arm answered more than this fraction of requests with errors
    is spoiled and run again (the arm is overloaded or broken; its CPU is not comparable)."""
    root: SkipJsonSchema[str] = "."
    """Where the service file was read from; start and build paths are relative to it
    (set by the reader, not written in the file)."""
    isolation: IsolationConfig | None = None
    """``[service.isolation]``: run each arm in its own network namespace (docs/safety.md)."""
    profile: ProfileConfig | None = None
    """``[service.profile]``: sample each arm's stacks and compare functions
    (docs/profiling.md)."""


class ServiceFile(TomlModel):
    """A service file with a ``[service]`` table. ``[build]``, ``[metrics]`` and ``[aa]``
    may stand at the top instead of under ``[service]``; a file without ``[service]`` is
    the service's table itself. The shape ``config/load.py`` reads, for the file's JSON
    Schema (docs/schema/service.json)."""

    service: ServiceConfig
    """``[service]``: how to build, start, health-check and measure the program."""
    build: BuildConfig | None = None
    """``[build]``, as ``[service.build]``."""
    metrics: dict[str, MetricConfig] | None = None
    """``[metrics]``, as ``[service.metrics]``."""
    aa: AaConfig | None = None
    """``[aa]``, as ``[service.aa]``."""


class ArmConfig(TomlModel):
    """``[arms.NAME]``: one version under test: a folder or a git revision, plus its
    own start arguments and environment (a configuration change is an arm too)."""

    path: str | None = None
    """The arm's source folder, relative to the experiment file."""
    git: str | None = None
    """A revision of ``repo`` to build."""
    repo: str | None = None
    """The git repository of ``git`` (default: the experiment file's folder)."""
    args: list[str] = Field(default_factory=list)
    """Words appended to the start command."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for the build and the start (part of the build key)."""
    hosts: HostClassConfig | None = None
    """Hardware mode only: the host class this arm runs on (the arms share one build)."""
    baseline: str | None = None
    """The arm this one is compared with (default: the experiment's baseline). A
    three-sided experiment (ServiceLab section 3.5) compares the change with its parent
    and the parent with production: [arms.change] baseline = "parent"."""


def _service_as_written(schema: dict[str, Any]) -> None:
    """The experiment file's JSON Schema (docs/schema/experiment.json): ``service`` is the
    service file's path or the table inline, as ``config/load.py`` reads it."""
    table = schema["properties"]["service"]
    schema["properties"]["service"] = {
        "description": table.pop("description", ""),
        "anyOf": [{"type": "string", "minLength": 1}, table],
    }


class ExperimentConfig(TomlModel):
    """An experiment file, with every path made absolute and the service file read in."""

    model_config = ConfigDict(json_schema_extra=_service_as_written)

    service: ServiceConfig
    """The service: the path of its service file, relative to this file, or its table
    inline."""
    trace: str
    """The trace to replay, relative to this file (docs/trace-format.md)."""
    arms: dict[str, ArmConfig]
    """``[arms.NAME]``: the versions under test, baseline first unless ``baseline`` says."""
    baseline: str | None = None
    """The arm the others are compared with (default: the first arm)."""
    team: str = Field(default="default", pattern=NAME_PATTERN)
    """Whose host quota this counts against."""
    priority: int = Field(default=0, ge=-1000, le=1000)
    """Higher is claimed first; among equal priorities, the team furthest below its quota."""
    load: LoadConfig
    """``[load]``: the replay's rate and duration per batch."""
    design: DesignConfig = Field(default_factory=DesignConfig)
    """``[design]``: trials and how arms meet hosts."""
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    """``[analysis]``: the model, alpha and correction."""
    hosts: HostsConfig = Field(default_factory=HostsConfig)
    """``[hosts]``: how alike the machines must be, and pinned hosts."""
    mode: ModeConfig = Field(default_factory=ModeConfig)
    """``[mode]``: efficiency, hardware or capacity (docs/capacity.md)."""
    suggest: SuggestConfig | None = None
    """``[suggest]``: the change's endpoints only, in their shares (docs/suggest.md)."""
    source: SkipJsonSchema[str] = ""
    """The file this came from (for messages); set by the reader, not part of what the
    experiment does."""

    @model_validator(mode="before")
    @classmethod
    def _mode_sets_design_defaults(cls, data: Any) -> Any:
        """``[mode] name = "hardware"`` pins the arms as ``[design] mode = "hardware"``
        does; capacity mode decides on ``max_throughput_per_s`` unless ``decide_on`` says
        otherwise. A conflict between the two tables is left for config/checks.py."""
        if not isinstance(data, dict) or not isinstance(data.get("mode"), dict):
            return data
        design = data.get("design", {})
        if not isinstance(design, dict):
            return data
        name = data["mode"].get("name")
        if name == "hardware" and "mode" not in design:
            return {**data, "design": {**design, "mode": "hardware"}}
        if name == "capacity" and "decide_on" not in design:
            return {**data, "design": {**design, "decide_on": [MAX_THROUGHPUT.name]}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _pin_keeps_arms_on_their_hosts(cls, data: Any) -> Any:
        """``[hosts] pin`` implies ``[design] name = "pinned"`` unless the design names
        another (a conflict config/checks.py reports)."""
        if not isinstance(data, dict) or not isinstance(data.get("hosts"), dict):
            return data
        design = data.get("design", {})
        if not data["hosts"].get("pin") or not isinstance(design, dict) or "name" in design:
            return data
        return {**data, "design": {**design, "name": "pinned"}}

    @property
    def mode_name(self) -> Literal["efficiency", "hardware", "capacity"]:
        """What the experiment measures: ``[mode] name``, or ``[design] mode`` (older)."""
        return "hardware" if self.design.mode == "hardware" else self.mode.name

    @property
    def baseline_arm(self) -> str:
        return self.baseline or next(iter(self.arms))

    @property
    def comparisons(self) -> dict[str, str]:
        """Each candidate arm and the arm it is compared with, in the file's arm order."""
        root = self.baseline_arm
        return {name: arm.baseline or root for name, arm in self.arms.items() if name != root}

    def policies(self) -> dict[str, MetricPolicy]:
        """Every metric's policy: the service file's, and for the built-in metrics it does
        not name, the default threshold in the metric's own direction; a family's
        (``dropped_writes``) holds for each of its endpoints (lab/analysis)."""
        named = {name: metric.policy(name) for name, metric in self.service.metrics.items()}
        builtin = {
            name: MetricPolicy(direction=direction)
            for name, direction in BUILTIN_DIRECTIONS.items()
            if direction != "higher-is-worse"
        }
        return builtin | FAMILY_POLICIES | named

    def as_aa(self) -> ExperimentConfig:
        """The A/A form: every arm is the baseline (same build, same arguments)."""
        base = self.arms[self.baseline_arm]
        # The same comparisons as the A/B, so an A/A checks the pairs the A/B will judge.
        arms = {
            name: base.model_copy(update={"baseline": arm.baseline})
            for name, arm in self.arms.items()
        }
        return self.model_copy(update={"arms": arms})


def start_command(service: ServiceConfig, arm: ArmConfig, values: dict[str, str]) -> list[str]:
    """The start command's words for one arm, placeholders filled, the arm's args appended.

    The template is split into words first, so a filled-in path with spaces stays one word.
    A word that is just ``{hairline}`` becomes the interpreter's words ``python -m
    hairline``, filled where the command runs (on a Ray node, that node's interpreter).
    """
    command = [sys.executable, "-m", "hairline"]
    values = {"hairline": shlex.join(command), **values}
    words: list[str] = []
    for word in shlex.split(service.start):
        words += command if word == "{hairline}" else [word.format(**values)]
    return [*words, *arm.args]
