"""The load plan: what one ``hairline-engine load`` run is asked to do, checked before it starts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hairline.errors import ConfigError

Arrival = Literal["constant", "poisson"]
Pace = Literal["rate", "recorded", "ordered"]

#: The engine's limits (docs/engine.md): requests per second per target, seconds per phase,
#: milliseconds of a timeout or an interval.
#: milliseconds of a timeout or an interval.
MAX_RATE_PER_S = 1_000_000
MAX_PHASE_S = 604_800
MAX_MS = 3_600_000


@dataclass(frozen=True)
class LoadPlan:
    """The flags of one ``hairline-engine load`` run (docs/engine.md explains each).

    ``targets`` are ``(name, url)`` pairs in arm order (a mapping is accepted too). Give
    either ``paths`` or ``trace``. ``warm_urls`` are one URL per target in order, or
    ``"name=url"`` strings for the targets that have one (a mapping is accepted too).
    ``set_headers`` are ``(target, header, value)``; ``hosts`` are ``(target, host)``.
    """

    targets: tuple[tuple[str, str], ...]
    duration_s: float
    rate_per_s: float | None = None
    paths: tuple[str, ...] = ()
    trace: Path | None = None
    arrival: Arrival = "constant"
    seed: int = 1
    pace: Pace = "rate"
    speed: float = 1.0
    max_gap_ms: float = 1000.0
    warmup_rate_per_s: float | None = None
    warmup_duration_s: float = 0.0
    warm_urls: tuple[str, ...] = ()
    warm_timeout_s: float = 60.0
    connections: int = 32
    max_in_flight: int = 10_000
    timeout_ms: int = 2000
    interval_ms: int = 1000
    # Microseconds spun before each due time; 0 when sharing a CPU with an arm.
    spin_us: int = 150
    set_headers: tuple[tuple[str, str, str], ...] = ()
    hosts: tuple[tuple[str, str], ...] = ()
    strict: bool = False
    summary_path: Path | None = None
    requests_path: Path | None = None
    hdr_log_path: Path | None = None

    def __post_init__(self) -> None:
        if isinstance(self.targets, Mapping):
            object.__setattr__(self, "targets", tuple(self.targets.items()))
        else:
            object.__setattr__(self, "targets", tuple(tuple(t) for t in self.targets))
        for name in ("paths", "warm_urls"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, (value,))
            elif isinstance(value, Mapping):
                object.__setattr__(self, name, tuple(f"{k}={v}" for k, v in value.items()))
            else:
                object.__setattr__(self, name, tuple(value))
        _validate_plan(self)

    def to_args(self, *, control: bool = False) -> list[str]:
        """The ``load`` subcommand's arguments (without the program name)."""
        args = ["load"]
        for name, url in self.targets:
            args += ["--target", f"{name}={url}"]
        if self.trace is not None:
            args += ["--trace", str(self.trace)]
        for path in self.paths:
            args += ["--path", path]
        if self.rate_per_s is not None:
            args += ["--rate", _num(self.rate_per_s)]
        args += ["--arrival", self.arrival, "--seed", str(self.seed)]
        args += ["--duration", _num(self.duration_s)]
        args += ["--pace", self.pace]
        if self.pace == "recorded":
            args += ["--speed", _num(self.speed), "--max-gap-ms", _num(self.max_gap_ms)]
        if self.warmup_rate_per_s is not None:
            args += ["--warmup-rate", _num(self.warmup_rate_per_s)]
        if self.warmup_duration_s:
            args += ["--warmup-duration", _num(self.warmup_duration_s)]
        for url in self.warm_urls:
            args += ["--warm-url", url]
        args += ["--warm-timeout", _num(self.warm_timeout_s)]
        args += ["--connections", str(self.connections)]
        args += ["--max-in-flight", str(self.max_in_flight)]
        args += ["--timeout-ms", str(self.timeout_ms), "--interval-ms", str(self.interval_ms)]
        args += ["--spin-us", str(self.spin_us)]
        for target, header, value in self.set_headers:
            args += ["--set-header", f"{target}:{header}={value}"]
        for target, host in self.hosts:
            args += ["--host", f"{target}={host}"]
        if self.strict:
            args.append("--strict")
        if self.summary_path is not None:
            args += ["--summary", str(self.summary_path)]
        if self.requests_path is not None:
            args += ["--requests", str(self.requests_path)]
        if self.hdr_log_path is not None:
            args += ["--hdr-log", str(self.hdr_log_path)]
        if control:
            args.append("--control")
        return args

    def expected_runtime_s(self) -> float:
        """An upper bound on a healthy run's wall time, for timeouts around it."""
        warm = self.warmup_duration_s + (self.warm_timeout_s if self.warm_urls else 0.0)
        return warm + self.duration_s + 2 * self.timeout_ms / 1000


def _num(x: float) -> str:
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


def _validate_plan(plan: LoadPlan) -> None:
    problems: list[str] = []
    if not plan.targets:
        problems.append("targets: give at least one (name, url) pair")
    names = [name for name, _ in plan.targets]
    if len(set(names)) != len(names):
        problems.append(f"targets: names must be unique, got {names}")
    for name, url in plan.targets:
        if not url.startswith("http://"):
            problems.append(f"targets[{name!r}]: {url!r} is not an http:// URL")
    if (plan.trace is None) == (not plan.paths):
        problems.append("paths / trace: give exactly one of them")
    if plan.pace != "recorded" and plan.rate_per_s is None:
        problems.append("rate_per_s: required unless pace='recorded'")
    if plan.rate_per_s is not None and not (math.isfinite(plan.rate_per_s) and plan.rate_per_s > 0):
        problems.append(f"rate_per_s: expected a positive number, got {plan.rate_per_s}")
    for name in ("rate_per_s", "warmup_rate_per_s"):
        rate = getattr(plan, name)
        if rate is not None and rate > MAX_RATE_PER_S:
            problems.append(
                f"{name}: the engine schedules at most {MAX_RATE_PER_S} requests per second "
                f"per target, got {rate:g}"
            )
    if not (math.isfinite(plan.duration_s) and plan.duration_s >= 0):
        problems.append(f"duration_s: expected seconds >= 0, got {plan.duration_s}")
    for name in ("duration_s", "warmup_duration_s", "warm_timeout_s"):
        if getattr(plan, name) > MAX_PHASE_S:
            problems.append(f"{name}: at most {MAX_PHASE_S} seconds, got {getattr(plan, name):g}")
    for name in ("timeout_ms", "interval_ms"):
        if getattr(plan, name) > MAX_MS:
            problems.append(f"{name}: at most {MAX_MS}, got {getattr(plan, name)}")
    named = [u for u in plan.warm_urls if not u.startswith("http")]
    if named and len(named) != len(plan.warm_urls):
        problems.append("warm_urls: use plain URLs or 'name=url' strings, not both")
    elif named:
        unknown = [u for u in named if u.split("=", 1)[0] not in names]
        if unknown:
            problems.append(f"warm_urls: {unknown} do not start with a target name and '='")
    elif plan.warm_urls and len(plan.warm_urls) != len(plan.targets):
        problems.append(
            f"warm_urls: give one per target ({len(plan.targets)}), got {len(plan.warm_urls)}; "
            "or 'name=url' for the targets that have one"
        )
    for name in ("connections", "max_in_flight", "timeout_ms", "interval_ms"):
        if getattr(plan, name) < 1:
            problems.append(f"{name}: expected at least 1, got {getattr(plan, name)}")
    if not 0 <= plan.spin_us <= 1_000_000:
        problems.append(f"spin_us: expected 0 to 1000000 microseconds, got {plan.spin_us}")
    if problems:
        raise ConfigError(
            "invalid load plan: " + "; ".join(problems),
            hint="see docs/engine.md for what each field means",
        )
