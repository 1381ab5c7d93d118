"""What ``hairline-engine load`` reports: the summary JSON as typed values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hairline.errors import EngineError

#: The summary format this package reads: the engine writes its own as
#: ``hairline_load_summary`` (``SUMMARY_VERSION`` in engine/src/load/summary.rs; the two
#: change together).
SUMMARY_VERSION = 1


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
    """One target's responses in an interval; latencies are NaN when there were none."""

    requests: int
    errors: int
    sent: int
    achieved_rate_per_s: float
    p50_us: float
    p99_us: float
    # Defaults so that an older engine's lines still parse.
    p999_us: float = math.nan
    max_us: float = math.nan
    mean_us: float = math.nan


@dataclass(frozen=True)
class IntervalStats:
    """One ``--interval-ms`` slice of the measurement phase.

    ``scheduled`` counts the interval's sends once however many targets there are;
    ``late_sends`` (later than the summary's late gate allows) and ``dropped`` (the
    ``--max-in-flight`` limit was reached) count each target's send; ``behind`` counts the
    sends the engine's pacer itself took off the schedule late; ``in_flight`` is what was
    outstanding over all targets when the interval closed. An older engine leaves them 0.
    """

    start_s: float
    end_s: float
    rate_per_s: float
    targets: Mapping[str, IntervalTarget]
    scheduled: int = 0
    late_sends: int = 0
    dropped: int = 0
    in_flight: int = 0
    behind: int = 0

    @property
    def generator_saturated(self) -> bool:
        """The engine itself could not keep the schedule: its pacer took more than 1% of
        the interval's sends off the schedule late. A capacity search stops on it rather
        than blaming the service.

        Late writes (``late_sends``) and drops are not the test: past a service's knee its
        requests queue, new connections wait on it and in-flight requests reach the limit,
        so sends go out late while the engine keeps time. Measured: 2.4% of sends late at
        3,200/s against a saturated sample service with the pacer on time.
        """
        return self.behind > 0.01 * self.scheduled

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
                    p999_us=nan_if_none(t.get("p999_us")),
                    max_us=nan_if_none(t.get("max_us")),
                    mean_us=nan_if_none(t.get("mean_us")),
                )
                for name, t in data["targets"].items()
            },
            scheduled=int(data.get("scheduled", 0)),
            late_sends=int(data.get("late_sends", 0)),
            dropped=int(data.get("dropped", 0)),
            behind=int(data.get("behind", 0)),
            in_flight=int(data.get("in_flight", 0)),
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
        check_summary_version(data)
        try:
            return cls._from_json(data, requests_path)
        except (KeyError, TypeError, ValueError) as err:
            raise EngineError(
                f"the engine's summary JSON is missing or has a bad field: {err!r}",
                hint="rebuild the engine with `make build`; if the field is still wrong, the "
                "engine's summary (engine/src/load/summary.rs) and this module disagree",
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


def check_summary_version(data: Mapping[str, Any]) -> None:
    """Refuses a summary of another format than :data:`SUMMARY_VERSION`: the engine binary
    was built from other sources than this package (a stale ``target/release``, or
    ``$HAIRLINE_ENGINE`` pointing at another checkout's)."""
    version = data.get("hairline_load_summary") if isinstance(data, Mapping) else None
    if version == SUMMARY_VERSION:
        return
    written = "no version" if version is None else f"version {version!r}"
    raise EngineError(
        f"the engine's load summary has {written} (hairline_load_summary); this hairline "
        f"reads version {SUMMARY_VERSION}: the engine and the package are different builds",
        hint="rebuild the engine with `make build` (or point HAIRLINE_ENGINE at the engine "
        "built with this package)",
    )
