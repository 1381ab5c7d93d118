"""The load plan: what one ``hairline-engine load`` run is asked to do, as its flags.

The rules a plan must follow (rates, limits, URLs, warm-up URLs) live in one place, the
engine (``engine/src/load/``); :func:`hairline.engine.check_plan` asks it with
``load --check`` instead of repeating them here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Arrival = Literal["constant", "poisson"]
Pace = Literal["rate", "recorded", "ordered"]


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
    # Microseconds early a send may go to share the loop's wake-up with the one before it
    # (docs/engine.md --coalesce-us); 0 sends each on its own. Left out of the flags when 0,
    # so an engine built before the flag still runs a plan without it.
    coalesce_us: int = 0
    # The event loop's scheduling (docs/engine.md --priority): "auto", "fifo", "nice" or
    # "normal".
    priority: Literal["auto", "fifo", "nice", "normal"] = "auto"
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
        if self.coalesce_us:
            args += ["--coalesce-us", str(self.coalesce_us)]
        if self.priority != "auto":
            args += ["--priority", self.priority]
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
