"""Design schedules: who runs where, batch by batch."""

from __future__ import annotations

import pytest

from hairline.lab.schedule import Batch, schedule


def test_fully_balanced_swaps_two_arms_within_each_trial() -> None:
    assert schedule(("A", "B"), trials=2, design="fully-balanced") == [
        Batch(0, 0, ("A", "B")),
        Batch(0, 1, ("B", "A")),
        Batch(1, 0, ("A", "B")),
        Batch(1, 1, ("B", "A")),
    ]


def test_fully_balanced_puts_every_arm_on_every_host_each_trial() -> None:
    batches = schedule(("A", "B", "C"), trials=1, design="fully-balanced")
    assert len(batches) == 3
    for host in range(3):
        assert {b.arm_on_host[host] for b in batches} == {"A", "B", "C"}


def test_request_balanced_alternates_hosts_between_trials() -> None:
    batches = schedule(("A", "B"), trials=3, design="request-balanced")
    assert [b.arm_on_host for b in batches] == [("A", "B"), ("B", "A"), ("A", "B")]
    assert all(b.batch == 0 for b in batches)


def test_pinned_keeps_every_arm_on_its_own_host_for_hardware_mode() -> None:
    batches = schedule(("xeon", "epyc"), trials=3, design="pinned")
    assert [(b.trial, b.batch) for b in batches] == [(0, 0), (1, 0), (2, 0)]
    assert {b.arm_on_host for b in batches} == {("xeon", "epyc")}


@pytest.mark.parametrize(
    ("arms", "trials", "design", "message"),
    [
        (("A",), 1, "fully-balanced", "two distinct arms"),
        (("A", "A"), 1, "fully-balanced", "two distinct arms"),
        (("A", "B"), 0, "fully-balanced", "at least 1"),
        (("A", "B"), 1, "unbalanced", "unknown design"),
    ],
)
def test_bad_schedules_are_refused(
    arms: tuple[str, ...], trials: int, design: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        schedule(arms, trials=trials, design=design)  # type: ignore[arg-type]
