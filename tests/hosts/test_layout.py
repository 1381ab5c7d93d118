"""This machine's CPUs as local hosts (hosts/layout.py): the split layout, one arm a CPU
set, and the duet, every arm on one CPU set and the engine on the last CPU."""

from __future__ import annotations

import pytest

from hairline.errors import HostsUnavailable
from hairline.hosts.layout import duet_layout, local_host_names, local_layout


def test_layout_keeps_a_cpu_for_the_engine_when_there_are_three_or_more() -> None:
    assert local_layout([0, 1]).hosts == ((0,), (1,))
    assert local_layout([0, 1]).engine_cpus == ()
    four = local_layout([0, 1, 2, 3])
    assert four.hosts == ((0,), (1,), (2,)) or four.hosts == ((0,), (1,))
    assert 3 in four.engine_cpus
    assert local_layout(range(8), cpus_per_host=2).hosts == ((0, 1), (2, 3), (4, 5))


def test_a_duet_puts_every_arm_on_one_cpu_set_and_the_engine_on_the_last_cpu() -> None:
    two = local_layout([0, 1], duet_arms=2)
    assert two.hosts == ((0,), (0,)) and two.engine_cpus == (1,) and two.duet
    three_arms = duet_layout([0, 1], arms=3)
    assert three_arms.hosts == ((0,), (0,), (0,))
    # More CPUs: all but the engine's by default, or cpus_per_host of them.
    assert duet_layout([0, 1, 2, 3], arms=2).hosts == ((0, 1, 2),) * 2
    narrow = duet_layout([0, 1, 2, 3], arms=2, cpus_per_host=2)
    assert narrow.hosts == ((0, 1),) * 2 and narrow.engine_cpus == (2, 3)


def test_a_duet_of_one_arm_still_has_two_hosts_for_an_aa() -> None:
    assert duet_layout([0, 1], arms=1).hosts == ((0,), (0,))


def test_a_duet_needs_a_cpu_for_the_engine_and_says_so() -> None:
    with pytest.raises(HostsUnavailable) as err:
        duet_layout([3], arms=2)
    assert "a duet needs 2 CPUs" in err.value.message
    assert 'local_layout = "split"' in (err.value.hint or "")
    with pytest.raises(HostsUnavailable, match="4 CPUs per host but only 1"):
        duet_layout([0, 1], arms=2, cpus_per_host=4)


def test_hosts_are_named_by_their_cpus_and_a_duets_by_a_letter_too() -> None:
    assert list(local_host_names("vm", local_layout([0, 1]))) == ["vm/cpu0", "vm/cpu1"]
    wide = local_host_names("vm", local_layout(range(8), cpus_per_host=2))
    assert list(wide) == ["vm/cpu0-1", "vm/cpu2-3", "vm/cpu4-5"]
    duet = local_host_names("vm", duet_layout([0, 1], arms=2))
    assert duet == {"vm/cpu0:a": (0,), "vm/cpu0:b": (0,)}
