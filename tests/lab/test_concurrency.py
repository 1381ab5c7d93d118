"""The concurrency guard: other experiments on our hosts or downstreams, and deployments or
maintenance, while our trials ran (ServiceLab section 6.2.4)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hairline.lab.concurrency import Activity, find_overlaps, overlaps, spec_downstreams
from hairline.lab.events import RecordedEvent, add_event
from hairline.store.db import Store
from hairline.store.models import Experiment, Host, Run, Service

DB = "127.0.0.1:5432"


def run(experiment: int, trial: int, host: str, start_s: float, stop_s: float,
        *, service: str = "search", machine: str = "") -> Activity:  # fmt: skip
    return Activity(experiment_id=experiment, service=service, trial=trial, host=host,
                    machine=machine or f"m-{host}", start_s=start_s, stop_s=stop_s)  # fmt: skip


def event(kind: str, service: str, start_s: float, end_s: float | None = None, *,
          host: str | None = None, note: str = "") -> RecordedEvent:  # fmt: skip
    return RecordedEvent(id=1, kind=kind, service=service, host=host, started_at=start_s,
                         ended_at=end_s, note=note, created_by="t")  # fmt: skip


# Experiment 1 (ours): trial 1 on w1 and w2 from 100 to 200 s, trial 2 from 200 to 300 s.
OURS = [run(1, t, h, 100.0 + 100 * t, 200.0 + 100 * t) for t in (0, 1) for h in ("w1", "w2")]


def test_another_experiment_on_one_of_our_hosts_at_the_same_time_overlaps() -> None:
    other = run(12, 0, "w2", 150.0, 250.0, service="feed")
    (found,) = find_overlaps(OURS, [other], [], downstreams={})
    assert (found.kind, found.what, found.reason) == ("experiment", "experiment 12 (feed)",
                                                      "same host w2")  # fmt: skip
    assert found.trials == (1, 2)
    assert found.started_at == datetime.fromtimestamp(150.0, tz=UTC)
    assert found.ended_at == datetime.fromtimestamp(250.0, tz=UTC)


def test_touching_ends_do_not_overlap() -> None:
    before = run(12, 0, "w1", 50.0, 100.0)
    after = run(13, 0, "w1", 300.0, 400.0)
    assert find_overlaps(OURS, [before, after], [], downstreams={}) == []


def test_the_same_host_at_another_time_and_the_same_time_on_another_host_do_not_overlap() -> None:
    later = run(12, 0, "w1", 301.0, 400.0)
    elsewhere = run(13, 0, "w9", 120.0, 180.0)
    assert find_overlaps(OURS, [later, elsewhere], [], downstreams={}) == []


def test_another_cpu_set_of_the_same_machine_overlaps_as_the_same_machine() -> None:
    ours = [run(1, 0, "box/cpu2-3", 0.0, 10.0, machine="box")]
    (found,) = find_overlaps(ours, [run(5, 0, "box/cpu4-5", 5.0, 6.0, machine="box")], [],
                             downstreams={})  # fmt: skip
    assert found.reason == "same machine box"


def test_a_shared_downstream_overlaps_on_any_host_but_only_at_the_same_time() -> None:
    sharing = run(12, 0, "w9", 250.0, 260.0, service="feed")
    apart = run(13, 0, "w9", 500.0, 600.0, service="feed")
    downstreams = {1: frozenset({DB}), 12: frozenset({DB}), 13: frozenset({DB})}
    (found,) = find_overlaps(OURS, [sharing, apart], [], downstreams=downstreams)
    assert found.reason == f"same downstream {DB}" and found.trials == (2,)
    # Without a downstream in common, the same run is nothing to us.
    assert find_overlaps(OURS, [sharing], [], downstreams={12: frozenset({DB})}) == []


def test_our_own_arms_never_count() -> None:
    assert find_overlaps(OURS, OURS, [], downstreams={1: frozenset({DB})}) == []


def test_a_point_event_counts_inside_a_run_and_at_its_start_not_at_its_end() -> None:
    at_start = event("deploy", "search", 100.0)
    at_end = event("deploy", "search", 300.0)
    (found,) = find_overlaps(OURS, [], [at_start, at_end], downstreams={})
    assert (found.kind, found.what, found.reason) == ("deploy", "search", "same service search")
    assert found.ended_at is None and found.trials == (1,)


def test_an_event_on_our_host_or_downstream_counts_and_one_elsewhere_does_not() -> None:
    on_host = event("maintenance", "kernel-update", 150.0, 160.0, host="w2", note="reboot")
    on_downstream = event("deploy", DB, 290.0, 310.0)
    elsewhere = event("deploy", "feed", 150.0, 250.0, host="w9")
    found = find_overlaps(OURS, [], [on_host, on_downstream, elsewhere],
                          downstreams={1: frozenset({DB})})  # fmt: skip
    assert [(o.kind, o.reason, o.trials, o.note) for o in found] == [
        ("maintenance", "same host w2", (1,), "reboot"),
        ("deploy", f"same downstream {DB}", (2,), ""),
    ]


def test_an_open_ended_run_of_ours_meets_what_comes_after_its_start() -> None:
    running = [run(1, 0, "w1", 100.0, float("inf"))]
    (found,) = find_overlaps(running, [run(2, 0, "w1", 10_000.0, 10_001.0)], [], downstreams={})
    assert found.reason == "same host w1"


def test_downstreams_come_from_the_stored_isolation_and_odd_specs_have_none() -> None:
    spec = {"service": {"isolation": {"allow": [DB], "local_ports": [],
                                      "http": [{"address": "127.0.0.1:9000"}]}}}  # fmt: skip
    assert spec_downstreams(json.dumps(spec)) == {DB, "127.0.0.1:9000"}
    assert spec_downstreams(json.dumps({"service": {"isolation": None}})) == frozenset()
    assert spec_downstreams('{"service": {"isolation": {"allow": ["nowhere"]}}}') == frozenset()
    assert spec_downstreams("not json") == frozenset()


def _experiment(store: Store, service: str, isolation: dict[str, object] | None) -> int:
    with store.transaction() as session:
        svc = Service(name=service, created_at=0.0)
        session.add(svc)
        session.flush()
        row = Experiment(
            service_id=svc.id, kind="ab", team="t", phase="done", created_at=0.0,
            updated_at=0.0, spec=json.dumps({"service": {"isolation": isolation}}),
            source_file="x.toml", artifacts_dir="/nowhere", progress="", claims=0,
            cancel_requested=False,
        )  # fmt: skip
        session.add(row)
        session.flush()
        return row.id


def _hosts(store: Store, *names: str) -> dict[str, int]:
    with store.transaction() as session:
        rows = [Host(name=n, backend="ray", machine=n, cpus="0-3", facts="{}") for n in names]
        session.add_all(rows)
        session.flush()
        return {r.name: r.id for r in rows}


def _run(store: Store, experiment: int, trial: int, host_id: int, start_s: float,
         stop_s: float | None) -> None:  # fmt: skip
    with store.transaction() as session:
        session.add(Run(experiment_id=experiment, trial=trial, batch=0, arm="A",
                        host_id=host_id, host_index=0, processor="p", facts="{}",
                        started_at=start_s, stopped_at=stop_s))  # fmt: skip


def test_the_store_finds_experiments_and_events_that_overlapped(store: Store) -> None:
    hosts = _hosts(store, "w1", "w2", "w9")
    ours = _experiment(store, "search", {"allow": [DB], "local_ports": [], "http": []})
    same_host = _experiment(store, "feed", None)
    same_db = _experiment(store, "ads", {"allow": [DB], "local_ports": [], "http": []})
    unrelated = _experiment(store, "other", None)
    for trial in (0, 1, 2):
        _run(store, ours, trial, hosts["w1"], 100.0 * (trial + 1), 100.0 * (trial + 2))
    _run(store, same_host, 0, hosts["w1"], 250.0, 350.0)
    _run(store, same_db, 0, hosts["w9"], 120.0, 130.0)
    _run(store, unrelated, 0, hosts["w9"], 100.0, 400.0)  # another host, no downstream
    _run(store, unrelated, 1, hosts["w1"], 400.0, None)  # on w1, but after ours: still running
    add_event(store, "deploy", service=DB, started_at=310.0, note="schema change")
    add_event(store, "maintenance", service="rack-4", host="w1", started_at=0.0, ended_at=100.0)
    found = overlaps(store, ours, clock=lambda: 1000.0)
    assert [(o.what, o.reason, o.trials) for o in found] == [
        (f"experiment {same_db} (ads)", f"same downstream {DB}", (1,)),
        (f"experiment {same_host} (feed)", "same host w1", (2, 3)),
        (DB, f"same downstream {DB}", (3,)),
    ]
    assert found[-1].note == "schema change"
    # The other side sees us too, with nothing recorded for it.
    (seen,) = overlaps(store, same_host, clock=lambda: 1000.0)
    assert (seen.what, seen.reason) == (f"experiment {ours} (search)", "same host w1")


def test_an_experiment_that_never_ran_has_no_overlaps(store: Store) -> None:
    assert overlaps(store, _experiment(store, "search", None)) == []
