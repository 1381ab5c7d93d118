"""Per-CPU time from ``/proc/stat``: how busy each CPU was, and how much the hypervisor stole.

A shared VM or CI runner loses its CPUs to other guests without a word: on this project's
2-vCPU VMs a benchmark lost 11.8 s of CPU in one run. A batch during which the hypervisor
took more from one arm's CPU than from another's measured the neighbour, not the change,
so each batch records the steal of every CPU it used and the lab spoils the batch when the
arms' shares differ by too much (lab/validity.py).

Busy time is everything that ran on a CPU (any process, interrupts), where a cgroup's CPU
is one arm's: calibration needs it because on a small machine the engine shares a CPU with
an arm, and that CPU is as full as both together.

``/proc/stat`` counts in USER_HZ ticks (10 ms): fine for batches of seconds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuTimes", "busy_share", "parse_cpu_times", "read_cpu_times", "steal_ms"]

_PROC_STAT = Path("/proc/stat")
_TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuTimes:
    """One CPU's cumulative ticks: ``busy`` (user, nice, system, irq, softirq), ``idle``
    (idle, iowait) and ``steal``."""

    busy: int
    idle: int
    steal: int


def parse_cpu_times(text: str) -> dict[int, CpuTimes]:
    """``{cpu: CpuTimes}`` from the text of ``/proc/stat``. Pure.

    A ``cpuN`` line is ``cpuN user nice system idle iowait irq softirq steal ...``; a kernel
    too old to count steal (fewer than eight values) reads as no steal.
    """
    times: dict[int, CpuTimes] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit():
            continue
        v = [int(x) for x in rest.split()] + [0] * 8
        times[int(name[3:])] = CpuTimes(
            busy=v[0] + v[1] + v[2] + v[5] + v[6], idle=v[3] + v[4], steal=v[7]
        )
    return times


def read_cpu_times(path: Path = _PROC_STAT) -> dict[int, CpuTimes]:
    """This machine's ticks per CPU now; empty where ``/proc/stat`` cannot be read."""
    try:
        return parse_cpu_times(path.read_text())
    except OSError:
        return {}


def steal_ms(
    before: Mapping[int, CpuTimes], after: Mapping[int, CpuTimes], cpus: Iterable[int]
) -> dict[int, float]:
    """Milliseconds stolen from each of ``cpus`` between two readings. Pure."""
    return {
        cpu: (after[cpu].steal - before[cpu].steal) * _TICK_MS
        for cpu in sorted(set(cpus))
        if cpu in before and cpu in after
    }


def busy_share(
    before: Mapping[int, CpuTimes], after: Mapping[int, CpuTimes], cpus: Iterable[int]
) -> float | None:
    """The share of ``cpus``' time that something ran on them between two readings (steal
    left out of the total: time the VM did not have); None without both readings. Pure."""
    busy = total = 0
    for cpu in set(cpus):
        if cpu in before and cpu in after:
            b, a = before[cpu], after[cpu]
            busy += a.busy - b.busy
            total += (a.busy - b.busy) + (a.idle - b.idle)
    return busy / total if total > 0 else None
