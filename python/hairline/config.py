"""Typed configuration, made once at the edge; every problem names its source and the fix.

For now this holds what an analysis needs: per-metric thresholds and directions, written on
the command line as ``--threshold cpu_per_request=1%`` or ``--threshold p99_ms=0.5`` and
``--direction throughput=lower-is-worse``.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
import shlex
import string
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hairline.errors import ConfigError

__all__ = [
    "DEFAULT_THRESHOLD",
    "Direction",
    "MetricPolicy",
    "Threshold",
    "parse_directions",
    "parse_threshold",
    "parse_thresholds",
]

Direction = Literal["higher-is-worse", "lower-is-worse"]
_DIRECTIONS: dict[str, Direction] = {
    "higher-is-worse": "higher-is-worse",
    "higher": "higher-is-worse",
    "lower-is-worse": "lower-is-worse",
    "lower": "lower-is-worse",
}


@dataclass(frozen=True)
class Threshold:
    """The smallest change that matters: relative (a fraction of the baseline) or absolute."""

    value: float
    relative: bool

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


DEFAULT_THRESHOLD = Threshold(0.01, relative=True)


@dataclass(frozen=True)
class MetricPolicy:
    """What counts as a regression of one metric."""

    threshold: Threshold = DEFAULT_THRESHOLD
    direction: Direction = "higher-is-worse"


def parse_threshold(text: str, *, source: str = "threshold") -> Threshold:
    """``"1%"`` -> relative 0.01; ``"0.5"`` -> absolute 0.5 (in the metric's unit)."""
    raw = text.strip()
    relative = raw.endswith("%")
    number = raw[:-1].strip() if relative else raw
    try:
        value = float(number)
    except ValueError:
        raise ConfigError(
            f"{source}: {text!r} is not a threshold",
            hint="write a percentage of the baseline such as 1% or 0.5%, "
            "or an absolute amount in the metric's unit such as 0.2",
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"{source}: {text!r} must be a finite, non-negative amount",
            hint="thresholds are magnitudes; the direction is set separately",
        )
    return Threshold(value / 100 if relative else value, relative=relative)


def _split(item: str, flag: str) -> tuple[str, str]:
    metric, sep, rest = item.partition("=")
    if not sep or not metric.strip() or not rest.strip():
        raise ConfigError(
            f"{flag} {item!r}: expected METRIC=VALUE",
            hint=f"for example {flag} cpu_per_request=1%",
        )
    return metric.strip(), rest.strip()


def parse_thresholds(items: Iterable[str]) -> dict[str, Threshold]:
    """Parse repeated ``--threshold METRIC=VALUE`` options; every bad one is reported."""
    out: dict[str, Threshold] = {}
    problems: list[str] = []
    for item in items:
        try:
            metric, value = _split(item, "--threshold")
            out[metric] = parse_threshold(value, source=f"--threshold {metric}")
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError("; ".join(problems))
    return out


def parse_directions(items: Iterable[str]) -> dict[str, Direction]:
    """Parse repeated ``--direction METRIC=higher-is-worse|lower-is-worse`` options."""
    out: dict[str, Direction] = {}
    for item in items:
        metric, value = _split(item, "--direction")
        direction = _DIRECTIONS.get(value.lower())
        if direction is None:
            raise ConfigError(
                f"--direction {metric}: {value!r} is not a direction",
                hint="use higher-is-worse (latency, CPU) or lower-is-worse (throughput)",
            )
        out[metric] = direction
    return out


# --------------------------------------------------------------------------------------
# Service and experiment files (TOML)
# --------------------------------------------------------------------------------------

_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# {host}: the address the service must listen on (127.0.0.1 locally, the Ray node's IP on
# the ray backend).
START_PLACEHOLDERS = ("port", "host", "artifact", "cpus", "engine", "workdir", "arm")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricConfig(_Model):
    """``[metrics.NAME]``: the smallest change that matters and which way is worse."""

    threshold: str = "1%"
    # Default: the built-in metric's own direction (BUILTIN_DIRECTIONS), else higher-is-worse.
    direction: str | None = None

    def policy(self, metric: str = "") -> MetricPolicy:
        direction = (
            _DIRECTIONS[self.direction.lower()]
            if self.direction is not None
            else builtin_direction(metric)
        )
        return MetricPolicy(threshold=parse_threshold(self.threshold), direction=direction)


# The lab's own metrics, each with the direction in which it gets worse. goodput_per_s is
# what the service controls in an open-loop replay (answers that were not errors, per
# second); the offered rate, which both arms get alike, is not a metric.
BUILTIN_DIRECTIONS: dict[str, Direction] = {
    "cpu_ns_per_request": "higher-is-worse",
    "anon_memory_bytes": "higher-is-worse",
    "peak_memory_bytes": "higher-is-worse",
    "goodput_per_s": "lower-is-worse",
    "error_rate": "higher-is-worse",
    "latency_us": "higher-is-worse",
    "latency_p50_us": "higher-is-worse",
    "latency_p99_us": "higher-is-worse",
}


def builtin_direction(metric: str) -> Direction:
    """The direction of a built-in metric (``name[endpoint]`` included); higher-is-worse for
    any other (counters per request, CPU, latency: most things cost)."""
    return BUILTIN_DIRECTIONS.get(metric.split("[", 1)[0], "higher-is-worse")


class BuildConfig(_Model):
    """``[service.build]``: a shell command run in a copy of the arm's source tree."""

    command: str | None = None
    artifact: str | None = None
    timeout_s: float = Field(default=1800.0, gt=0)


class ServiceConfig(_Model):
    """How to build, start, health-check and measure one program."""

    name: str = Field(pattern=_NAME_PATTERN)
    start: str = Field(min_length=1)
    health: str = "/healthz"
    health_timeout_s: float = Field(default=30.0, gt=0)
    warm: str | None = None
    warm_timeout_s: float = Field(default=60.0, gt=0)
    metrics_path: str | None = None
    counters: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    build: BuildConfig = Field(default_factory=BuildConfig)
    metrics: dict[str, MetricConfig] = Field(default_factory=dict)
    # A batch in which an arm answered more than this fraction of requests with errors is
    # spoiled and run again (the arm is overloaded or broken; its CPU is not comparable).
    max_error_rate: float = Field(default=0.01, ge=0, le=1)
    # Where the service file was read from; start and build paths are relative to it.
    root: str = "."


# The facts a hardware-mode arm may ask of its host (hosts/similar.py's ARM_FACTS).
HOST_CLASS_FACTS = ("server_type", "cpu_arch", "cpu_model", "kernel", "turbo")


class HostClassConfig(_Model):
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


class HostsConfig(_Model):
    """``[hosts]``: how nearly identical an experiment's machines must be (docs/hosts.md).
    ``max_cov``: a CPU model or kernel whose coefficient of variation in the service's
    past A/A runs is above this is avoided; "off" never avoids."""

    max_cov: float | Literal["off"] = 0.05

    @field_validator("max_cov", mode="before")
    @classmethod
    def _cov_in_range(cls, value: object) -> object:
        if value == "off" or (isinstance(value, int | float) and 0 < value <= 10):
            return value
        raise ValueError(f'{value!r}: max_cov is a fraction above 0 (0.05 for 5%), or "off"')

    @property
    def cov_limit(self) -> float | None:
        return None if self.max_cov == "off" else float(self.max_cov)


class ArmConfig(_Model):
    """``[arms.NAME]``: one version under test: a folder or a git revision, plus its
    own start arguments and environment (a configuration change is an arm too)."""

    path: str | None = None
    git: str | None = None
    repo: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Hardware mode only: the host class this arm runs on (the arms share one build).
    hosts: HostClassConfig | None = None
    # The arm this one is compared with (default: the experiment's baseline). A
    # three-sided experiment (ServiceLab section 3.5) compares the change with its parent
    # and the parent with production: [arms.change] baseline = "parent".
    baseline: str | None = None


class LoadConfig(_Model):
    """``[load]``. Without ``rate_per_s`` the lab calibrates it: a short ramp on the
    baseline finds the rate at which the arm's CPUs are ``target_utilization`` busy
    (docs/lab.md, "Calibrated load")."""

    rate_per_s: float | None = Field(default=None, gt=0)
    target_utilization: float = Field(default=0.6, gt=0, le=1)
    duration_s: float = Field(gt=0)
    warmup_rate_per_s: float | None = Field(default=None, gt=0)
    warmup_duration_s: float = Field(default=2.0, ge=0)


class DesignConfig(_Model):
    """``[design]``. ``trials = "auto"`` runs trials until the verdict of every metric in
    ``decide_on`` is settled at its threshold, or ``max_trials`` (docs/stats.md,
    "Sequential trials")."""

    name: Literal["fully-balanced", "request-balanced"] = "fully-balanced"
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


class AnalysisConfig(_Model):
    model: str = "adaptive"
    alpha: float = Field(default=0.05, gt=0, lt=1)
    correction: Literal["none", "holm", "bh"] = "none"
    seed: int = 0


class ExperimentConfig(_Model):
    """An experiment file, with every path made absolute and the service file read in."""

    service: ServiceConfig
    trace: str
    arms: dict[str, ArmConfig]
    baseline: str | None = None
    team: str = Field(default="default", pattern=_NAME_PATTERN)
    # Higher is claimed first; among equal priorities, the team furthest below its quota.
    priority: int = Field(default=0, ge=-1000, le=1000)
    load: LoadConfig
    design: DesignConfig = Field(default_factory=DesignConfig)
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    hosts: HostsConfig = Field(default_factory=HostsConfig)
    # The file this came from (for messages); not part of what the experiment does.
    source: str = ""

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
        not name, the default threshold in the metric's own direction."""
        named = {name: metric.policy(name) for name, metric in self.service.metrics.items()}
        builtin = {
            name: MetricPolicy(direction=direction)
            for name, direction in BUILTIN_DIRECTIONS.items()
            if direction != "higher-is-worse"
        }
        return builtin | named

    def as_aa(self) -> ExperimentConfig:
        """The A/A form: every arm is the baseline (same build, same arguments)."""
        base = self.arms[self.baseline_arm]
        # The same comparisons as the A/B, so an A/A checks the pairs the A/B will judge.
        arms = {
            name: base.model_copy(update={"baseline": arm.baseline})
            for name, arm in self.arms.items()
        }
        return self.model_copy(update={"arms": arms})


# A check of a layer above config (the lab's: model names, the trace's first lines), run in
# the same round as config's own: it reports with (field path, what is wrong, the fix).
Report = Callable[[tuple[str, ...], str, str], None]
ExtraCheck = Callable[[ExperimentConfig, Path, Report], None]


def load_experiment(path: Path, *, checks: Sequence[ExtraCheck] = ()) -> ExperimentConfig:
    """Read an experiment file (and the service file it names); report every problem at once.

    Raises :class:`ConfigError` whose message lists each problem as ``file:line: field:
    what is wrong`` followed by what to write instead. A field of the wrong type does not
    hide the other problems: the checks then run on the file without that field.
    ``checks`` are run on the result with the same reporting (``hairline.lab.files``).
    """
    problems = _Problems()
    data = _read_toml(path, problems)
    service_data: Any = data.get("service")
    service_path = path
    service_text: str | None = None
    if isinstance(service_data, str):
        service_path = (path.parent / service_data).resolve()
        service_doc = _read_toml(service_path, problems, field="service")
        service_text = service_path.read_text() if service_path.is_file() else None
        service_data = service_doc.get("service", service_doc)
        if isinstance(service_data, dict):
            service_data = {**service_data}
            for key in ("build", "metrics"):
                if key in service_doc and key not in service_data:
                    service_data[key] = service_doc[key]
    if isinstance(service_data, dict):
        service_data = {**service_data, "root": str(service_path.parent.resolve())}
    if problems:
        raise problems.error(path)
    text = path.read_text()
    service_file = service_path if service_text is not None else path
    service_doc_text = service_text if service_text is not None else text
    service: ServiceConfig | None = None
    if isinstance(service_data, dict):
        nested = service_text is None or "service" in tomllib.loads(service_text)
        try:
            service = ServiceConfig.model_validate(service_data)
        except ValidationError as err:
            for item in err.errors():
                loc = tuple(str(p) for p in item["loc"])
                problems.pydantic(service_file, service_doc_text, _service_loc(loc, nested), item)
            checkable = _without_bad_fields(ServiceConfig, service_data, err)
        else:
            checkable = service
        if checkable is not None:
            _check_service(checkable, service_file, service_doc_text, nested, problems)
    raw = {**data, "service": service.model_dump() if service is not None else _PLACEHOLDER}
    raw["source"] = str(path.resolve())
    config: ExperimentConfig | None = None
    checked: ExperimentConfig | None = None
    try:
        config = checked = ExperimentConfig.model_validate(raw)
    except ValidationError as err:
        for item in err.errors():
            loc = tuple(str(p) for p in item["loc"])
            if loc and loc[0] == "service" and service is None:
                continue
            problems.pydantic(path, text, loc, item)
        checked = _without_bad_fields(ExperimentConfig, raw, err)
    if checked is not None:
        _check_experiment(checked, path, text, problems)
        for check in checks:
            check(checked, path, lambda loc, msg, fix: problems.at(path, text, loc, msg, fix))
    if problems or config is None or service is None:
        raise problems.error(path)
    return _resolve(config, path)


_PLACEHOLDER = {"name": "x", "start": "x"}

_M = TypeVar("_M", bound=BaseModel)


def _without_bad_fields(model: type[_M], data: Any, err: ValidationError) -> _M | None:
    """``data`` validated again without the fields that failed (so their defaults apply),
    for the checks that need a typed config; None when a required field is among them."""
    trimmed = copy.deepcopy(data)
    for _ in range(3):
        for item in err.errors():
            # The loc may run past the data (a union's member names): drop the deepest key
            # that is really there.
            where: Any = trimmed
            parent: dict[Any, Any] | None = None
            last: Any = None
            for key in item["loc"]:
                if not isinstance(where, dict) or key not in where:
                    break
                parent, last, where = where, key, where[key]
            if parent is not None:
                parent.pop(last, None)
        try:
            return model.model_validate(trimmed)
        except ValidationError as again:
            err = again
    return None


def _read_toml(path: Path, problems: _Problems, *, field: str | None = None) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        problems.add(str(path), None, field or "file", "no such file", "check the path")
        return {}
    except OSError as err:
        problems.add(str(path), None, field or "file", str(err), "check the path")
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        line = getattr(err, "lineno", None)
        problems.add(str(path), line, "toml", str(err), "fix the TOML syntax")
        return {}


def _service_loc(loc: tuple[str, ...], nested: bool) -> tuple[str, ...]:
    """Where a service field lives: under [service] (inline or in a service file with a
    [service] table), except [build] and [metrics], which may also stand at the top."""
    return ("service", *loc) if nested else loc


def _check_service(
    service: ServiceConfig, file: Path, text: str, nested: bool, problems: _Problems
) -> None:
    def svc(loc: tuple[str, ...], message: str, fix: str) -> None:
        problems.at(file, text, _service_loc(loc, nested), message, fix)

    fields = _template_fields(service.start)
    for name, word in fields:
        if name not in START_PLACEHOLDERS:
            svc(
                ("start",),
                f"unknown placeholder {{{name}}} in {word!r}",
                f"use only {', '.join('{' + p + '}' for p in START_PLACEHOLDERS)}; "
                "write {{ and }} for literal braces",
            )
    uses_artifact = any(n == "artifact" for n, _ in fields)
    if uses_artifact and service.build.command is None and service.build.artifact is None:
        svc(
            ("start",),
            "{artifact} is used but the service has no [service.build]",
            'add [service.build] with command = "..." and artifact = "path/it/produces"',
        )
    if service.build.command is not None and service.build.artifact is None:
        svc(("build", "artifact"), "a build command needs an artifact", 'add artifact = "..."')
    for key in ("health", "warm", "metrics_path"):
        value = getattr(service, key)
        if value is not None and not value.startswith("/"):
            svc((key,), f"{value!r} is not a path", f'write it as a path, e.g. "/{value}"')
    known = [*BUILTIN_DIRECTIONS, *(f"{c}_per_request" for c in service.counters)]
    for metric, mc in service.metrics.items():
        # name[endpoint]_per_request is the per-endpoint form of a counter's metric.
        if re.sub(r"\[[^\]]*\]", "", metric) not in known:
            close = difflib.get_close_matches(metric, known, n=1)
            svc(
                ("metrics", metric),
                f"no metric {metric!r} is measured",
                f"did you mean {close[0]!r}?" if close else
                f"use one of {', '.join(known)} (a counter's metric is <counter>_per_request "
                "for a counter listed in counters)",
            )  # fmt: skip
        try:
            parse_threshold(mc.threshold)
        except ConfigError as err:
            svc(("metrics", metric, "threshold"), err.message, err.hint or "")
        if mc.direction is not None and mc.direction.lower() not in _DIRECTIONS:
            svc(
                ("metrics", metric, "direction"),
                f"{mc.direction!r} is not a direction",
                "use higher-is-worse (latency, CPU) or lower-is-worse (throughput)",
            )


def _check_experiment(config: ExperimentConfig, path: Path, text: str, problems: _Problems) -> None:
    here = path.parent

    def exp(loc: tuple[str, ...], message: str, fix: str) -> None:
        problems.at(path, text, loc, message, fix)

    _check_hardware_mode(config, exp)
    if not (here / config.trace).is_file():
        exp(("trace",), f"{config.trace!r}: no such file", "give the path relative to this file")
    if len(config.arms) < 2:
        exp(("arms",), f"{len(config.arms)} arm(s); an experiment compares at least two",
            "add [arms.A] (baseline) and [arms.B] (candidate)")  # fmt: skip
    for name, arm in config.arms.items():
        if not re.match(_NAME_PATTERN, name):
            exp(("arms", name), f"arm name {name!r}", "use letters, digits, '.', '_' or '-'")
        if arm.path is not None and arm.git is not None:
            exp(("arms", name), "both path and git are set", "give one source per arm")
        if arm.repo is not None and arm.git is None:
            exp(("arms", name, "repo"), "repo without git", 'add git = "REVISION" or drop repo')
        if arm.path is not None and not (here / arm.path).is_dir():
            exp(("arms", name, "path"), f"{arm.path!r}: no such folder",
                "give a folder relative to this file")  # fmt: skip
        if arm.git is not None and not (here / (arm.repo or ".")).is_dir():
            exp(("arms", name, "repo"), f"{arm.repo!r}: no such folder",
                "give the git repository's folder")  # fmt: skip
        has_source = arm.path is not None or arm.git is not None
        if config.service.build.command is not None and not has_source:
            exp(("arms", name), "the service has a build but this arm has no source",
                'add path = "FOLDER" or git = "REVISION"')  # fmt: skip
    if config.baseline is not None and config.baseline not in config.arms:
        exp(("baseline",), f"{config.baseline!r} is not an arm",
            f"use one of {', '.join(config.arms)}")  # fmt: skip
    else:
        _check_arm_baselines(config, exp)


def _check_arm_baselines(config: ExperimentConfig, exp: Report) -> None:
    """Every ``[arms.X] baseline`` names another arm, and following them from any arm
    leads to the experiment's baseline (no arm is compared with itself, no cycle)."""
    root = config.baseline_arm
    for name, arm in config.arms.items():
        if arm.baseline is None:
            continue
        others = [a for a in config.arms if a != name]
        if name == root:
            fix = "drop this line"
            if others:
                fix += f", or make another arm the baseline: baseline = {others[0]!r} at the top"
            message = f"{name!r} is the experiment's baseline, so it is compared with nothing"
            exp(("arms", name, "baseline"), message, fix)
        elif arm.baseline == name:
            exp(("arms", name, "baseline"), "an arm cannot be its own baseline",
                f"use one of {', '.join(others)}")  # fmt: skip
        elif arm.baseline not in config.arms:
            exp(("arms", name, "baseline"), f"{arm.baseline!r} is not an arm",
                f"use one of {', '.join(others)}")  # fmt: skip
    for name in config.arms:
        seen = [name]
        current = name
        while current != root:
            named = config.arms[current].baseline
            nxt = root if named is None else named
            if nxt not in config.arms or nxt == current:
                break  # reported above
            if nxt in seen:
                cycle = " -> ".join([*seen[seen.index(nxt) :], nxt])
                exp(("arms", name, "baseline"),
                    f"the baselines go round in a circle ({cycle}) and never reach "
                    f"the experiment's baseline {root!r}",
                    f"compare one of these arms with {root!r}")  # fmt: skip
                return
            seen.append(nxt)
            current = nxt


_SAME_BUILD = ("path", "git", "repo", "args", "env")


def _check_hardware_mode(config: ExperimentConfig, exp: Report) -> None:
    """Hardware mode: every arm names its host class, by the same facts, each a different
    class, all running one build; outside it no arm names a host class."""
    if config.design.mode != "hardware":
        for name, arm in config.arms.items():
            if arm.hosts is not None:
                exp(("arms", name, "hosts"), "a host class is only for hardware mode",
                    'set [design] mode = "hardware" to compare machines, or drop it')  # fmt: skip
        return
    base_name = config.baseline_arm
    base = config.arms.get(base_name)
    classes: dict[str, dict[str, str]] = {}
    for name, arm in config.arms.items():
        facts = arm.hosts.facts() if arm.hosts is not None else {}
        if not facts:
            exp(("arms", name, "hosts"), "hardware mode needs each arm's host class",
                f'add hosts = {{ cpu_model = "..." }} (or {", ".join(HOST_CLASS_FACTS[:-1])} '
                "or turbo) to say which machines this arm is")  # fmt: skip
            continue
        classes[name] = facts
        for field in _SAME_BUILD:
            if base is None or name == base_name or getattr(arm, field) == getattr(base, field):
                continue
            exp(("arms", name, field), "hardware mode runs one build on every arm",
                f"give {field} as in arms.{base_name}, or drop it")  # fmt: skip
    named = {name: sorted(facts) for name, facts in classes.items()}
    first = next(iter(named.items()), None)
    for name, keys in named.items():
        if first is not None and keys != first[1]:
            exp(("arms", name, "hosts"),
                f"names {', '.join(keys)}; arms.{first[0]}.hosts names {', '.join(first[1])}",
                "name the same facts in every arm: they are to be the only difference")  # fmt: skip
    seen: dict[tuple[tuple[str, str], ...], str] = {}
    for name, facts in classes.items():
        key = tuple(sorted(facts.items()))
        if key in seen:
            exp(("arms", name, "hosts"), f"the same host class as arms.{seen[key]}",
                "give each arm a different class: the arms are what is compared")  # fmt: skip
        seen.setdefault(key, name)


def _template_fields(template: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for word in template.split():
        try:
            parsed = list(string.Formatter().parse(word))
        except ValueError:
            out.append(("unbalanced braces", word))
            continue
        out.extend((name, word) for _, name, _, _ in parsed if name is not None)
    return out


def _resolve(config: ExperimentConfig, path: Path) -> ExperimentConfig:
    here = path.parent.resolve()
    arms = {
        name: arm.model_copy(
            update={
                "path": str((here / arm.path).resolve()) if arm.path is not None else None,
                "repo": str((here / (arm.repo or ".")).resolve()) if arm.git is not None else None,
            }
        )
        for name, arm in config.arms.items()
    }
    return config.model_copy(update={"trace": str((here / config.trace).resolve()), "arms": arms})


def start_command(service: ServiceConfig, arm: ArmConfig, values: dict[str, str]) -> list[str]:
    """The start command's words for one arm, placeholders filled, the arm's args appended.

    The template is split into words first, so a filled-in path with spaces stays one word.
    """
    return [*(word.format(**values) for word in shlex.split(service.start)), *arm.args]


class _Problems:
    """Every problem found in a file set, reported together."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, file: str, line: int | None, field: str, message: str, fix: str) -> None:
        where = f"{file}:{line}" if line else file
        self.items.append(f"{where}: {field}: {message}" + (f"\n    fix: {fix}" if fix else ""))

    def at(self, file: Path, text: str, loc: tuple[str, ...], message: str, fix: str) -> None:
        self.add(str(file), _line_of(text, loc), ".".join(loc), message, fix)

    def pydantic(self, file: Path, text: str, loc: tuple[str, ...], item: Any) -> None:
        kind = item["type"]
        if kind == "extra_forbidden":
            parent, field = loc[:-1], loc[-1]
            known = _known_fields(parent)
            close = difflib.get_close_matches(field, known, n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(known)}"
            self.at(file, text, loc, "unknown field", fix)
        elif kind == "missing":
            self.at(file, text, loc, "missing", f"add {loc[-1]} = ...")
        elif kind == "literal_error":
            expected = item.get("ctx", {}).get("expected", "")
            self.at(file, text, loc, f"{item['input']!r} is not allowed", f"use {expected}")
        elif kind == "string_pattern_mismatch":
            self.at(file, text, loc, f"{item['input']!r} is not a valid name",
                    "use letters, digits, '.', '_' or '-'")  # fmt: skip
        else:
            self.at(file, text, loc, item["msg"].lower(), _FIXES.get(kind, ""))

    def error(self, path: Path) -> ConfigError:
        count = len(self.items)
        head = f"{path}: {count} problem{'s' if count != 1 else ''}"
        return ConfigError(
            head + "\n  " + "\n  ".join(self.items),
            hint="fix each line above; `hairline run --check FILE` checks without running",
        )


_FIXES = {
    "greater_than": "use a positive number",
    "greater_than_equal": "use a number at least as large as shown",
    "less_than": "use a smaller number",
    "less_than_equal": "use a number no larger than shown",
    "float_parsing": "write a number, e.g. 400 or 2.5",
    "float_type": "write a number, e.g. 400 or 2.5",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "string_type": 'write a quoted string, e.g. "value"',
    "list_type": 'write a list, e.g. ["a", "b"]',
    "dict_type": "write a table",
    "model_type": "write a table",
    "bool_type": "write true or false",
}


def _known_fields(parent: tuple[str, ...]) -> list[str]:
    models: dict[tuple[str, ...], type[BaseModel]] = {
        (): ExperimentConfig,
        ("service",): ServiceConfig,
        ("service", "build"): BuildConfig,
        ("load",): LoadConfig,
        ("design",): DesignConfig,
        ("analysis",): AnalysisConfig,
        ("hosts",): HostsConfig,
    }
    if len(parent) == 2 and parent[0] == "arms":
        return list(ArmConfig.model_fields)
    if len(parent) == 3 and parent[0] == "arms" and parent[2] == "hosts":
        return list(HostClassConfig.model_fields)
    if len(parent) == 3 and parent[:2] == ("service", "metrics"):
        return list(MetricConfig.model_fields)
    model = models.get(parent)
    if model is None:
        return []
    return [f for f in model.model_fields if f not in ("root", "source")]


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\"'-]+)\s*=")


def _line_of(text: str, loc: tuple[str, ...]) -> int | None:
    """The 1-based line that defines ``loc`` (or its nearest enclosing table), if any."""
    table: tuple[str, ...] = ()
    found: dict[tuple[str, ...], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = tuple(_unquote(p) for p in header.group(1).split("."))
            found.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            path = (*table, *(_unquote(p) for p in key.group(1).split(".")))
            found.setdefault(path, number)
            # Inline tables: ``name = { threshold = "x" }`` defines name.threshold too.
            for inner in re.finditer(r"([A-Za-z0-9_-]+)\s*=", line[key.end() :]):
                found.setdefault((*path, inner.group(1)), number)
    for depth in range(len(loc), 0, -1):
        if loc[:depth] in found:
            return found[loc[:depth]]
        if loc[0] == "service" and loc[1:depth] and loc[1:depth] in found:
            return found[loc[1:depth]]
    return None


def _unquote(part: str) -> str:
    return part.strip().strip("\"'")
