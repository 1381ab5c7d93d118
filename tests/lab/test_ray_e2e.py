"""The ray backend end to end: PostgreSQL, a Ray head and worker nodes on this machine
(127.0.0.1, .2, .3; a third host of the class on .4 and a host of another class on .5,
started by the tests that need them), `hairline run --backend ray` on the sample service.

Each test runs the real commands and then checks what a user would: the verdict, the
database (each trial done exactly once), and that nothing is left behind (no arm process
on any node, no host held). The cluster is one per session (tests/conftest.py's
``ray_cluster``); a test that kills a node starts it again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import pytest
from experiment_files import write_experiment
from sqlalchemy import select

from hairline.store.db import Store, open_store
from hairline.store.models import Experiment, Host, Run, Trial, VerdictRow
from hairline.store.observations import read_observations
from schema_check import check_schema
from suitekit import RAY_WORKERS, RayCluster, live_processes_with

pytestmark = pytest.mark.slow

HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]


@pytest.fixture
def store(ray_cluster: RayCluster) -> Iterator[Store]:
    s = open_store(ray_cluster.db_url)
    yield s
    s.close()


def ray_args(cluster: RayCluster) -> list[str]:
    return ["--backend", "ray", "--ray-address", cluster.address]


def popen(cluster: RayCluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*HAIRLINE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=cluster.env,
    )  # fmt: skip


def experiment_id(queued: subprocess.CompletedProcess[str]) -> int:
    assert queued.returncode == 0, queued.stdout + queued.stderr
    return int(queued.stdout.split("experiment ")[1].split()[0])


def wait_for_arms_in_a_later_trial(
    store: Store, eid: int, proc: subprocess.Popen[str], marker: str
) -> tuple[int, list[Run]]:
    """Block until the experiment runs its second (or a later) trial with both arms up;
    that trial's index and its live runs."""
    deadline = time.monotonic() + 120
    while True:
        with store.transaction() as session:
            running = session.scalar(
                select(Trial).where(Trial.experiment_id == eid, Trial.state == "running")
            )
            runs = session.scalars(
                select(Run).where(Run.experiment_id == eid, Run.stopped_at.is_(None))
            ).all()
        later = running is not None and running.index >= 1 and len(runs) == 2
        if later and len(live_processes_with(marker)) == 2:
            assert running is not None
            return running.index, list(runs)
        assert proc.poll() is None, f"the processor ended early:\n{proc.communicate()[0]}"
        assert time.monotonic() < deadline, "the experiment never reached its second trial"
        time.sleep(0.05)


def assert_no_arm_left(marker: str, within_s: float = 10.0) -> float:
    """No arm process on any node (the nodes are this machine); how long it took."""
    started = time.monotonic()
    while live_processes_with(marker) and time.monotonic() - started < within_s:
        time.sleep(0.1)
    assert live_processes_with(marker) == [], f"arms left running: {marker}"
    return time.monotonic() - started


def assert_each_trial_done_once(
    store: Store,
    eid: int,
    *,
    trials: int,
    interrupted: int | None = None,
    arms: tuple[str, ...] = ("A", "B"),
    batches: int = 2,
) -> None:
    """The experiment is done, each trial done once (``interrupted`` twice), no host held,
    and its observations hold each trial's batches of every arm exactly once."""
    with store.transaction() as session:
        row = session.get(Experiment, eid)
        assert row is not None and row.phase == "done", row and (row.phase, row.failure)
        states = session.scalars(
            select(Trial).where(Trial.experiment_id == eid).order_by(Trial.index)
        ).all()
        held = session.scalars(select(Host.name).where(Host.experiment_id == eid)).all()
        artifacts = Path(row.artifacts_dir)
    assert [t.state for t in states] == ["done"] * trials
    assert [t.attempts for t in states] == [2 if t.index == interrupted else 1 for t in states]
    assert held == []
    table = read_observations(artifacts / "observations.parquet").table
    cpu = table.filter(pc.equal(table["metric"], "cpu_ns_per_request"))
    keys = list(zip(cpu["trial"].to_pylist(), cpu["batch"].to_pylist(), cpu["arm"].to_pylist(),
                    strict=True))  # fmt: skip
    assert sorted(keys) == sorted(
        (t, b, a) for t in range(trials) for b in range(batches) for a in arms
    )
    assert sorted(p.name for p in artifacts.glob("trial-*.parquet")) == [
        f"trial-{i}.parquet" for i in range(trials)
    ]


def node_process(name: str, needle: str) -> int:
    """The pid of a Ray daemon (``name``: raylet, gcs_server) whose command line holds
    ``needle``."""
    for pid in live_processes_with(needle):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if cmdline and Path(cmdline[0].decode()).name == name:
            return pid
    raise AssertionError(f"no {name} with {needle!r}")


def test_the_nodes_run_pinned_away_from_their_hosts_and_registered_their_facts(
    ray_cluster: RayCluster, store: Store
) -> None:
    """False failure: none: it reads the session cluster's state; nothing is timed."""
    for name in ("w2", "w3"):
        node = RAY_WORKERS[name]
        raylet = node_process("raylet", f"--node_ip_address={node.ip}")
        status = Path(f"/proc/{raylet}/status").read_text()
        assert f"Cpus_allowed_list:\t{node.housekeeping}\n" in status, (name, status)
        with store.transaction() as session:
            host = session.scalars(select(Host).where(Host.name == name)).one()
        assert (host.backend, host.address, host.cpus, host.region) == (
            "ray", node.ip, node.cpus, "lab"
        )  # fmt: skip
        assert host.server_type == "test-vm" and host.healthy and host.enabled
        assert host.kernel == os.uname().release and host.cpu_arch == os.uname().machine
    # The token is in a file, never on a command line.
    token = (ray_cluster.root / "token").read_text()
    assert live_processes_with(token) == []


def runs_on_hosts(store: Store, eid: int) -> list[tuple[int, int, str, str, dict[str, str]]]:
    """Each stored run of the experiment: (trial, batch, arm, host name, the host's facts
    as recorded with the run)."""
    with store.transaction() as session:
        rows = session.execute(
            select(Run.trial, Run.batch, Run.arm, Host.name, Run.facts)
            .join(Host, Run.host_id == Host.id).where(Run.experiment_id == eid)
        ).all()  # fmt: skip
    return [(t, b, arm, name, json.loads(facts)) for t, b, arm, name, facts in rows]


def test_hardware_mode_runs_each_arm_on_a_host_of_its_class_and_compares_the_hardware(
    ray_cluster: RayCluster, store: Store, tmp_path: Path
) -> None:
    """False failure: about 1e-3 (not measured): either verdict passes, but the list of runs must be
    exactly one per trial and arm: a batch spoiled by a load gate (or by steal that hit
    one arm more) is run again and changes that count; how often batches are spoiled here
    is not recorded."""
    # w5 is the one node of server type test-vm-b; w2, w3 and w4 are test-vm. They are
    # one machine, so that is the only fact in which they differ. w4 (the later tests'
    # third host of the class) starts beside w5: two nodes side by side take about the
    # time of one.
    ray_cluster.ensure_workers("w5", "w4")
    exp = write_experiment(
        tmp_path / "hw",
        tag="ray-hw",
        arms={"A": {"hosts": {"server_type": "test-vm"}},
              "B": {"hosts": {"server_type": "test-vm-b"}}},
        design={"mode": "hardware", "trials": 2},
    )  # fmt: skip
    done = ray_cluster.hairline(
        "run", str(exp.path), *ray_args(ray_cluster), "--db", ray_cluster.db_url,
        "--json", str(tmp_path / "hw.json"), "--markdown", str(tmp_path / "hw.md"),
        "--home", str(tmp_path / "home"), timeout_s=300,
    )  # fmt: skip
    # One build on both: whatever the verdict, the hardware is what it compares.
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads((tmp_path / "hw.json").read_text())
    check_schema("experiment-report", report)
    eid = report["experiment_id"]
    assert report["phase"] == "done" and report["trials_done"] == 2
    assert report["mode"] == "hardware"

    # Each arm stayed on one host of its class in every batch (one batch per trial).
    runs = runs_on_hosts(store, eid)
    assert sorted((t, b, arm) for t, b, arm, _, _ in runs) == [
        (t, 0, arm) for t in range(2) for arm in "AB"
    ]
    host_of = {arm: {name for _, _, a, name, _ in runs if a == arm} for arm in "AB"}
    assert host_of["B"] == {"w5"} and len(host_of["A"]) == 1
    [a_host] = host_of["A"]
    assert RAY_WORKERS[a_host].server_type == "test-vm"
    assert {arm: facts["server_type"] for _, _, arm, _, facts in runs} == {
        "A": "test-vm", "B": "test-vm-b"
    }  # fmt: skip

    # The report lists both hosts with their facts, says the arms are host classes, and
    # finds no other difference between the hosts.
    hosts = {h["name"]: h for h in report["hosts"]}
    assert set(hosts) == {a_host, "w5"}
    assert hosts["w5"]["address"] == "127.0.0.5"
    assert hosts[a_host]["address"] == RAY_WORKERS[a_host].ip
    differ = {
        k for k in hosts["w5"]["facts"] if hosts["w5"]["facts"][k] != hosts[a_host]["facts"].get(k)
    }
    assert differ == {"server_type"}
    [note] = [n for n in report["notes"] if n.startswith("hardware mode")]
    assert "(A: server type test-vm; B: server type test-vm-b)" in note
    assert not [n for n in report["notes"] if n.startswith("WARNING")], report["notes"]
    markdown = (tmp_path / "hw.md").read_text()
    assert "w5 at 127.0.0.5, CPUs 1" in markdown and "test-vm-b" in markdown

    # The verdict is B's hardware against A's, for every metric, and sets the exit status.
    analysis = report["analysis"]
    assert analysis["comparisons"] == [{"arm": "B", "baseline": "A", "deciding": True}]
    assert {(m["arm"], m["baseline"]) for m in analysis["metrics"]} == {("B", "A")}
    assert "cpu_ns_per_request" in {m["metric"] for m in analysis["metrics"]}
    assert (done.returncode == 1) == analysis["regression"]
    with store.transaction() as session:
        held = session.scalars(select(Host.name).where(Host.experiment_id == eid)).all()
    assert held == []
    assert_no_arm_left(exp.marker)


def test_a_three_sided_experiment_runs_each_arm_on_its_own_host_and_the_change_decides(
    ray_cluster: RayCluster, store: Store, tmp_path: Path
) -> None:
    """False failure: under 1e-3 for the layout and the comparisons, which do not depend on
    noise; the parent's cost is checked by its point estimate only (about +35% for twice the
    work, asserted above +10%: with the per-trial spread of 2026-11-28's run, about 3%, and
    the 8% host bias its A/A showed, which the design cancels within a trial, as each arm
    visits each host once: over two trials a standard error of about 2 points, and 25
    points of margin), not by its verdict, whose 2-trial t on 1 degree of freedom is a
    power question. Either verdict of
    the change passes (it is an A/A). A batch spoiled by a load gate (or by steal that hit
    one arm more) is run again and changes that count; how often batches are spoiled here
    is not recorded."""
    ray_cluster.ensure_workers("w4")  # a third host of the class
    # Production; its parent costlier (already in production, so only context); the
    # change is the parent's build: it did nothing, and that decides. Twice the work: 30%
    # more read +10.6% [-2.3%, +23.6%] over three trials (2026-11-28), inconclusive.
    costlier = ["--regress-cpu", "1.0"]
    exp = write_experiment(
        tmp_path / "three",
        tag="ray-three",
        arms={
            "production": {},
            "parent": {"args": costlier},
            "change": {"args": costlier, "baseline": "parent"},
        },
        design={"trials": 2},
    )
    done = ray_cluster.hairline(
        "run", str(exp.path), *ray_args(ray_cluster), "--db", ray_cluster.db_url,
        "--json", str(tmp_path / "three.json"), "--home", str(tmp_path / "home"),
        timeout_s=300,
    )  # fmt: skip
    report = json.loads((tmp_path / "three.json").read_text())
    check_schema("experiment-report", report)
    eid = report["experiment_id"]
    arms = ("production", "parent", "change")
    assert_each_trial_done_once(store, eid, trials=2, arms=arms, batches=3)

    # Every batch has the three arms on three hosts; over a trial each arm visits each.
    runs = runs_on_hosts(store, eid)
    for t in range(2):
        for b in range(3):
            placed = {arm: name for t_, b_, arm, name, _ in runs if (t_, b_) == (t, b)}
            assert set(placed) == set(arms) and len(set(placed.values())) == 3, placed
        for arm in arms:
            visited = {name for t_, _, a, name, _ in runs if t_ == t and a == arm}
            assert len(visited) == 3, (t, arm, visited)
    assert {name for *_, name, _ in runs} == {"w2", "w3", "w4"}

    # Each candidate is compared with its own baseline; only the change decides.
    with store.transaction() as session:
        rows = session.scalars(select(VerdictRow).where(VerdictRow.experiment_id == eid)).all()
    assert {(r.candidate, r.baseline, r.deciding) for r in rows} == {
        ("parent", "production", False), ("change", "parent", True)
    }  # fmt: skip
    verdict = {(r.candidate, r.metric): r.label for r in rows}
    [parent_cpu] = [m for m in report["analysis"]["metrics"]
                    if (m["arm"], m["metric"]) == ("parent", "cpu_ns_per_request")]  # fmt: skip
    assert parent_cpu["effect_rel"] > 0.10, parent_cpu
    # The parent's regression is context: the exit status and the headline follow the
    # change's verdicts alone. (The change is the parent's build, so its verdicts are an
    # A/A's: no regression, but a false alarm at the rate of alpha, by design.)
    deciding_regression = any(r.label == "regression" for r in rows if r.deciding)
    assert done.returncode == (1 if deciding_regression else 0), done.stdout + done.stderr
    assert report["regression"] == deciding_regression
    headline = report["headline"]["text"]
    if verdict[("parent", "cpu_ns_per_request")] == "regression":
        assert "not deciding: regression in " in headline, headline
        assert "cpu_ns_per_request (parent vs production)" in headline, headline
    assert_no_arm_left(exp.marker)


def test_a_worker_node_killed_mid_trial_has_its_trial_run_again_on_another_host(
    ray_cluster: RayCluster, store: Store, tmp_path: Path
) -> None:
    """False failure: under 1e-4: the host is lost 1.5-2.0 s after its raylet is killed and
    the processor ends 7.4-9.0 s after (six runs, 2026-11-29), against 40 s; reaching trial 2
    takes about 8 s against 120 s; the verdict is not checked.

    Before the driver asked the node's raylet port (arms/remote.py), half of the runs took
    a minute more: a batch's warm-up waited for the dead node's arm (the engine's 60 s warm
    timeout, py-spy's stack of the driver) while the head's health checks had not yet
    called the node dead. What is checked is the trial's last run-through: every batch and
    arm of it after the dead host's last run, none on that host."""
    ray_cluster.ensure_workers("w4")  # the spare the interrupted trial moves to
    # Two trials: the node dies in the second, the last, and its trial runs again.
    exp = write_experiment(tmp_path / "lost", tag="lost", design={"trials": 2})
    path, marker = exp.path, exp.marker
    home = str(tmp_path / "home")
    eid = experiment_id(ray_cluster.hairline("run", str(path), "--no-process", "--no-wait",
                                             "--home", home))  # fmt: skip
    run = popen(ray_cluster, "lab", "process", "--once", *ray_args(ray_cluster), "--home", home)
    started = time.monotonic()
    try:
        interrupted, runs = wait_for_arms_in_a_later_trial(store, eid, run, marker)
        with store.transaction() as session:
            victim = session.get(Host, runs[0].host_id)
            assert victim is not None
            name, address = victim.name, victim.address
        os.kill(node_process("raylet", f"--node_ip_address={address}"), signal.SIGKILL)
        killed = time.monotonic()
        output = run.communicate(timeout=240)[0]
        ended_s = time.monotonic() - killed
    finally:
        if run.poll() is None:
            run.kill()
    # Where this test's time goes, kept with its output (pytest shows it on a failure, and
    # `-o junit_logging=system-out` keeps it for a pass).
    lost = output[max(0, output.find("was lost") - 40) :][:400]
    print(
        f"trial 2 reached after {killed - started:.1f} s; the processor ended "
        f"{ended_s:.1f} s after the kill; {' '.join(lost.split())}"
    )
    assert run.returncode == 0, output
    assert ended_s < 40, (ended_s, output)
    assert "raylet" in lost and "refuses connections" in lost, lost
    assert f"host {name} was lost" in output and f"#{eid}: done" in output, output
    assert_each_trial_done_once(store, eid, trials=2, interrupted=interrupted)
    with store.transaction() as session:
        dead = session.scalars(select(Host).where(Host.name == name)).one()
        trial_runs = session.scalars(
            select(Run).where(Run.experiment_id == eid, Run.trial == interrupted)
            .order_by(Run.started_at)
        ).all()  # fmt: skip
    assert not dead.healthy and "healthy again when its agent registers" in str(dead.health_note)
    assert {r.id for r in runs} <= {r.id for r in trial_runs}
    last_on_dead = max(r.started_at for r in trial_runs if r.host_id == dead.id)
    again = [r for r in trial_runs if r.started_at > last_on_dead]
    assert {(r.batch, r.arm) for r in again} == {(0, "A"), (0, "B"), (1, "A"), (1, "B")}, again
    assert dead.id not in {r.host_id for r in again}
    assert_no_arm_left(marker)
    # Its agent registering again makes the host healthy again.
    restarted = time.monotonic()
    assert "(healthy again)" in ray_cluster.start_worker(name)
    print(f"{name} restarted in {time.monotonic() - restarted:.1f} s")
    with store.transaction() as session:
        assert session.scalars(select(Host.healthy).where(Host.name == name)).one()


def test_a_processor_killed_mid_trial_is_taken_over_and_its_arms_die_with_it(
    ray_cluster: RayCluster, store: Store, tmp_path: Path
) -> None:
    """False failure: about 1e-4 (not measured): the arms must die within 10 s of their driver, the
    takeover finish within 180 s; the verdict is not checked."""
    # No rate in the file: the calibration runs first, on the nodes as the trials do.
    exp = write_experiment(
        tmp_path / "kill",
        tag="kill",
        load={"rate_per_s": None, "target_utilization": 0.3, "warmup_rate_per_s": 300},
        design={"trials": 2},  # the processor dies in the second, the last
    )
    path, marker = exp.path, exp.marker
    home = str(tmp_path / "home")
    eid = experiment_id(ray_cluster.hairline("run", str(path), "--no-process", "--no-wait",
                                             "--home", home))  # fmt: skip
    first = popen(ray_cluster, "lab", "process", *ray_args(ray_cluster), "--home", home,
                  "--lease-s", "3", "--poll-s", "0.2")  # fmt: skip
    try:
        interrupted, _ = wait_for_arms_in_a_later_trial(store, eid, first, marker)
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        if first.stdout is not None:
            first.stdout.close()
    # Its driver dies with it, Ray kills the driver's actors, and each arm its actor's.
    assert_no_arm_left(marker, within_s=10.0)
    deadline = time.monotonic() + 180
    while True:
        second = ray_cluster.hairline("lab", "process", "--once", *ray_args(ray_cluster),
                                      "--home", home, "--lease-s", "3", timeout_s=180)  # fmt: skip
        if f"#{eid}: done" in second.stdout:
            break
        assert time.monotonic() < deadline, second.stdout + second.stderr
        time.sleep(1.0)
    assert_each_trial_done_once(store, eid, trials=2, interrupted=interrupted)
    with store.transaction() as session:
        row = session.get(Experiment, eid)
        assert row is not None and row.claims >= 2
        calibration = json.loads(row.calibration or "{}")
        runs = Path(row.artifacts_dir) / "runs"
    # Both copies of the baseline ran on the nodes; the rate found is the one every trial,
    # the taken-over ones included, ran at.
    assert calibration["rate_per_s"] == row.rate_per_s and len(calibration["steps"]) >= 2
    assert {p.name for p in runs.glob("calibration-*.log")} == {
        "calibration-A.0.log",
        "calibration-A.1.log",
    }
    assert_no_arm_left(marker)


def test_a_dead_head_fails_the_batch_cleanly_and_the_experiment_resumes_with_a_new_one(
    ray_cluster: RayCluster, store: Store, tmp_path: Path
) -> None:
    """False failure: about 1e-3 (not measured): the processor must give up on the dead head within
    10 s (Ray's own clients wait 60 s); it took 1.4 s in two runs (2026-11-29, one of them
    fc39's suite: two refused probes of the head's port 0.5 s apart, then the driver's
    exit; 7.2 s while the driver waited on Ray's exit handlers, 10.4-14.2 s with probes 2 s
    apart), and the interrupted trial has about 5 s of its batches left after the head
    dies."""
    # Batches of 2 s: the trial the head dies in must still be running when the processor
    # has seen the head gone. With the suite's default 1 s batches (and probes 2 s apart)
    # the trial ran to its end on the workers first, in two runs of three.
    # Two trials: the head dies in the second, the last, so the resumed run has one trial
    # to do (three took 87 s of this test's time, two about 70).
    exp = write_experiment(
        tmp_path / "head", tag="head", load={"duration_s": 2.0}, design={"trials": 2}
    )
    path, marker = exp.path, exp.marker
    home = str(tmp_path / "home")
    eid = experiment_id(ray_cluster.hairline("run", str(path), "--no-process", "--no-wait",
                                             "--home", home))  # fmt: skip
    processor = popen(ray_cluster, "lab", "process", "--once", *ray_args(ray_cluster),
                      "--home", home, "--lease-s", "5")  # fmt: skip
    try:
        interrupted, _ = wait_for_arms_in_a_later_trial(store, eid, processor, marker)
        os.kill(node_process("gcs_server", str(ray_cluster.root)), signal.SIGKILL)
        killed = time.monotonic()
        output = processor.communicate(timeout=90)[0]
        took_s = time.monotonic() - killed
    finally:
        if processor.poll() is None:
            processor.kill()
    # Ray's own clients give up on a dead head after 60 s; the processor must not wait.
    assert took_s < 10, (took_s, output)
    assert "Ray head unreachable" in output and f"#{eid}: waiting" in output, output
    with store.transaction() as session:
        row = session.get(Experiment, eid)
        assert row is not None and row.phase == "running"
        assert row.progress.startswith("waiting: Ray head unreachable"), row.progress
        states = {t.index: t.state for t in session.scalars(
            select(Trial).where(Trial.experiment_id == eid))}  # fmt: skip
        held = session.scalars(select(Host.name).where(Host.experiment_id == eid)).all()
    assert states[interrupted] == "pending" and "running" not in states.values()
    assert held == []
    assert_no_arm_left(marker, within_s=5.0)

    restarting = time.monotonic()
    ray_cluster.restart_all()
    resuming = time.monotonic()
    resumed = ray_cluster.hairline("lab", "process", "--once", *ray_args(ray_cluster),
                                   "--home", home, timeout_s=180)  # fmt: skip
    # Where the time goes (49 to 93 s in all): kept with the output, as above.
    print(
        f"gave up on the head {took_s:.1f} s after its death; the cluster restarted in "
        f"{resuming - restarting:.1f} s; the resumed run took {time.monotonic() - resuming:.1f} s"
    )
    assert f"#{eid}: done" in resumed.stdout, resumed.stdout + resumed.stderr
    assert_each_trial_done_once(store, eid, trials=2, interrupted=interrupted)
    assert_no_arm_left(marker)
