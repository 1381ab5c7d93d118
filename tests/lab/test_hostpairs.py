"""Host pairs side by side: an experiment takes as many pairs as the file, the inventory and
the team's quota allow; its trials go to the pairs one at a time each; the analysis and the
report name the pairs, their trials, and each verdict with the host pair as the cluster."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import select

from hairline.config import load_experiment
from hairline.errors import ConfigError, HostsUnavailable
from hairline.hosts.inventory import Allocation, Waiting, ensure_local_hosts, release_hosts
from hairline.hosts.quotas import set_quota
from hairline.hosts.similar import Requirements
from hairline.lab.analysis import AnalysisOptions, analyze, host_pair_trials
from hairline.lab.hostpairs import TrialQueue, allocate_pairs, run_lanes, split_pairs
from hairline.report.context import HostReport, host_pair_notes, host_pairs
from hairline.stats.pairtime import trials_on_pairs
from hairline.store.db import Store, open_store
from hairline.store.models import Experiment, Host, Service
from hairline.store.observations import observations_from_table

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Store:
    s = open_store(db_url, home=tmp_path / "home")
    ensure_local_hosts(s, cpus_per_host=1)
    yield s  # type: ignore[misc]
    s.close()


class FakeClock:
    now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _machines(store: Store, count: int) -> None:
    """``count`` alike test machines, as ``hairline agent start`` registers them."""
    facts = {"region": "eu", "server_type": "web", "cpu_arch": "x86_64", "kernel": "6.1",
             "cpu_model": "Xeon 8375C", "turbo": "off"}  # fmt: skip
    with store.transaction() as session:
        session.add_all(
            Host(name=f"node{n}", backend="ray", machine=f"node{n}", cpus="0,1", facts="{}",
                 enabled=True, healthy=True, address=f"10.0.0.{n}", **facts)
            for n in range(count)
        )  # fmt: skip


def _experiments(store: Store, n: int) -> list[int]:
    with store.transaction() as session:
        service = Service(name="svc", created_at=0.0)
        session.add(service)
        session.flush()
        rows = [
            Experiment(service_id=service.id, kind="ab", team="t", phase="allocating",
                       spec="{}", source_file="", artifacts_dir="", progress="",
                       created_at=0.0, updated_at=0.0, claims=0, cancel_requested=False)
            for _ in range(n)
        ]  # fmt: skip
        session.add_all(rows)
        session.flush()
        return [r.id for r in rows]


def _pairs(store: Store, eid: int, most: int, clock: FakeClock) -> Allocation | Waiting:
    return allocate_pairs(
        store, eid, "t", 2, most, lease_s=30, clock=clock, backend="ray",
        requirements=Requirements(),
    )  # fmt: skip


def _held(store: Store, eid: int) -> int:
    with store.transaction() as session:
        return len(session.scalars(select(Host.id).where(Host.experiment_id == eid)).all())


def test_an_experiment_takes_the_pairs_it_asks_for_or_fewer_never_more_than_free(
    store: Store,
) -> None:
    _machines(store, 7)
    clock = FakeClock()
    first, second, third = _experiments(store, 3)
    got = _pairs(store, first, 2, clock)
    assert isinstance(got, Allocation) and len(got.host_ids) == 4
    lanes = split_pairs(got, 2)
    assert [(x.pair, x.offset, len(x.allocation.names)) for x in lanes] == [(0, 0, 2), (1, 2, 2)]
    assert lanes[0].allocation.names + lanes[1].allocation.names == got.names
    # Three hosts are left: four pairs asked for, one pair given.
    one = _pairs(store, second, 4, clock)
    assert isinstance(one, Allocation) and len(one.host_ids) == 2
    # One host is left: no pair at all, so the third waits and holds nothing.
    waiting = _pairs(store, third, 2, clock)
    assert isinstance(waiting, Waiting) and _held(store, third) == 0
    # Asked again for more than there is, the first keeps what it holds.
    assert _pairs(store, first, 8, clock) == got
    # A team quota of 2 hosts: one pair, however many are asked for and free.
    release_hosts(store, second)
    set_quota(store, "q", 2)
    fewer = allocate_pairs(store, third, "q", 2, 3, lease_s=30, clock=clock, backend="ray",
                           requirements=Requirements())  # fmt: skip
    assert isinstance(fewer, Allocation) and len(fewer.host_ids) == 2


def test_one_pair_that_can_never_fit_still_says_why(store: Store) -> None:
    _machines(store, 1)
    (eid,) = _experiments(store, 1)
    with pytest.raises(HostsUnavailable, match="the ray backend has 1 hosts"):
        _pairs(store, eid, 3, FakeClock())


def test_hosts_that_do_not_make_whole_pairs_are_an_error() -> None:
    three = Allocation((1, 2, 3), ("a", "b", "c"), ((0,), (1,), (2,)), ({}, {}, {}),
                       (None, None, None), ("r", "r", "r"))  # fmt: skip
    with pytest.raises(ValueError, match="3 hosts do not make pairs of 2"):
        split_pairs(three, 2)
    assert [x.allocation.names for x in split_pairs(three, 3)] == [("a", "b", "c")]


def test_the_pairs_run_trials_side_by_side_each_trial_once_lowest_first() -> None:
    """False failure: none: the barrier waits up to 10 s for both pairs, which start at
    once; nothing else is timed."""
    three = Allocation((1, 2, 3, 4), ("a", "b", "c", "d"), ((0,), (1,), (0,), (1,)),
                       ({},) * 4, (None,) * 4, ("r",) * 4)  # fmt: skip
    lanes = split_pairs(three, 2)
    queue = TrialQueue([5, 0, 3, 1, 2, 4])
    both_running = threading.Barrier(2, timeout=10)
    ran: list[tuple[int, int]] = []
    lock = threading.Lock()

    def work(lane: object, index: int) -> bool:
        if index in (0, 1):
            both_running.wait()  # trials 0 and 1 are on the two pairs at the same time
        with lock:
            ran.append((lane.pair, index))  # type: ignore[attr-defined]
        return True

    run_lanes(lanes, queue, work, abort=threading.Event())
    assert sorted(i for _, i in ran) == [0, 1, 2, 3, 4, 5]
    assert {p for p, i in ran if i in (0, 1)} == {0, 1}
    assert sorted(queue.taken) == [0, 1] and sum(map(len, queue.taken.values())) == 6


def test_a_settled_look_stops_new_trials_and_a_failing_pair_stops_the_others() -> None:
    """False failure: none: order is forced by events, each waited on for at most 10 s."""
    allocation = Allocation((1, 2, 3, 4), ("a", "b", "c", "d"), ((0,), (1,), (0,), (1,)),
                            ({},) * 4, (None,) * 4, ("r",) * 4)  # fmt: skip
    lanes = split_pairs(allocation, 2)
    settled = TrialQueue(range(8))
    run_lanes(lanes, settled, lambda lane, index: index < 2, abort=threading.Event())
    assert settled.closed and sum(map(len, settled.taken.values())) < 8

    failing = TrialQueue(range(8))
    failed = threading.Event()

    def work(lane: object, index: int) -> bool:
        if lane.pair == 1:  # type: ignore[attr-defined]
            failed.set()
            raise HostsUnavailable("host c lost")
        assert failed.wait(10)
        time.sleep(0.05)  # the other pair finishes the trial it had
        return True

    with pytest.raises(HostsUnavailable, match="host c lost"):
        run_lanes(lanes, failing, work, abort=threading.Event())
    assert len(failing.taken[0]) == 1 and len(failing.taken[1]) == 1


def _two_pair_table(seed: int, pair_shift: float) -> pa.Table:
    """Six trials of A and B, two batches each with the arms swapped, trials 0-2 on pair 0
    (hosts 0, 1) and 3-5 on pair 1 (hosts 2, 3); B 2% above A, and ``pair_shift`` more
    on pair 1 (a pair on which the change costs more)."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[object]] = {k: [] for k in ("trial", "batch", "arm", "host", "metric",
                                                     "value")}  # fmt: skip
    for trial in range(6):
        pair = trial // 3
        for batch in range(2):
            for arm in "AB":
                host = pair * 2 + ((arm == "B") ^ batch)
                base = 1000.0 * (1.0 + 0.02 * (arm == "B") + pair_shift * (arm == "B") * pair)
                rows["trial"].append(trial)
                rows["batch"].append(batch)
                rows["arm"].append(arm)
                rows["host"].append(host)
                rows["metric"].append("cpu_ns_per_request")
                rows["value"].append(base * (1 + rng.normal(0, 0.005)))
    return pa.table(rows)


def test_the_analysis_counts_each_pairs_trials_and_clusters_by_host_pair() -> None:
    observations = observations_from_table(_two_pair_table(1, 0.0), source="two pairs")
    assert host_pair_trials(observations) == (3, 3)
    result = analyze(observations, AnalysisOptions(seed=3))
    assert result.host_pair_trials == (3, 3)
    (cpu,) = result.results
    clustered = cpu.by_host_pair
    assert clustered is not None and clustered.details["n_clusters"] == 2
    # The same change, read with two clusters: a t on 1 degree of freedom, far wider.
    lo, hi = clustered.ci_rel
    assert lo < 0.02 < hi and hi - lo > cpu.comparison.ci_rel[1] - cpu.comparison.ci_rel[0]
    # Its estimate is the ratio of the means (the verdict's, a trimmed mean of trials'):
    # the same change within a tenth of a point.
    assert abs(clustered.effect_rel - cpu.comparison.effect_rel) < 0.001

    # The report names the pairs, their hosts and trials, and the clustered interval.
    hosts = [HostReport(host=i, cpus=(i % 2,), facts={}, name=f"w{i + 2}") for i in range(4)]
    pairs = host_pairs(result, hosts, arms=2)
    assert [(p.pair, p.hosts, p.trials) for p in pairs] == [(0, ("w2", "w3"), 3),
                                                            (1, ("w4", "w5"), 3)]  # fmt: skip
    notes = host_pair_notes(result, pairs)
    assert notes[0] == ("trials ran side by side on 2 host pairs: pair 1 (w2 + w3): 3 trials; "
                        "pair 2 (w4 + w5): 3 trials")  # fmt: skip
    assert "with the host pair as the cluster (2 pairs" in notes[1]
    assert "cpu_ns_per_request +" in notes[1]


def test_one_pairs_analysis_is_what_it_always_was() -> None:
    table = _two_pair_table(2, 0.0)
    one_pair = table.set_column(3, "host", pa.array([h % 2 for h in table["host"].to_pylist()]))
    observations = observations_from_table(one_pair, source="one pair")
    result = analyze(observations, AnalysisOptions(seed=3))
    assert result.host_pair_trials == () and result.results[0].by_host_pair is None
    assert host_pair_notes(result, host_pairs(result, [], arms=2)) == ()


def test_trials_on_pairs_take_ceil_of_trials_over_pairs_rounds() -> None:
    on = trials_on_pairs(7, (1, 2, 4), trial_s=30.0)
    assert [(p.host_pairs, p.rounds, p.minutes) for p in on] == [(1, 7, 3.5), (2, 4, 2.0),
                                                                 (4, 2, 1.0)]  # fmt: skip
    assert trials_on_pairs(3, (8,))[0].rounds == 1 and trials_on_pairs(3, (8,))[0].minutes is None
    with pytest.raises(ValueError, match="must be >= 1"):
        trials_on_pairs(3, (0,))


def test_host_pairs_in_the_file_auto_is_capped_by_the_trials_and_pins_refuse_it(
    tmp_path: Path,
) -> None:
    text = (EXAMPLE / "experiment.toml").read_text()
    path = tmp_path / "experiment.toml"
    for name in ("service.toml", "trace.jsonl"):
        (tmp_path / name).symlink_to(EXAMPLE / name)
    path.write_text(text.replace("[design]", '[design]\nhost_pairs = "auto"'))
    config = load_experiment(path)
    assert config.design.host_pairs == "auto"
    assert config.design.most_host_pairs == config.design.planned_trials
    path.write_text(text.replace("[design]", "[design]\nhost_pairs = 0"))
    with pytest.raises(ConfigError, match="host_pairs is a whole number from 1 to 64"):
        load_experiment(path)
