"""Host allocation: one experiment per host, team quotas, lapsed allocations come back."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from hairline.errors import HostsUnavailable
from hairline.hosts.inventory import (
    Allocation,
    Waiting,
    allocate,
    ensure_local_hosts,
    held_hosts,
    local_layout,
    release_hosts,
    set_quota,
)
from hairline.store.db import Store, open_store
from hairline.store.models import Experiment, Service

_SERVICE_NUMBERS = itertools.count()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Store:
    s = open_store(db_url, home=tmp_path / "home")
    ensure_local_hosts(s, cpus_per_host=1)
    yield s  # type: ignore[misc]
    s.close()


def _experiments(store: Store, n: int) -> list[int]:
    with store.transaction() as session:
        service = Service(name=f"svc-{next(_SERVICE_NUMBERS)}", created_at=0.0)
        session.add(service)
        session.flush()
        rows = [
            Experiment(
                service_id=service.id,
                kind="ab",
                team="t",
                phase="allocating",
                spec="{}",
                source_file="",
                artifacts_dir="",
                progress="",
                created_at=0.0,
                updated_at=0.0,
                claims=0,
                cancel_requested=False,
            )
            for _ in range(n)
        ]
        session.add_all(rows)
        session.flush()
        return [r.id for r in rows]


def test_layout_keeps_a_cpu_for_the_engine_when_there_are_three_or_more() -> None:
    assert local_layout([0, 1]).hosts == ((0,), (1,))
    assert local_layout([0, 1]).engine_cpus == ()
    four = local_layout([0, 1, 2, 3])
    assert four.hosts == ((0,), (1,), (2,)) or four.hosts == ((0,), (1,))
    assert 3 in four.engine_cpus
    assert local_layout(range(8), cpus_per_host=2).hosts == ((0, 1), (2, 3), (4, 5))


def test_a_host_goes_to_one_experiment_at_a_time(store: Store) -> None:
    clock = FakeClock()
    first, second = _experiments(store, 2)
    got = allocate(store, first, "t", 2, lease_s=30, clock=clock)
    assert isinstance(got, Allocation) and len(got.host_ids) == 2
    waiting = allocate(store, second, "other", 2, lease_s=30, clock=clock)
    assert isinstance(waiting, Waiting) and "free" in waiting.reason
    release_hosts(store, first)
    assert isinstance(allocate(store, second, "other", 2, lease_s=30, clock=clock), Allocation)


def test_allocating_again_returns_the_same_hosts(store: Store) -> None:
    clock = FakeClock()
    (first,) = _experiments(store, 1)
    a = allocate(store, first, "t", 2, lease_s=30, clock=clock)
    b = allocate(store, first, "t", 2, lease_s=30, clock=clock)
    assert isinstance(a, Allocation) and isinstance(b, Allocation)
    assert a.host_ids == b.host_ids


def test_a_team_over_its_quota_waits_and_one_that_can_never_fit_fails(store: Store) -> None:
    clock = FakeClock()
    set_quota(store, "t", 1)
    (first,) = _experiments(store, 1)
    with pytest.raises(HostsUnavailable, match="may hold 1 hosts") as err:
        allocate(store, first, "t", 2, lease_s=30, clock=clock)
    assert err.value.hint is not None and "hairline lab quota t 2" in err.value.hint
    set_quota(store, "t", 2)
    one, two = _experiments(store, 2)
    assert isinstance(allocate(store, one, "t", 1, lease_s=30, clock=clock), Allocation)
    waiting = allocate(store, two, "t", 2, lease_s=30, clock=clock)
    assert isinstance(waiting, Waiting) and "holds 1 of its 2" in waiting.reason


def test_an_allocation_lapses_with_its_lease(store: Store) -> None:
    clock = FakeClock()
    first, second = _experiments(store, 2)
    assert isinstance(allocate(store, first, "t", 2, lease_s=30, clock=clock), Allocation)
    clock.now += 31  # the first experiment's processor died and stopped renewing
    assert isinstance(allocate(store, second, "u", 2, lease_s=30, clock=clock), Allocation)
    assert {eid for _, eid in held_hosts(store)} == {second}


def test_more_arms_than_hosts_is_an_error_with_a_hint(store: Store) -> None:
    (first,) = _experiments(store, 1)
    set_quota(store, "t", 10)
    with pytest.raises(HostsUnavailable, match="this machine has 2 hosts"):
        allocate(store, first, "t", 3, lease_s=30, clock=FakeClock())
