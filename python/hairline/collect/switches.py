"""Context switches per request: how often the arm's threads left the CPU, voluntarily
(they blocked: a lock, a read, a sleep) or not (the scheduler preempted them).

A change that adds a lock, a syscall or a hand-off between threads shows here before it
shows in CPU. Read from every thread's ``/proc/PID/task/TID/status`` at the start and end of
the measurement phase (the kernel keeps no cgroup-wide count); a thread that exited during
the window takes its count with it, as in the procfs CPU fallback. Optional: a service file
turns it on with ``collect = ["context_switches"]``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from hairline.collect.metric import ArmProbe, Measured, MetricSpec, Reading

__all__ = ["CONTEXT_SWITCHES", "INVOLUNTARY", "VOLUNTARY", "thread_switches"]

VOLUNTARY = MetricSpec(
    "voluntary_switches_per_request",
    "switches/request",
    "higher-is-worse",
    "times the arm's threads blocked (gave up the CPU) per response, from procfs",
)
INVOLUNTARY = MetricSpec(
    "involuntary_switches_per_request",
    "switches/request",
    "higher-is-worse",
    "times the scheduler preempted the arm's threads per response, from procfs",
)

_PROC = Path("/proc")
_KEYS = {"voluntary_ctxt_switches:": 0, "nonvoluntary_ctxt_switches:": 1}


def thread_switches(pids: Iterable[int], *, proc: Path = _PROC) -> dict[int, tuple[int, int]]:
    """``{tid: (voluntary, involuntary)}`` of every live thread of ``pids``; a process or
    thread gone between listing and reading is skipped."""
    out: dict[int, tuple[int, int]] = {}
    for pid in pids:
        try:
            tids = os.listdir(proc / str(pid) / "task")
        except OSError:
            continue
        for tid in tids:
            try:
                text = (proc / str(pid) / "task" / tid / "status").read_text()
            except OSError:
                continue
            counts = [0, 0]
            for line in text.splitlines():
                key, _, value = line.partition("\t")
                if key in _KEYS:
                    counts[_KEYS[key]] = int(value)
            out[int(tid)] = (counts[0], counts[1])
    return out


class _SwitchesWindow:
    def __init__(self, arms: Mapping[str, ArmProbe]) -> None:
        self._arms = arms
        self._before: dict[str, dict[int, tuple[int, int]]] = {}
        self._after: dict[str, dict[int, tuple[int, int]]] = {}

    def __enter__(self) -> _SwitchesWindow:
        self._before = {n: thread_switches(a.pids()) for n, a in self._arms.items()}
        return self

    def __exit__(self, *exc: object) -> None:
        self._after = {n: thread_switches(a.pids()) for n, a in self._arms.items()}

    def values(self, arm: str, measured: Measured) -> dict[str, float]:
        after = self._after.get(arm)
        if not after:
            # No processes to read (a Ray arm's are on its node): no rows.
            return {}
        before = self._before.get(arm, {})
        # A thread born in the window switched only in it; one that died took its count.
        voluntary = sum(v - before.get(t, (0, 0))[0] for t, (v, _) in after.items())
        involuntary = sum(i - before.get(t, (0, 0))[1] for t, (_, i) in after.items())
        return {
            VOLUNTARY.name: voluntary / measured.served,
            INVOLUNTARY.name: involuntary / measured.served,
        }


CONTEXT_SWITCHES = Reading(
    "context_switches", (VOLUNTARY, INVOLUNTARY), _SwitchesWindow, optional=True
)
