"""Run ``hairline-engine load`` and read what it writes, as typed values.

The engine runs in its own process so that Python's garbage collector and GIL never touch
pacing. This module builds its command line from a :class:`LoadPlan`, runs it, and parses
the summary JSON into :class:`LoadResult`; :func:`read_requests` maps the per-request file
into a numpy structured array; :class:`ControlledLoad` drives a run whose rate is changed
while it goes (``--control``).

Every failure is a :class:`hairline.errors.EngineError` carrying the engine's stderr.
docs/engine.md documents the flags, the summary fields and the binary record layout.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

import numpy as np
from numpy.typing import NDArray

from hairline.errors import ConfigError, DataError, EngineError
from hairline.procs import child_setup

__all__ = [
    "REQUEST_DTYPE",
    "ControlledLoad",
    "EndpointResult",
    "Gate",
    "IntervalStats",
    "IntervalTarget",
    "LatencySummary",
    "LoadPlan",
    "LoadResult",
    "TargetResult",
    "find_engine",
    "latency_rows",
    "measure",
    "read_requests",
    "run_load",
    "warm_up",
]

ENGINE_NAME = "hairline-engine"
EXIT_INVALID = 1

#: One record of the ``--requests`` file (docs/engine.md, "Request records").
REQUEST_DTYPE = np.dtype(
    [
        ("request_id", "<u8"),
        ("intended_ns", "<u8"),
        ("latency_ns", "<u8"),
        ("uncorrected_ns", "<u8"),
        ("bytes", "<u4"),
        ("status", "<u2"),
        ("target", "<u2"),
        ("endpoint", "<u2"),
        ("error", "u1"),
        ("_pad", "V5"),
    ]
)
#: The engine's limits (docs/engine.md): requests per second per target, seconds per phase,
#: milliseconds of a timeout or an interval.
MAX_RATE_PER_S = 1_000_000
MAX_PHASE_S = 604_800
MAX_MS = 3_600_000
_REQUESTS_MAGIC = b"HLREQS\0\0"
_REQUESTS_VERSION = 1
_REQUESTS_HEADER_BYTES = 16

Arrival = Literal["constant", "poisson"]
Pace = Literal["rate", "recorded", "ordered"]


def find_engine() -> Path:
    """The engine binary: ``$HAIRLINE_ENGINE``, then beside this Python, then ``PATH``."""
    configured = os.environ.get("HAIRLINE_ENGINE")
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EngineError(
                f"HAIRLINE_ENGINE={configured} is not an executable file",
                hint="point it at target/release/hairline-engine, or unset it",
            )
        return path
    beside_python = Path(sys.executable).parent / ENGINE_NAME
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return beside_python
    on_path = shutil.which(ENGINE_NAME)
    if on_path:
        return Path(on_path)
    raise EngineError(
        f"{ENGINE_NAME} not found (looked at $HAIRLINE_ENGINE, {beside_python.parent}, PATH)",
        hint="run `pip install .` (or `make build`), or set HAIRLINE_ENGINE to the binary",
    )


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


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles of one histogram, in the unit its holder names (``latency_us``: µs).

    NaN when nothing was recorded.
    """

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LatencySummary:
        def f(key: str) -> float:
            value = data.get(key)
            return math.nan if value is None else float(value)

        return cls(
            count=int(data.get("count", 0)),
            mean=f("mean"),
            p50=f("p50"),
            p90=f("p90"),
            p99=f("p99"),
            p999=f("p999"),
            max=f("max"),
        )


@dataclass(frozen=True)
class EndpointResult:
    requests: int
    errors: int
    latency_us: LatencySummary
    uncorrected_latency_us: LatencySummary


@dataclass(frozen=True)
class TargetResult:
    """One target's measurement phase. ``latency_us`` is corrected (from the intended send)."""

    name: str
    index: int
    url: str
    requests: int
    errors: int
    sent: int
    dropped: int
    queued_sends: int
    bytes: int
    achieved_rate_per_s: float
    latency_us: LatencySummary
    uncorrected_latency_us: LatencySummary
    status: Mapping[int, int]
    errors_by_kind: Mapping[str, int]
    endpoints: Mapping[str, EndpointResult]


@dataclass(frozen=True)
class Gate:
    name: str
    value: float
    limit: float
    passed: bool
    detail: str


@dataclass(frozen=True)
class IntervalTarget:
    requests: int
    errors: int
    sent: int
    achieved_rate_per_s: float
    p50_us: float
    p99_us: float


@dataclass(frozen=True)
class IntervalStats:
    """One ``--interval-ms`` slice of the measurement phase."""

    start_s: float
    end_s: float
    rate_per_s: float
    targets: Mapping[str, IntervalTarget]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IntervalStats:
        def nan_if_none(x: Any) -> float:
            return math.nan if x is None else float(x)

        return cls(
            start_s=float(data["start_s"]),
            end_s=float(data["end_s"]),
            rate_per_s=float(data["rate_per_s"]),
            targets={
                name: IntervalTarget(
                    requests=int(t["requests"]),
                    errors=int(t["errors"]),
                    sent=int(t["sent"]),
                    achieved_rate_per_s=float(t["achieved_rate_per_s"]),
                    p50_us=nan_if_none(t.get("p50_us")),
                    p99_us=nan_if_none(t.get("p99_us")),
                )
                for name, t in data["targets"].items()
            },
        )


@dataclass(frozen=True)
class LoadResult:
    """The summary of one run. ``raw`` keeps the whole JSON for fields not modelled here."""

    targets: Mapping[str, TargetResult]
    endpoints: tuple[str, ...]
    valid: bool
    gates: tuple[Gate, ...]
    scheduled: int
    scheduled_rate_per_s: float
    duration_s: float
    late_sends: int
    late_share: float
    dropped: int
    dispatch_skew_us: LatencySummary
    pacing_error_us: LatencySummary
    stopped_by: str
    intervals: tuple[IntervalStats, ...]
    raw: Mapping[str, Any] = field(repr=False)
    #: The ``--requests`` file of this run, when one was written.
    requests_path: Path | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, requests_path: Path | None = None) -> LoadResult:
        try:
            return cls._from_json(data, requests_path)
        except (KeyError, TypeError, ValueError) as err:
            raise EngineError(
                f"the engine's summary JSON is missing or has a bad field: {err!r}",
                hint="the engine and the hairline package are probably different versions",
            ) from err

    @classmethod
    def _from_json(cls, data: Mapping[str, Any], requests_path: Path | None) -> LoadResult:
        targets: dict[str, TargetResult] = {}
        for name in data["target_names"]:
            t = data["targets"][name]
            targets[name] = TargetResult(
                name=name,
                index=int(t["index"]),
                url=str(t["url"]),
                requests=int(t["requests"]),
                errors=int(t["errors"]),
                sent=int(t["sent"]),
                dropped=int(t["dropped"]),
                queued_sends=int(t["queued_sends"]),
                bytes=int(t["bytes"]),
                achieved_rate_per_s=float(t["achieved_rate_per_s"]),
                latency_us=LatencySummary.from_json(t["latency_us"]),
                uncorrected_latency_us=LatencySummary.from_json(t["uncorrected_latency_us"]),
                status={int(code): int(n) for code, n in t["status"].items()},
                errors_by_kind={str(k): int(n) for k, n in t["errors_by_kind"].items()},
                endpoints={
                    label: EndpointResult(
                        requests=int(e["requests"]),
                        errors=int(e["errors"]),
                        latency_us=LatencySummary.from_json(e["latency_us"]),
                        uncorrected_latency_us=LatencySummary.from_json(
                            e["uncorrected_latency_us"]
                        ),
                    )
                    for label, e in t["endpoints"].items()
                },
            )
        gate_names = {f.name for f in fields(Gate)}
        return cls(
            targets=targets,
            endpoints=tuple(data["endpoints"]),
            valid=bool(data["valid"]),
            gates=tuple(
                Gate(**{k: v for k, v in g.items() if k in gate_names}) for g in data["gates"]
            ),
            scheduled=int(data["scheduled"]),
            scheduled_rate_per_s=float(data["scheduled_rate_per_s"]),
            duration_s=float(data["duration_s"]),
            late_sends=int(data["late_sends"]),
            late_share=float(data["late_share"]),
            dropped=int(data["dropped"]),
            dispatch_skew_us=LatencySummary.from_json(data["dispatch_skew_us"]),
            pacing_error_us=LatencySummary.from_json(data["pacing_error_us"]),
            stopped_by=str(data["stopped_by"]),
            intervals=tuple(IntervalStats.from_json(i) for i in data["intervals"]),
            raw=data,
            requests_path=requests_path,
        )


def run_load(
    plan: LoadPlan,
    *,
    timeout_s: float | None = None,
    engine: Path | None = None,
    cpus: Sequence[int] | None = None,
) -> LoadResult:
    """Runs the plan to completion and returns its summary; ``cpus`` pins the engine.

    A run that fails a validity gate is returned (``valid`` is false), also under
    ``strict``; a run the engine could not do raises :class:`EngineError`.
    """
    binary = engine or find_engine()
    with tempfile.TemporaryDirectory(prefix="hairline-load-") as tmp:
        summary_path = plan.summary_path or Path(tmp) / "summary.json"
        args = _with_summary(plan, summary_path).to_args()
        limit_s = timeout_s if timeout_s is not None else plan.expected_runtime_s() + 30
        command = [str(binary), *args]
        try:
            proc = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=limit_s,
                preexec_fn=child_setup(cpus),
            )
        except subprocess.TimeoutExpired as err:
            stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else ""
            raise EngineError(
                f"hairline-engine load did not finish within {limit_s:.0f} s; stderr:\n{stderr}",
                hint="raise timeout_s, or check that the targets answer",
            ) from err
        except OSError as err:
            raise EngineError(f"cannot run {binary}: {err}") from err
        if proc.returncode not in (0, EXIT_INVALID) or not summary_path.exists():
            raise EngineError(
                f"hairline-engine load failed (exit {proc.returncode}):\n{proc.stderr.strip()}",
                hint="the message above names the flag, file or target at fault",
            )
        return _read_summary(summary_path, proc.stderr, plan.requests_path)


def _with_summary(plan: LoadPlan, path: Path) -> LoadPlan:
    if plan.summary_path == path:
        return plan
    values = {f.name: getattr(plan, f.name) for f in fields(plan)}
    values["summary_path"] = path
    return LoadPlan(**values)


def _read_summary(path: Path, stderr: str, requests_path: Path | None) -> LoadResult:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise EngineError(f"cannot read the engine's summary {path}: {err}\n{stderr}") from err
    return LoadResult.from_json(data, requests_path=requests_path)


def read_requests(path: str | os.PathLike[str]) -> NDArray[np.void]:
    """The ``--requests`` file as a structured array of :data:`REQUEST_DTYPE`."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            header = f.read(_REQUESTS_HEADER_BYTES)
        size = p.stat().st_size
    except OSError as err:
        raise DataError(f"cannot read request records {p}: {err}") from err
    if len(header) < _REQUESTS_HEADER_BYTES or header[:8] != _REQUESTS_MAGIC:
        raise DataError(
            f"{p} is not a hairline request-record file (bad magic)",
            hint="pass the file written by `hairline-engine load --requests`",
        )
    version = int.from_bytes(header[8:12], "little")
    record_bytes = int.from_bytes(header[12:16], "little")
    if version != _REQUESTS_VERSION or record_bytes != REQUEST_DTYPE.itemsize:
        raise DataError(
            f"{p}: record format version {version} with {record_bytes}-byte records; this "
            f"hairline reads version {_REQUESTS_VERSION} with {REQUEST_DTYPE.itemsize}-byte ones",
            hint="read it with the hairline version that wrote it",
        )
    body = size - _REQUESTS_HEADER_BYTES
    if body % record_bytes:
        raise DataError(
            f"{p}: {body} bytes of records is not a whole number of {record_bytes}-byte records",
            hint="the file is truncated; was the engine killed with SIGKILL?",
        )
    records: NDArray[np.void] = np.fromfile(p, dtype=REQUEST_DTYPE, offset=_REQUESTS_HEADER_BYTES)
    return records


def warm_up(
    *,
    targets: Mapping[str, str],
    rate_per_s: float,
    duration_s: float,
    trace: Path | None = None,
    paths: Sequence[str] = (),
    warm_urls: Sequence[str] | Mapping[str, str] = (),
    warm_timeout_s: float = 60.0,
    engine: Path | None = None,
    cpus: Sequence[int] | None = None,
    **options: Any,
) -> LoadResult:
    """Loads the targets at ``rate_per_s`` for at least ``duration_s`` and, with
    ``warm_urls``, until each of those answers 2xx; nothing of it is meant to be kept.

    ``warm_urls`` may name only some targets: a mapping ``{name: url}``, or URLs that start
    with their target's URL. The engine ends the warm-up with a 1 ms measurement phase,
    whose result is returned for inspection.
    """
    plan = LoadPlan(
        targets=tuple(targets.items()),
        trace=trace,
        paths=tuple(paths),
        rate_per_s=rate_per_s,
        duration_s=0.001,
        warmup_rate_per_s=rate_per_s,
        warmup_duration_s=duration_s,
        warm_urls=_named_warm_urls(targets, warm_urls),
        warm_timeout_s=warm_timeout_s,
        **options,
    )
    return run_load(plan, engine=engine, cpus=cpus)


def _named_warm_urls(
    targets: Mapping[str, str], warm_urls: Sequence[str] | Mapping[str, str]
) -> tuple[str, ...]:
    if isinstance(warm_urls, Mapping):
        return tuple(f"{name}={url}" for name, url in warm_urls.items())
    if len(warm_urls) == len(targets) or not warm_urls:
        return tuple(warm_urls)
    named = []
    for url in warm_urls:
        owners = [n for n, base in targets.items() if url.startswith(base.rstrip("/") + "/")]
        if len(owners) != 1:
            raise ConfigError(
                f"warm URL {url} belongs to {len(owners)} targets; cannot tell whose it is",
                hint="pass warm_urls as a mapping {target name: url}",
            )
        named.append(f"{owners[0]}={url}")
    return tuple(named)


def measure(
    *,
    targets: Mapping[str, str],
    rate_per_s: float,
    duration_s: float,
    trace: Path | None = None,
    paths: Sequence[str] = (),
    requests_path: Path | None = None,
    summary_path: Path | None = None,
    engine: Path | None = None,
    cpus: Sequence[int] | None = None,
    **options: Any,
) -> LoadResult:
    """One measurement phase to every target in lockstep; ``options`` are other
    :class:`LoadPlan` fields. Keep ``requests_path`` to get :func:`latency_rows` later."""
    plan = LoadPlan(
        targets=tuple(targets.items()),
        trace=trace,
        paths=tuple(paths),
        rate_per_s=rate_per_s,
        duration_s=duration_s,
        requests_path=requests_path,
        summary_path=summary_path,
        **options,
    )
    return run_load(plan, engine=engine, cpus=cpus)


def latency_rows(result: LoadResult, *, trial: int, batch: int, host_of: Mapping[str, int]) -> Any:
    """Per-request observation rows (a ``pyarrow.Table``) of a run's successful requests.

    Columns follow the observation model: trial, batch, arm, host, request, endpoint,
    metric (``latency_us``, corrected), value (µs) and t (intended send time, seconds
    since the start of the measurement phase).
    """
    import pyarrow as pa  # heavy; only this function needs it

    if result.requests_path is None:
        raise EngineError(
            "latency_rows needs the run's request records",
            hint="run it with requests_path set",
        )
    records = read_requests(result.requests_path)
    ok = records[records["error"] == 0]
    names = np.array(list(result.targets), dtype=object)
    missing = [str(n) for n in names if n not in host_of]
    if missing:
        raise ConfigError(f"host_of has no host for target(s) {missing}")
    hosts = np.array([host_of[str(n)] for n in names], dtype=np.int64)
    endpoints = np.array(result.endpoints, dtype=object)
    n = len(ok)
    return pa.table(
        {
            "trial": np.full(n, trial, dtype=np.int64),
            "batch": np.full(n, batch, dtype=np.int64),
            "arm": pa.array(names[ok["target"]], type=pa.string()),
            "host": hosts[ok["target"]],
            "request": ok["request_id"].astype(np.int64),
            "endpoint": pa.array(endpoints[ok["endpoint"]], type=pa.string()),
            "metric": pa.array(["latency_us"] * n, type=pa.string()),
            "value": ok["latency_ns"] / 1e3,
            "t": ok["intended_ns"] / 1e9,
        }
    )


_DONE = object()


class ControlledLoad:
    """A ``--control`` run: change the rate while it goes and read each interval.

    ::

        with ControlledLoad(plan) as load:
            for interval in load.intervals():
                if interval.targets["a"].p99_us > slo_us:
                    break
                load.set_rate(interval.rate_per_s * 1.1)
        result = load.result

    A plan with ``duration_s=0`` runs until :meth:`stop`.
    """

    def __init__(self, plan: LoadPlan, *, engine: Path | None = None) -> None:
        self._plan = plan
        self._engine = engine
        self._proc: subprocess.Popen[str] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._summary_path: Path | None = None
        self._stderr: IO[str] | None = None
        self._lines: queue.Queue[object] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._result: LoadResult | None = None

    def __enter__(self) -> ControlledLoad:
        binary = self._engine or find_engine()
        self._tmp = tempfile.TemporaryDirectory(prefix="hairline-control-")
        self._summary_path = self._plan.summary_path or Path(self._tmp.name) / "summary.json"
        args = _with_summary(self._plan, self._summary_path).to_args(control=True)
        self._stderr = tempfile.TemporaryFile(mode="w+")
        try:
            self._proc = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                text=True,
                bufsize=1,
            )
        except OSError as err:
            self._close()
            raise EngineError(f"cannot run {binary}: {err}") from err
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._kill()
            self._close()
            return
        if self._result is None:
            self.stop()

    def _read_stdout(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line:
                self._lines.put(line)
        self._lines.put(_DONE)

    def set_rate(self, rate_per_s: float) -> None:
        """Changes the rate at once (a new schedule segment starts now)."""
        if not (math.isfinite(rate_per_s) and rate_per_s >= 0):
            raise ConfigError(f"rate_per_s: expected a number >= 0, got {rate_per_s}")
        self._send({"rate_per_s": rate_per_s})

    def intervals(self, *, timeout_s: float | None = None) -> Iterator[IntervalStats]:
        """Each interval as the engine reports it, until the run ends."""
        while True:
            try:
                item = self._lines.get(timeout=timeout_s)
            except queue.Empty:
                raise EngineError(
                    f"no interval report from the engine within {timeout_s} s"
                ) from None
            if item is _DONE:
                self._lines.put(_DONE)  # later calls end at once too
                return
            assert isinstance(item, str)
            data = json.loads(item)
            if data.get("type") == "interval":
                yield IntervalStats.from_json(data)

    def stop(self, *, timeout_s: float = 30.0) -> LoadResult:
        """Ends the run (in-flight requests get up to the request timeout) and reads it."""
        proc = self._proc
        if proc is None:
            raise EngineError("ControlledLoad.stop() called outside its `with` block")
        if proc.poll() is None:
            try:
                self._send({"stop": True})
                assert proc.stdin is not None
                proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass  # the engine already ended; its exit status tells how
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._kill()
            self._close()
            raise EngineError(f"hairline-engine did not stop within {timeout_s} s") from None
        if self._reader is not None:
            self._reader.join(timeout=5)
        stderr = self._stderr_text()
        try:
            assert self._summary_path is not None
            if returncode not in (0, EXIT_INVALID) or not self._summary_path.exists():
                raise EngineError(
                    f"hairline-engine load failed (exit {returncode}):\n{stderr.strip()}",
                    hint="the message above names the flag, file or target at fault",
                )
            self._result = _read_summary(self._summary_path, stderr, self._plan.requests_path)
            return self._result
        finally:
            self._close()

    @property
    def result(self) -> LoadResult:
        if self._result is None:
            raise EngineError("the run has not been stopped yet; call stop() first")
        return self._result

    def _send(self, command: Mapping[str, object]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.closed:
            raise EngineError("the controlled run is not running")
        try:
            proc.stdin.write(json.dumps(command) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise EngineError(
                f"the engine stopped reading commands: {err}\n{self._stderr_text()}"
            ) from err

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _close(self) -> None:
        if self._proc is not None:
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None and not stream.closed:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
