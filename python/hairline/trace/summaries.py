"""What ``hairline trace import|stats|filter|sample --json`` write: typed, so that their
JSON Schema (docs/schema/trace-*.json) is generated from these types."""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict

from hairline.kit.jsonout import documented
from hairline.trace.shape import MixGroup
from hairline.trace.stats import BodySizes, EndpointStats, RateBucket

__all__ = ["TraceFilterJson", "TraceImportJson", "TraceSampleJson", "TraceStatsJson"]


@documented
class TraceImportJson(TypedDict):
    """A trace imported from logs (``hairline trace import --json``; docs/traffic.md)."""

    output: str
    """The trace written."""
    format: str
    """The logs' format."""
    files: list[str]
    records: int
    """Records read from the logs."""
    requests: int
    """Requests written."""
    endpoints: int
    """Endpoint labels among them."""
    skipped: dict[str, int]
    """Bad lines skipped, by reason."""
    first_skipped: dict[str, str]
    """Per reason, where the first such line was and what was wrong."""
    filtered: dict[str, int]
    """Records filtered out, by filter."""
    sorted_by_time: bool
    """Whether the requests had to be put in time order."""


@documented
class TraceStatsJson(TypedDict):
    """A trace's requests by endpoint, rate over time, body sizes and methods (``hairline
    trace stats --json``; every endpoint, busiest first)."""

    trace: str
    request_count: int
    endpoint_count: int
    timed_count: int
    """Requests with a timestamp."""
    duration_s: float | None
    mean_rate_per_s: float | None
    backwards_count: int
    """Requests whose timestamp is before the one before them."""
    first_ts_us: int | None
    bucket_s: float | None
    """The length of each ``rate`` bucket."""
    peak_rate_per_s: float | None
    methods: dict[str, int]
    body: BodySizes
    endpoints: list[EndpointStats]
    rate: list[RateBucket]


@documented
class TraceFilterJson(TypedDict):
    """A trace filtered to endpoints or re-mixed (``hairline trace filter --json``)."""

    input: str
    output: str
    input_requests: int
    requests: int
    passes: int
    """Passes over the recorded timeline (more than one when a label had too few requests
    and they repeat)."""
    with_replacement: bool
    groups: list[MixGroup]
    """Each ``--mix`` entry: what the trace had and what was chosen."""


@documented
class TraceSampleJson(TypedDict):
    """A trace sampled (``hairline trace sample --json``)."""

    input: str
    output: str
    input_requests: int
    requests: int
    intervals: int
    """With ``--reservoir``: the intervals (x endpoints with ``--per-endpoint``)."""
    full_intervals: int
    """Of them, those filled to K."""
    seed: int
    reservoir: NotRequired[str]
    """With ``--reservoir``: K/T."""
    per_endpoint: NotRequired[bool]
    fraction: NotRequired[float]
    """With ``--fraction``: the probability each request was kept with."""
