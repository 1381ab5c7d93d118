"""Every built-in metric, each declared once beside the collector that measures it.

Adding a metric is a collector module in ``collect/`` (its :class:`MetricSpec`\\ s and a
:class:`Collector`) and its line in :data:`COLLECTORS` (docs/ARCHITECTURE.md, "Adding a
metric"). The lab's runner opens the collectors' windows around each batch (all but the
optional ones the service file does not name in ``collect``); config reads directions and
names from :data:`BUILTIN`, so a new metric's threshold can be set in ``[service.metrics]``
the moment it exists.
"""

from __future__ import annotations

from collections.abc import Iterable

from hairline.collect.memory import MEMORY
from hairline.collect.metric import Collector, Direction, MetricSpec
from hairline.collect.summary import CPU, LOAD_SUMMARY
from hairline.collect.switches import CONTEXT_SWITCHES

__all__ = [
    "BUILTIN",
    "COLLECTORS",
    "LATENCY",
    "MAX_THROUGHPUT",
    "OPTIONAL",
    "builtin_direction",
    "collectors_for",
]

#: The collectors, in the order their metrics' rows are written (the analysis reads the
#: metrics in the order they first appear).
COLLECTORS: tuple[Collector, ...] = (
    CPU,
    MEMORY,
    LOAD_SUMMARY,
    CONTEXT_SWITCHES,
)

# Metrics whose rows another part of the lab writes: one row per request (lab/latency.py,
# from the engine's request records) and capacity mode's result (lab/capacity.py).
LATENCY = MetricSpec(
    "latency_us",
    "µs",
    "higher-is-worse",
    "each request's latency, corrected for coordinated omission, with its intended send time",
)
MAX_THROUGHPUT = MetricSpec(
    "max_throughput_per_s",
    "requests/s",
    "lower-is-worse",
    "capacity mode: the highest rate the arm sustained within the SLO",
)

#: Every built-in metric by name.
BUILTIN: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (*(m for c in COLLECTORS for m in c.metrics), LATENCY, MAX_THROUGHPUT)
}

#: The collectors a service file turns on with ``collect = [NAME, ...]``.
OPTIONAL: dict[str, Collector] = {c.name: c for c in COLLECTORS if c.optional}


def builtin_direction(metric: str) -> Direction:
    """The direction of a built-in metric (``name[endpoint]`` included); higher-is-worse for
    any other (counters per request, CPU, latency: most things cost)."""
    spec = BUILTIN.get(metric.split("[", 1)[0])
    return spec.direction if spec is not None else "higher-is-worse"


def collectors_for(optional: Iterable[str] = ()) -> tuple[Collector, ...]:
    """The collectors a batch runs: every one that is not optional, and the optional ones
    named (names the registry does not know are config's to refuse: config/checks.py)."""
    wanted = set(optional)
    return tuple(c for c in COLLECTORS if not c.optional or c.name in wanted)
