"""The durable queue: one owner per experiment at a time, leases that lapse, takeover; the
claim order (priority, then the team furthest below its quota share, then age)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from hairline.config import ExperimentConfig, load_experiment
from hairline.errors import HairlineError
from hairline.hosts.quotas import set_quota
from hairline.lab.queue import (
    Cancelled,
    LeaseKeeper,
    LeaseLost,
    claim,
    enqueue,
    release,
    renew,
    request_cancel,
    transition,
)
from hairline.store.db import Store, open_store
from hairline.store.models import Arm, Experiment, Host, Service, Trial

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def config(tmp_path: Path) -> ExperimentConfig:
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    return load_experiment(tmp_path / "experiment.toml")


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Store:
    s = open_store(db_url, home=tmp_path / "home")
    yield s  # type: ignore[misc]
    s.close()


def test_enqueue_makes_a_queued_experiment_with_its_arms_and_trials(
    store: Store, config: ExperimentConfig
) -> None:
    experiment_id = enqueue(store, config, clock=FakeClock())
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None and row.phase == "queued"
        arms = session.scalars(select(Arm.name).order_by(Arm.position)).all()
        trials = session.scalars(select(Trial.state).where(Trial.experiment_id == row.id)).all()
    assert arms == ["A", "B"]
    assert trials == ["pending"] * config.design.planned_trials
    assert Path(row.artifacts_dir).is_dir()


def test_only_one_processor_holds_an_experiment(store: Store, config: ExperimentConfig) -> None:
    clock = FakeClock()
    experiment_id = enqueue(store, config, clock=clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == experiment_id
    assert claim(store, "p2", lease_s=30, clock=clock) is None
    assert claim(store, "p2", lease_s=30, clock=clock, experiment_id=experiment_id) is None


def test_an_expired_lease_is_taken_over_and_the_old_owner_cannot_write(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    experiment_id = enqueue(store, config, clock=clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == experiment_id
    clock.now += 10
    assert renew(store, "p1", experiment_id, lease_s=30, clock=clock)  # still p1's
    clock.now += 31
    assert claim(store, "p2", lease_s=30, clock=clock) == experiment_id
    assert not renew(store, "p1", experiment_id, lease_s=30, clock=clock)
    with pytest.raises(LeaseLost, match="lease lost"), store.transaction() as session:
        transition(session, "p1", experiment_id, clock=clock, phase="failed")
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None and row.phase == "queued" and row.lease_owner == "p2"
        assert row.claims == 2


def test_ending_an_experiment_gives_its_hosts_back_only_if_the_lease_is_still_held(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    first, second = enqueue(store, config, clock=clock), enqueue(store, config, clock=clock)
    with store.transaction() as session:
        for n, experiment_id in enumerate((first, first, second)):
            session.add(Host(name=f"h{n}", backend="ray", machine=f"h{n}", cpus="0", facts="{}",
                             experiment_id=experiment_id, team="t",
                             lease_expires_at=clock.now + 60))  # fmt: skip
    assert claim(store, "p1", lease_s=300, clock=clock, experiment_id=first) == first
    assert claim(store, "p1", lease_s=30, clock=clock, experiment_id=second) == second
    clock.now += 31  # p1 still holds the first experiment, and lost the second to p2
    assert claim(store, "p2", lease_s=30, clock=clock, experiment_id=second) == second

    with store.transaction() as session:
        transition(session, "p1", first, clock=clock, phase="done", give_hosts_back=True)
    # The move and the release roll back together (on PostgreSQL they are one statement).
    with pytest.raises(LeaseLost), store.transaction() as session:
        transition(session, "p1", second, clock=clock, phase="done", give_hosts_back=True)

    with store.transaction() as session:
        held = dict(session.execute(select(Host.name, Host.experiment_id)).all())
        phases = dict(session.execute(select(Experiment.id, Experiment.phase)).all())
    assert held == {"h0": None, "h1": None, "h2": second}
    assert phases == {first: "done", second: "queued"}


def test_released_experiments_can_be_claimed_at_once(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    experiment_id = enqueue(store, config, clock=clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == experiment_id
    release(store, "p1", experiment_id)
    assert claim(store, "p2", lease_s=30, clock=clock) == experiment_id


def test_finished_experiments_are_never_claimed(store: Store, config: ExperimentConfig) -> None:
    clock = FakeClock()
    experiment_id = enqueue(store, config, clock=clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == experiment_id
    with store.transaction() as session:
        transition(session, "p1", experiment_id, clock=clock, phase="done")
    release(store, "p1", experiment_id)
    assert claim(store, "p2", lease_s=30, clock=clock) is None


def test_the_oldest_waiting_experiment_goes_first(store: Store, config: ExperimentConfig) -> None:
    clock = FakeClock()
    first = enqueue(store, config, clock=clock)
    clock.now += 1
    second = enqueue(store, config, clock=clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == first
    assert claim(store, "p2", lease_s=30, clock=clock) == second


def test_a_higher_priority_goes_before_an_older_experiment(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    old = enqueue(store, config, clock=clock)
    clock.now += 1
    urgent = enqueue(store, config.model_copy(update={"priority": 5}), clock=clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == urgent
    assert claim(store, "p2", lease_s=30, clock=clock) == old


def _hold(store: Store, team: str, hosts: int, clock: FakeClock) -> None:
    """``team`` holds ``hosts`` test machines for an experiment of its own."""
    with store.transaction() as session:
        service = session.scalars(select(Service)).first()
        assert service is not None
        holder = Experiment(
            service_id=service.id, kind="ab", team=team, phase="running", spec="{}",
            source_file="", artifacts_dir="", progress="", created_at=0.0, updated_at=0.0,
            claims=1, cancel_requested=False, lease_owner="other",
            lease_expires_at=clock.now + 300,
        )  # fmt: skip
        session.add(holder)
        session.flush()
        for i in range(hosts):
            session.add(
                Host(name=f"{team}-node{i}", backend="ray", machine=f"{team}-node{i}", cpus="0",
                     facts="{}", enabled=True, experiment_id=holder.id, team=team,
                     allocated_at=clock.now, lease_expires_at=clock.now + 300)
            )  # fmt: skip


def test_the_team_furthest_below_its_quota_share_goes_first_then_age(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    busy = enqueue(store, config.model_copy(update={"team": "busy"}), clock=clock)
    clock.now += 1
    idle = enqueue(store, config.model_copy(update={"team": "idle"}), clock=clock)
    clock.now += 1
    busy_too = enqueue(store, config.model_copy(update={"team": "busy"}), clock=clock)
    set_quota(store, "busy", 10)
    set_quota(store, "idle", 10)
    _hold(store, "busy", 6, clock)
    _hold(store, "idle", 2, clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == idle
    assert claim(store, "p1", lease_s=30, clock=clock) == busy
    assert claim(store, "p1", lease_s=30, clock=clock) == busy_too


def test_a_team_another_processor_is_allocating_for_waits_for_that_allocation(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    first = enqueue(store, config.model_copy(update={"team": "ads"}), clock=clock)
    second = enqueue(store, config.model_copy(update={"team": "ads"}), clock=clock)
    clock.now += 1
    search = enqueue(store, config.model_copy(update={"team": "search"}), clock=clock)
    set_quota(store, "ads", 100)
    set_quota(store, "search", 10)
    _hold(store, "search", 5, clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == first
    with store.transaction() as session:
        transition(session, "p1", first, clock=clock, phase="allocating")
    # "ads" still holds the least of its quota, but p1 is giving it hosts right now: a
    # second allocation of "ads" would wait for p1's quota lock, so "ads" is passed over...
    assert claim(store, "p2", lease_s=30, clock=clock) == search
    assert claim(store, "p2", lease_s=30, clock=clock) is None
    # ...until p1's allocation ends.
    with store.transaction() as session:
        transition(session, "p1", first, clock=clock, phase="running")
    assert claim(store, "p2", lease_s=30, clock=clock) == second


def test_a_processor_passes_over_experiments_it_saw_waiting(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    first = enqueue(store, config, clock=clock)
    second = enqueue(store, config, clock=clock)
    assert claim(store, "p1", lease_s=30, clock=clock, skip={first}) == second
    assert claim(store, "p1", lease_s=30, clock=clock, skip={first, second}) is None


def test_eight_concurrent_processors_claim_each_experiment_once(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    ids = [
        enqueue(store, config.model_copy(update={"team": f"t{i % 3}"}), clock=clock)
        for i in range(24)
    ]
    barrier = threading.Barrier(8)
    claimed: list[int] = []
    lock = threading.Lock()

    def processor(n: int) -> None:
        barrier.wait()
        misses = 0
        while misses < 3:  # on SQLite a lost compare-and-set is a miss, not the end
            got = claim(store, f"p{n}", lease_s=300, clock=clock)
            if got is None:
                misses += 1
                continue
            with lock:
                claimed.append(got)

    threads = [threading.Thread(target=processor, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(ids)


def test_a_queued_experiment_is_cancelled_at_once_and_never_claimed(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    experiment_id = enqueue(store, config, clock=clock)
    assert request_cancel(store, experiment_id, clock=clock) == "cancelled"
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None and row.phase == "cancelled" and row.finished_at == clock.now
    assert claim(store, "p1", lease_s=30, clock=clock) is None


def test_a_held_experiment_is_asked_to_stop_and_its_keeper_raises_at_the_next_check(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    experiment_id = enqueue(store, config, clock=clock)
    assert claim(store, "p1", lease_s=30, clock=clock) == experiment_id
    assert request_cancel(store, experiment_id, clock=clock) == "requested"
    with (
        LeaseKeeper(store, "p1", experiment_id, lease_s=30, clock=clock) as keeper,
        pytest.raises(Cancelled),
    ):
        keeper.check()


def test_an_ended_or_unknown_experiment_cannot_be_cancelled(
    store: Store, config: ExperimentConfig
) -> None:
    clock = FakeClock()
    experiment_id = enqueue(store, config, clock=clock)
    request_cancel(store, experiment_id, clock=clock)
    with pytest.raises(HairlineError, match="already ended \\(cancelled\\)"):
        request_cancel(store, experiment_id, clock=clock)
    with pytest.raises(HairlineError, match="no experiment 99"):
        request_cancel(store, 99, clock=clock)
