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

from hairline.engine.controlled import ControlledLoad
from hairline.engine.plan import LoadPlan
from hairline.engine.records import REQUEST_DTYPE, read_requests
from hairline.engine.results import (
    EndpointResult,
    Gate,
    IntervalStats,
    IntervalTarget,
    LatencySummary,
    LoadResult,
    TargetResult,
)
from hairline.engine.run import (
    ENGINE_NAME,
    check_plan,
    find_engine,
    measure,
    run_load,
    warm_up,
)

__all__ = [
    "ENGINE_NAME",
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
    "check_plan",
    "find_engine",
    "measure",
    "read_requests",
    "run_load",
    "warm_up",
]
