"""Per-CPU busy and steal time from the kernel's /proc/stat format."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.collect.cpustat import (
    CpuTimes,
    busy_share,
    parse_cpu_times,
    read_cpu_times,
    steal_ms,
)

# The kernel's format: the total line, then one per CPU (user nice system idle iowait irq
# softirq steal guest guest_nice), then other counters.
STAT = """cpu  12446 0 2868 15537 396 0 114 76 0 0
cpu0 5011 0 1055 9556 42 0 28 35 0 0
cpu1 7435 0 1813 5981 353 0 85 41 0 0
intr 1234 0 0
ctxt 99
"""


def test_each_cpu_line_gives_busy_idle_and_steal_ticks() -> None:
    times = parse_cpu_times(STAT)

    assert set(times) == {0, 1}
    assert times[0] == CpuTimes(busy=5011 + 1055 + 28, idle=9556 + 42, steal=35)
    assert times[1].steal == 41


def test_a_kernel_without_a_steal_column_reads_as_no_steal() -> None:
    assert parse_cpu_times("cpu0 10 0 5 100\n")[0] == CpuTimes(busy=15, idle=100, steal=0)


def test_steal_is_counted_per_cpu_in_milliseconds() -> None:
    before = parse_cpu_times(STAT)
    after = parse_cpu_times(STAT.replace(" 35 0 0", " 135 0 0"))

    assert steal_ms(before, after, [0, 1, 7]) == {0: 1000.0, 1: 0.0}


def test_busy_share_is_what_ran_over_what_the_vm_had() -> None:
    before = {0: CpuTimes(busy=100, idle=100, steal=0), 1: CpuTimes(busy=0, idle=0, steal=0)}
    after = {0: CpuTimes(busy=160, idle=140, steal=50), 1: CpuTimes(busy=0, idle=100, steal=0)}

    assert busy_share(before, after, [0]) == pytest.approx(0.6)
    assert busy_share(before, after, [0, 1]) == pytest.approx(60 / 200)
    assert busy_share(before, after, [5]) is None


def test_this_machine_has_a_reading_for_every_cpu_it_may_use(tmp_path: Path) -> None:
    import os

    assert set(os.sched_getaffinity(0)) <= set(read_cpu_times())
    assert read_cpu_times(tmp_path / "missing") == {}
