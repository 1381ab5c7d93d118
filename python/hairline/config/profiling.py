"""``[service.profile]``: sample each arm's stacks during every batch and compare functions.

A change that is 0.2% of a service is below what any trial count on one machine can see in
its CPU per request, but it is 20% of the one function it touches. With this table each arm
is sampled the same way while the load runs, and the report lists the functions whose CPU
per request changed (docs/profiling.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hairline.config.sections import TomlModel

__all__ = ["ProfileConfig"]


class ProfileConfig(TomlModel):
    """How each arm is profiled and how its functions are compared."""

    profiler: Literal["perf"] = "perf"
    """perf: ``perf record -e cpu-clock`` on every process of the arm (Debian's linux-perf;
    the software clock works where there are no hardware counters). The only profiler so
    far; py-spy and a service's own endpoint are docs/profiling.md's "not yet"."""
    frequency_hz: int = Field(default=999, ge=1, le=20_000)
    """Samples a second. 999, not 1000: a frequency that is not a multiple of the kernel's
    tick does not sample in step with timers."""
    call_graph: Literal["dwarf", "fp", "none"] = "dwarf"
    """dwarf unwinds binaries built without frame pointers (Rust and C release builds) at
    the cost of copying stack_bytes of stack per sample; fp follows frame pointers; none
    keeps the sampled function alone (self costs only)."""
    stack_bytes: int = Field(default=8192, ge=1024, le=65_528)
    """With dwarf: the stack copied per sample (perf's own default, 8 KiB: a deeper stack
    loses its outermost frames, not its leaf)."""
    fdr: float = Field(default=0.05, gt=0, lt=1)
    """The Benjamini-Hochberg false discovery rate over every function compared."""
    min_share: float = Field(default=0.005, ge=0, lt=1)
    """Functions below this share of the arm's sampled CPU (in both arms) are pooled into
    one "(other functions)" row: their few samples would each be a test that can only add
    false discoveries."""
