"""The arms' memory over a batch: anonymous memory sampled every 0.25 s while the load runs
(its cgroup's, or its process tree's), and the cgroup's peak once it ended."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import numpy as np

from hairline.collect.metric import ArmProbe, Measured, MetricSpec, Reading

__all__ = ["ANON_MEMORY", "MEMORY", "PEAK_MEMORY", "MemorySampler"]

ANON_MEMORY = MetricSpec(
    "anon_memory_bytes",
    "bytes",
    "higher-is-worse",
    "anonymous memory of the arm's cgroup, mean of 4 samples a second",
)
PEAK_MEMORY = MetricSpec(
    "peak_memory_bytes",
    "bytes",
    "higher-is-worse",
    "cgroup v2's memory.peak, where the memory controller is enabled",
)


class MemorySampler:
    """Samples each arm's anonymous memory every ``interval_s`` on a thread of its own
    (the window's; joined when it closes)."""

    def __init__(self, arms: Mapping[str, ArmProbe], interval_s: float = 0.25) -> None:
        self._arms = arms
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.samples: dict[str, list[int]] = {name: [] for name in arms}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            for name, arm in self._arms.items():
                self.samples[name].append(arm.anon_memory_bytes())

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class _MemoryWindow:
    def __init__(self, arms: Mapping[str, ArmProbe]) -> None:
        self._arms = arms
        self._sampler = MemorySampler(arms)
        self._peak: dict[str, int | None] = {}

    def __enter__(self) -> _MemoryWindow:
        self._sampler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sampler.__exit__()
        self._peak = {name: arm.peak_memory_bytes() for name, arm in self._arms.items()}

    def values(self, arm: str, measured: Measured) -> dict[str, float]:
        out: dict[str, float] = {}
        if self._sampler.samples.get(arm):
            out[ANON_MEMORY.name] = float(np.mean(self._sampler.samples[arm]))
        if (peak := self._peak.get(arm)) is not None:
            out[PEAK_MEMORY.name] = float(peak)
        return out


MEMORY = Reading("memory", (ANON_MEMORY, PEAK_MEMORY), _MemoryWindow)
