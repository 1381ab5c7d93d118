"""The scraped ``/metrics`` of a fleet's servers, kept for a bounded time, for queries.

Each scrape is parsed by the one Prometheus parser (``hairline.collect.prometheus``) and
its series labelled ``instance="<server name>"``. A query's instant selector sees, per
instance, the series of that instance's latest scrape (a series absent from it is gone, as
with Prometheus's staleness markers), and nothing of an instance not scraped for
``stale_after_s``; a range selector sees every sample in its window.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hairline.collect.prometheus import parse_text

__all__ = ["Labels", "MatchOp", "Matcher", "SeriesStore"]

Labels = tuple[tuple[str, str], ...]
"""A series' labels without its name, sorted by label name."""

MatchOp = Literal["=", "!=", "=~", "!~"]


@dataclass(frozen=True)
class Matcher:
    """``label="v"``, ``label!="v"``, ``label=~"re"`` or ``label!~"re"``; a missing label
    is the empty string, as in Prometheus."""

    label: str
    op: MatchOp
    value: str
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.op in ("=~", "!~") and self.pattern is None:
            # Prometheus anchors its regular expressions at both ends.
            object.__setattr__(self, "pattern", re.compile(f"(?:{self.value})\\Z"))

    def matches(self, labels: Labels) -> bool:
        have = dict(labels).get(self.label, "")
        if self.op == "=":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        assert self.pattern is not None
        found = self.pattern.match(have) is not None
        return found if self.op == "=~" else not found


@dataclass
class _Series:
    instance: str
    times_s: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


class SeriesStore:
    """Samples by metric name and labels, each series one instance's.

    ``retention_s`` bounds memory: samples older than the newest scrape minus it are
    dropped, so it must cover the longest range selector in use (``promql.longest_range_s``)
    plus a scrape interval or two.
    """

    def __init__(self, *, retention_s: float = 60.0, stale_after_s: float = 10.0) -> None:
        if retention_s <= 0 or stale_after_s <= 0:
            raise ValueError("retention_s and stale_after_s must be positive")
        self.retention_s = retention_s
        self.stale_after_s = stale_after_s
        self._series: dict[str, dict[Labels, _Series]] = {}
        self._scrapes_s: dict[str, list[float]] = {}
        self._newest_s = float("-inf")

    def add_scrape(self, instance: str, at_s: float, text: str) -> None:
        """One scrape of ``instance``'s metrics at ``at_s`` (a monotonic clock's seconds)."""
        scrapes = self._scrapes_s.setdefault(instance, [])
        if scrapes and at_s <= scrapes[-1]:
            raise ValueError(f"scrape of {instance} at {at_s} s is not after {scrapes[-1]} s")
        scrapes.append(at_s)
        for (name, pairs), value in parse_text(text).items():
            labels = tuple(sorted({**dict(pairs), "instance": instance}.items()))
            series = self._series.setdefault(name, {}).setdefault(labels, _Series(instance))
            series.times_s.append(at_s)
            series.values.append(value)
        if at_s > self._newest_s:
            self._newest_s = at_s
            self._drop_before(at_s - self.retention_s)

    def instant(
        self, name: str, matchers: Sequence[Matcher], at_s: float, instances: Collection[str]
    ) -> dict[Labels, float]:
        """Each matching series' value in its instance's latest scrape at or before ``at_s``."""
        latest: dict[str, float] = {}
        for instance in instances:
            scrapes = self._scrapes_s.get(instance, [])
            i = bisect.bisect_right(scrapes, at_s)
            if i and at_s - scrapes[i - 1] <= self.stale_after_s:
                latest[instance] = scrapes[i - 1]
        out: dict[Labels, float] = {}
        for labels, series in self._matching(name, matchers, latest):
            i = bisect.bisect_right(series.times_s, at_s)
            if i and series.times_s[i - 1] == latest[series.instance]:
                out[labels] = series.values[i - 1]
        return out

    def range_samples(
        self,
        name: str,
        matchers: Sequence[Matcher],
        at_s: float,
        range_s: float,
        instances: Collection[str],
    ) -> dict[Labels, list[tuple[float, float]]]:
        """Each matching series' ``(time_s, value)`` samples in ``(at_s - range_s, at_s]``."""
        out: dict[Labels, list[tuple[float, float]]] = {}
        for labels, series in self._matching(name, matchers, instances):
            lo = bisect.bisect_right(series.times_s, at_s - range_s)
            hi = bisect.bisect_right(series.times_s, at_s)
            if hi > lo:
                out[labels] = list(zip(series.times_s[lo:hi], series.values[lo:hi], strict=True))
        return out

    def sample_count(self) -> int:
        """How many samples are held (what ``retention_s`` bounds)."""
        return sum(len(s.times_s) for by in self._series.values() for s in by.values())

    def _matching(
        self, name: str, matchers: Sequence[Matcher], instances: Collection[str]
    ) -> list[tuple[Labels, _Series]]:
        return [
            (labels, series)
            for labels, series in self._series.get(name, {}).items()
            if series.instance in instances and all(m.matches(labels) for m in matchers)
        ]

    def _drop_before(self, cutoff_s: float) -> None:
        for name in list(self._series):
            by_labels = self._series[name]
            for labels in list(by_labels):
                series = by_labels[labels]
                cut = bisect.bisect_left(series.times_s, cutoff_s)
                if cut == len(series.times_s):
                    del by_labels[labels]
                elif cut:
                    del series.times_s[:cut], series.values[:cut]
            if not by_labels:
                del self._series[name]
        for scrapes in self._scrapes_s.values():
            # The newest scrape stays: it says which series an instance still has.
            del scrapes[: min(bisect.bisect_left(scrapes, cutoff_s), len(scrapes) - 1)]
