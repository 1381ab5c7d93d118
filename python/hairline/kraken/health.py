"""Health metrics as Kraken defines them (Kraken section 4.2, Figure 4): a value per entity,
five level ranges, a time window and a sample fraction; and the level a window of samples
is at.

A health file holds ``[metric.NAME]`` tables (docs/kraken.md, "Health metrics"). The
levels' ranges are ``[low, high)``, increasing and contiguous; a metric's threshold is the
low end of its NOMORE range.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hairline.config.sections import TomlModel
from hairline.config.tomlcheck import Problems, Report, read_toml
from hairline.errors import ConfigError
from hairline.kraken.promql import Expr, parse, parse_duration_s

__all__ = [
    "ENGINE_KEYS",
    "HealthFile",
    "HealthMetric",
    "Level",
    "MetricTable",
    "check_health_file",
    "level_of",
    "load_health_file",
]


class Level(IntEnum):
    """How loaded a metric says the system is, from "go on boldly" to "step back"."""

    BOLD = 0
    MODERATE = 1
    CAUTIOUS = 2
    NOMORE = 3
    BACKOFF = 4


ENGINE_KEYS = ("p50_ms", "p99_ms", "p999_ms", "error_rate", "achieved_rate_per_s")
"""The keys of entity "engine": values the engine reports per interval through the LB."""

_NAMES = tuple(level.name for level in Level)
_METRIC_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class HealthMetric:
    """One health metric. ``entity`` is "cluster", "server:NAME" or "engine"; ``query`` is
    ``key`` parsed (None for the engine's keys); ``ranges`` are the five levels' ``(low,
    high)`` in :class:`Level` order."""

    name: str
    entity: str
    key: str
    ranges: tuple[tuple[float, float], ...]
    time_window_s: float
    sample_fraction: float
    query: Expr | None = None

    @property
    def threshold(self) -> float:
        """Where NOMORE starts: the value the load test must not pass."""
        return self.ranges[Level.NOMORE][0]

    @property
    def server(self) -> str | None:
        """The server of a "server:NAME" entity."""
        return self.entity.split(":", 1)[1] if self.entity.startswith("server:") else None


def level_of(metric: HealthMetric, samples: Sequence[float]) -> Level | None:
    """The highest level at whose low end or above lie at least ``sample_fraction`` of the
    window's samples (and at least one of them); BOLD if none; None without samples (NaN
    samples are no samples): the metric is unavailable and the system unhealthy."""
    values = [v for v in samples if not math.isnan(v)]
    if not values:
        return None
    # A tolerance so that 0.4 of 5 samples is 2 samples despite binary fractions.
    needed = max(metric.sample_fraction * len(values) - 1e-9, 1)
    for level in reversed(Level):
        if level == Level.BOLD:
            break
        low = metric.ranges[level][0]
        if sum(1 for v in values if v >= low) >= needed:
            return level
    return Level.BOLD


class MetricTable(TomlModel):
    """``[metric.NAME]``: one health metric (docs/kraken.md, "Health metrics")."""

    entity: str
    """Whose value it is: "cluster" (the servers under test as one), "server:NAME" (one
    server) or "engine" (what the users see through the load balancer)."""
    key: str
    """For "cluster" and "server:NAME", a query over the servers' /metrics; for "engine",
    one of p50_ms, p99_ms, p999_ms, error_rate, achieved_rate_per_s."""
    time_window: str | float
    """How far back the samples that decide the level go: "500ms", "6s", "4m", "1h", or a
    number of seconds."""
    sample_fraction: float
    """In [0, 1]: the share of the window's samples that must reach a level for the metric
    to be at it."""
    level_ranges: dict[str, tuple[float, float]]
    """The five levels' [low, high) ranges, BOLD, MODERATE, CAUTIOUS, NOMORE and BACKOFF,
    increasing and contiguous (inf is allowed as BACKOFF's end)."""


class HealthFile(TomlModel):
    """A Kraken health file: its ``[metric.NAME]`` tables."""

    metric: dict[str, MetricTable]
    """The health metrics by name."""


def load_health_file(path: Path) -> tuple[HealthMetric, ...]:
    """The metrics of a health file; a :class:`ConfigError` lists every problem by file,
    line and field (``metric.NAME.FIELD``) with its fix."""
    problems = Problems()
    metrics = check_health_file(path, problems)
    problems.raise_if_any(path, hint=_HINT)
    return metrics


_HINT = 'fix each line above; docs/kraken.md, "Health metrics", describes the file'


def check_health_file(
    path: Path, problems: Problems, *, field: str = "file"
) -> tuple[HealthMetric, ...]:
    """The health file's metrics, each problem added to ``problems`` (the metrics with
    problems left out)."""
    before = len(problems.items)
    text, data = read_toml(path, problems, field=field)
    if len(problems.items) > before:
        return ()
    try:
        tables = HealthFile.model_validate(data).metric
    except ValidationError as err:
        problems.validation(path, text, err, _known_fields)
        # The other checks still run on each table without its bad fields.
        raw_tables = data.get("metric")
        tables = {
            name: table
            for name, raw in (raw_tables.items() if isinstance(raw_tables, dict) else ())
            if isinstance(raw, dict) and (table := _without_bad_fields(raw)) is not None
        }
    if not data.get("metric"):
        problems.add(str(path), None, "metric", "no metrics", "add a [metric.NAME] table")
    metrics: list[HealthMetric] = []
    for name, table in tables.items():
        metric = _metric(name, table, lambda loc, msg, fix: problems.at(path, text, loc, msg, fix))
        if metric is not None:
            metrics.append(metric)
    return tuple(metrics)


def _without_bad_fields(raw: dict[str, Any]) -> MetricTable | None:
    """The table validated without the fields that fail (None if a required one does)."""
    try:
        return MetricTable.model_validate(raw)
    except ValidationError as err:
        bad = {item["loc"][0] for item in err.errors() if item["loc"]}
    try:
        return MetricTable.model_validate({k: v for k, v in raw.items() if k not in bad})
    except ValidationError:
        return None


def _known_fields(table: tuple[str, ...]) -> list[str]:
    return list(MetricTable.model_fields) if len(table) == 2 else ["metric"]


def _metric(name: str, table: MetricTable, report: Report) -> HealthMetric | None:
    """The metric a valid table makes; None after reporting what is wrong with it."""
    loc = ("metric", name)
    ok = True
    if not _METRIC_NAME.match(name):
        report(loc, f"{name!r} is not a valid metric name", "use letters, digits, '.', '_', '-'")
        ok = False
    entity = table.entity
    if not (entity in ("cluster", "engine") or re.match(r"^server:[^\s:]+$", entity)):
        report((*loc, "entity"), f"unknown entity {entity!r}",
               'use "cluster", "server:NAME" (a server of [test] servers) or "engine"')  # fmt: skip
        ok = False
    query: Expr | None = None
    if entity == "engine":
        if table.key not in ENGINE_KEYS:
            close = difflib.get_close_matches(table.key, ENGINE_KEYS, n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(ENGINE_KEYS)}"
            report((*loc, "key"), f"{table.key!r} is not a value the engine reports", fix)
            ok = False
    else:
        try:
            query = parse(table.key)
        except ConfigError as err:
            report((*loc, "key"), err.message, err.hint or "")
            ok = False
    time_window_s = _window_s(table.time_window)
    if time_window_s is None:
        report((*loc, "time_window"), f"{table.time_window!r} is not a time window",
               'write a positive duration: "500ms", "6s", "4m" or a number of seconds')  # fmt: skip
        ok = False
    if not 0 <= table.sample_fraction <= 1:
        report((*loc, "sample_fraction"), f"{table.sample_fraction} is outside [0, 1]",
               "write the fraction of the window's samples, e.g. 0.4")  # fmt: skip
        ok = False
    ranges = _ranges(table.level_ranges, lambda level, msg, fix: report(
        (*loc, "level_ranges", *((level,) if level else ())), msg, fix))  # fmt: skip
    if not ok or ranges is None or time_window_s is None:
        return None
    return HealthMetric(name, entity, table.key, ranges, time_window_s,
                        table.sample_fraction, query)  # fmt: skip


def _window_s(value: str | float) -> float | None:
    try:
        seconds = float(value) if not isinstance(value, str) else parse_duration_s(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _ranges(
    given: dict[str, tuple[float, float]], report: Callable[[str | None, str, str], None]
) -> tuple[tuple[float, float], ...] | None:
    """The five ranges in level order, if they are right; each problem reported."""
    ok = True
    for name in given:
        if name not in _NAMES:
            close = difflib.get_close_matches(name.upper(), _NAMES, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            report(name, f"unknown level {name!r}", f"{hint}the levels are {', '.join(_NAMES)}")
            ok = False
    missing = [n for n in _NAMES if n not in given]
    if missing:
        report(None, f"missing level{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
               f"give all five levels, [low, high) each: {', '.join(_NAMES)}")  # fmt: skip
        return None
    ranges = tuple(given[n] for n in _NAMES)
    for name, (low, high) in zip(_NAMES, ranges, strict=True):
        if not low < high:
            report(name, f"[{low}, {high}) is empty", "write [low, high) with low below high")
            ok = False
    for (before, (start, end)), (name, (low, _)) in itertools.pairwise(
        zip(_NAMES, ranges, strict=True)
    ):
        if low < end:
            what = "is out of order with" if low < start else "overlaps"
            report(name, f"[{low}, ...) {what} {before}'s [{start}, {end})",
                   f"start {name} where {before} ends ({end}): ranges are contiguous, in "
                   f"the order {', '.join(_NAMES)}")  # fmt: skip
            ok = False
        elif low > end:
            report(name, f"a gap between {before}'s end ({end}) and {name}'s start ({low})",
                   f"start {name} at {end}: ranges are contiguous")  # fmt: skip
            ok = False
    return ranges if ok else None
