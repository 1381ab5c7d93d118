"""The lab end to end on loopback: `hairline run` / `aa` / `lab process` on the sample service.

Each test writes a small experiment file, runs the real command, and then checks what a
user would: the verdict and exit status, the database, and that nothing is left behind (no
arm process alive, no host still allocated).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from experiment_files import write_experiment
from sqlalchemy import select

from hairline.kit.procs import group_alive
from hairline.lab.trials import cgroup_prefix
from hairline.store.db import open_store
from hairline.store.models import Experiment, Host, Run, Trial
from hairline.store.observations import read_observations
from schema_check import check_schema
from suitekit import live_processes_with

ROOT = Path(__file__).parents[2]

HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]
REGRESSED_B = {"A": {}, "B": {"args": ["--regress-cpu", "0.10"]}}
DOUBLED_B = {"A": {}, "B": {"args": ["--regress-cpu", "1.0"]}}


def daemonising(marker: str) -> str:
    """A start command that also leaves ``sleep <marker>`` behind in a session of its own,
    as a daemonising service does."""
    return f"sh -c 'setsid sleep {marker} </dev/null >/dev/null 2>&1 & exec {{command}}'"


def hairline(
    *args: str, home: Path, engine: Path, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run(
        [*HAIRLINE, *args, "--home", str(home)],
        capture_output=True, text=True, timeout=timeout_s, env=env,
    )  # fmt: skip


def run_to_end(path: Path, home: Path, engine: Path) -> dict[str, Any]:
    """``hairline run PATH --json`` to its end with either verdict (exit 0 or 1): its JSON
    report, checked against its schema."""
    out = home.parent / "report.json"
    done = hairline("run", str(path), "--json", str(out), home=home, engine=engine)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    check_schema("experiment-report", report)
    return report


def assert_no_daemon(marker: str) -> None:
    deadline = time.monotonic() + 5
    while live_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_processes_with(marker) == []


def arm_cgroups(prefixes: tuple[str, ...]) -> list[str]:
    """The arm cgroups on this machine, in every hierarchy, whose names start with one of
    ``prefixes`` (other labs on this machine may be running experiments of their own)."""
    found = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        for base in hierarchy.rglob("hairline"):
            found += [d.name for d in base.iterdir() if d.is_dir() and d.name.startswith(prefixes)]
    return found


def assert_nothing_left(home: Path) -> None:
    """No arm of any experiment in ``home`` alive, no host allocated, no arm cgroup left."""
    store = open_store(home=home)
    try:
        with store.transaction() as session:
            groups = [g for g in session.scalars(select(Run.pgid)) if g is not None]
            held = session.scalars(select(Host.name).where(Host.experiment_id.is_not(None))).all()
            ids = session.scalars(select(Experiment.id)).all()
        prefixes = tuple(cgroup_prefix(store, i) for i in ids)
    finally:
        store.close()
    deadline = time.monotonic() + 5
    while any(group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [g for g in groups if group_alive(g)] == []
    assert held == []
    assert arm_cgroups(prefixes) == []


@pytest.mark.slow
@pytest.mark.shares_cpus
def test_a_cpu_regression_is_flagged_in_every_report(tmp_path: Path, engine_path: Path) -> None:
    """False failure: under 1e-6: B does twice the work of a request, which read +71% to
    +72% with 95% intervals under +/-4% over four trials at 1,000/s (tests/lab/
    test_bisect_e2e.py, 2026-11-28); over three trials the t on 2 degrees of freedom
    widens that to about +/-6%, still tens of standard errors above the 2% threshold and
    the 5% asserted below. It runs beside another test (shares_cpus): a neighbour that
    doubled the spread would leave +71% over five times the interval's half-width above them.

    This checks that a regression flows to the verdict, the exit status and every report.
    How small a change the lab finds is a benchmark's question (bench/lab on nginx,
    bench/precision): a 10% change over seven 2 s trials took 49 s here and was still
    read inconclusive once on CI."""
    path = write_experiment(
        tmp_path / "ab",
        tag="ab",
        arms=DOUBLED_B,
        load={"rate_per_s": 1000, "duration_s": 1.0},
        design={"trials": 3},
    ).path
    home = tmp_path / "home"
    out = tmp_path / "report.json"
    junit = tmp_path / "junit.xml"
    done = hairline("run", str(path), "--json", str(out), "--markdown", str(tmp_path / "r.md"),
                    "--junit", str(junit), home=home, engine=engine_path)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(out.read_text())
    check_schema("experiment-report", report)
    # JUnit for CI systems: valid against docs/schema/junit.xsd, the regression a failure.
    xmlschema.validate(str(junit), str(ROOT / "docs" / "schema" / "junit.xsd"))
    failed = ET.parse(junit).findall(".//testcase[failure]")
    assert "cpu_ns_per_request" in {case.get("name") for case in failed}
    cpu = next(m for m in report["analysis"]["metrics"] if m["metric"] == "cpu_ns_per_request")
    assert cpu["verdict"] == "regression"
    assert cpu["effect_rel"] > 0.05
    assert report["phase"] == "done" and report["trials_done"] == 3
    assert "regression" in (tmp_path / "r.md").read_text()
    assert "HTML report:" in done.stdout
    html = Path(done.stdout.split("HTML report:")[-1].split()[0])
    assert html.exists() and "cpu_ns_per_request" in html.read_text()
    assert_nothing_left(home)


@pytest.mark.slow
@pytest.mark.shares_cpus
def test_an_aa_experiment_is_not_flagged_and_becomes_history(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: at most 1e-3: an A/A is flagged at a rate of alpha by design, and this
    test checks two metrics at alpha 0.0005 each (a 99.95% interval), so at most 1e-3 in all
    where the model is calibrated (its A/A rate is checked by simulation in tests/stats). How
    often an A/A is flagged at 0.05 is a benchmark's question, not this test's.

    Beside another test (shares_cpus): what a neighbour does to one arm it is as likely to
    do to the other, so it widens the interval and leaves the A/A's rate at alpha (under a
    neighbour burning half a CPU, 2 of 20 A/As flagged at 0.05: bench/RESULTS.md, "A/A under
    a neighbour"); a trial whose spread a neighbour blew up widens the t interval more than
    it moves the mean."""
    path = write_experiment(
        tmp_path / "aa",
        tag="aa",
        arms=REGRESSED_B,
        load={"rate_per_s": 800, "duration_s": 1.0},
        design={"trials": 3},
        analysis={"alpha": 0.0005},
    ).path
    home = tmp_path / "home"
    out = tmp_path / "aa.json"
    done = hairline("aa", str(path), "--json", str(out), home=home, engine=engine_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    check_schema("experiment-report", report)
    assert report["kind"] == "aa"
    # Both arms ran the baseline: B's regression switch is not applied in an A/A.
    assert [arm["source"] for arm in report["arms"]] == ["the service's start command", "same as A"]
    verdicts = {m["metric"]: m["verdict"] for m in report["analysis"]["metrics"]}
    assert verdicts["cpu_ns_per_request"] != "regression"
    assert verdicts["anon_memory_bytes"] != "regression"
    cpu = next(m for m in report["analysis"]["metrics"] if m["metric"] == "cpu_ns_per_request")
    assert cpu["ci_rel"][0] <= 0.0 <= cpu["ci_rel"][1], cpu
    assert_nothing_left(home)
    status = hairline("status", "--json", home=home, engine=engine_path)
    [row] = json.loads(status.stdout)
    check_schema("experiment-list", json.loads(status.stdout))
    assert row["kind"] == "aa" and row["phase"] == "done"


@pytest.mark.shares_cpus
def test_a_health_check_that_never_passes_fails_the_experiment_clearly(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: none: the health path never answers 2xx, so its 1.5 s timeout is reached
    however slow the machine or a test beside it (shares_cpus)."""
    path = write_experiment(
        tmp_path / "sick", tag="sick", service={"health": "/never-healthy", "health_timeout_s": 1.5}
    ).path
    home = tmp_path / "home"
    done = hairline("run", str(path), home=home, engine=engine_path)
    assert done.returncode == 2, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert "/never-healthy" in text and "failed" in text
    store = open_store(home=home)
    with store.transaction() as session:
        [row] = session.scalars(select(Experiment)).all()
        assert row.phase == "failed" and row.failure and "never-healthy" in row.failure
        states = {t.state for t in session.scalars(select(Trial))}
        assert "running" not in states and "abandoned" in states
    store.close()
    assert_nothing_left(home)


def test_a_file_with_several_mistakes_reports_them_all_and_runs_nothing(
    tmp_path: Path, engine_path: Path
) -> None:
    path = write_experiment(
        tmp_path / "bad",
        tag="bad",
        arms={"A": {}, "B": {"pth": "x"}},
        load={"rate_per_s": -1},
        design={"trials": 0},
        start_args="{cores}",
        valid=False,
    ).path
    home = tmp_path / "home"
    done = hairline("run", str(path), home=home, engine=engine_path)
    assert done.returncode == 2
    err = done.stderr
    assert "4 problems" in err
    assert "service.toml:3: service.start: unknown placeholder {cores}" in err
    assert "experiment.toml" in err and "load.rate_per_s" in err and "design.trials" in err
    assert "arms.B.pth: unknown field" in err and "did you mean 'path'?" in err
    assert "Traceback" not in err
    assert not (home / "hairline.db").exists()


@pytest.mark.shares_cpus
@pytest.mark.slow
def test_a_processor_killed_mid_trial_is_taken_over_and_no_trial_is_lost_or_doubled(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 1e-4 (not measured): the deadlines (120 s to reach trial 2, 30 s for the
    takeover after a 3 s lease) are tens of times what a 2-trial run of 2 s batches takes (20 s
    beside another test, shares_cpus, 2026-11-29); the verdict is not checked."""
    marker = f"{5000 + os.getpid() % 1000}.25"
    # Two trials: the processor dies in the second, the last; batches of 2 s, so that it
    # dies with the arms up.
    path = write_experiment(
        tmp_path / "kill", tag="kill", load={"duration_s": 2.0}, design={"trials": 2},
        wrap=daemonising(marker),
    ).path  # fmt: skip
    home = tmp_path / "home"
    queued = hairline("run", str(path), "--no-process", "--no-wait", home=home,
                      engine=engine_path)  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine_path)}
    first = subprocess.Popen(
        [*HAIRLINE, "lab", "process", "--home", str(home), "--lease-s", "3", "--poll-s", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    store = open_store(home=home)
    try:
        # Wait until the first processor is inside trial 2 with its arms running.
        deadline = time.monotonic() + 120
        while True:
            with store.transaction() as session:
                running = session.scalar(select(Trial).where(Trial.state == "running"))
                runs = session.scalars(select(Run).where(Run.stopped_at.is_(None))).all()
                if running is not None and running.index >= 1 and runs:
                    victim_groups = [r.pgid for r in runs if r.pgid]
                    interrupted = running.index
                    break
            assert time.monotonic() < deadline, "the first processor never reached trial 2"
            assert first.poll() is None, "the first processor exited early"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()
        # The second processor must wait for the lease to lapse, then finish the experiment.
        second = hairline("lab", "process", "--once", "--lease-s", "3", home=home,
                          engine=engine_path)  # fmt: skip
        deadline = time.monotonic() + 30
        while "done" not in second.stdout and time.monotonic() < deadline:
            time.sleep(1.0)
            second = hairline("lab", "process", "--once", "--lease-s", "3", home=home,
                              engine=engine_path)  # fmt: skip
        assert "done" in second.stdout, second.stdout + second.stderr
        with store.transaction() as session:
            [row] = session.scalars(select(Experiment)).all()
            trials = session.scalars(select(Trial).order_by(Trial.index)).all()
            assert row.phase == "done" and row.claims >= 2
            assert [t.state for t in trials] == ["done"] * 2
            assert trials[interrupted].attempts == 2
            assert all(t.attempts == 1 for t in trials if t.index != interrupted)
            artifacts = Path(row.artifacts_dir)
        observations = read_observations(artifacts / "observations.parquet").table
        cpu = observations.filter(
            __import__("pyarrow").compute.equal(observations["metric"], "cpu_ns_per_request")
        )
        keys = list(zip(cpu["trial"].to_pylist(), cpu["batch"].to_pylist(),
                        cpu["arm"].to_pylist(), strict=True))  # fmt: skip
        assert sorted(keys) == sorted({(t, b, a) for t in range(2) for b in range(2)
                                       for a in ("A", "B")})  # fmt: skip
        assert not any(group_alive(g) for g in victim_groups)
    finally:
        if first.poll() is None:
            first.kill()
        store.close()
    assert_nothing_left(home)
    assert_no_daemon(marker)


def assert_reports_read_the_stored_analysis(home: Path, engine_path: Path) -> None:
    """Experiment 1's reports: stdout carries only the document asked for (the panel goes
    to stderr), read from the analysis stored when it finished; --reanalyse redoes it."""
    as_json = hairline("report", "1", "--json", "-", home=home, engine=engine_path)
    check_schema("experiment-report", json.loads(as_json.stdout))
    assert json.loads(as_json.stdout)["experiment_id"] == 1
    assert "HTML report" in as_json.stderr
    as_markdown = hairline("report", "1", "--markdown", "-", home=home, engine=engine_path)
    assert as_markdown.stdout.lstrip().startswith("#") and "╭" not in as_markdown.stdout
    stored = home / "experiments" / "1" / "verdicts.json"
    record = json.loads(stored.read_text())
    record["analysis"]["results"][0]["verdict"]["reason"] = "as stored"
    stored.write_text(json.dumps(record))
    reason = lambda done: json.loads(done.stdout)["analysis"]["metrics"][0]["reason"]  # noqa: E731
    assert reason(hairline("report", "1", "--json", "-", home=home, engine=engine_path)) == (
        "as stored"
    )
    again = hairline("report", "1", "--json", "-", "--reanalyse", home=home, engine=engine_path)
    assert reason(again) != "as stored"


@pytest.mark.shares_cpus
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_daemon_the_start_command_leaves_dies_after_the_run_and_after_ctrl_c(
    tmp_path: Path, engine_path: Path, stop: signal.Signals
) -> None:
    """False failure: about 1e-5: either verdict passes; the signal comes 0.3 s after the arms
    start, seconds before the run could end, and the deadlines are 5 to 60 s
    (shares_cpus: a test beside it only slows the run)."""
    marker = f"{6000 + os.getpid() % 1000}.5"
    path = write_experiment(
        tmp_path / "d",
        tag="daemon",
        load={"duration_s": 0.5},
        design={"trials": 1},
        analysis={"model": "welch-none"},
        wrap=daemonising(marker),
    ).path
    home = tmp_path / "home"
    # The run to its end and the reports once: the signal used below changes neither (each
    # of the five commands costs about 4 s).
    if stop == signal.SIGINT:
        done = hairline("run", str(path), home=home, engine=engine_path)
        assert done.returncode in (0, 1), done.stdout + done.stderr
        assert_nothing_left(home)
        assert_no_daemon(marker)
        assert_reports_read_the_stored_analysis(home, engine_path)

    path = write_experiment(
        tmp_path / "i", tag="daemon-int", load={"duration_s": 2.0}, wrap=daemonising(marker)
    ).path
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine_path)}
    run = subprocess.Popen(
        [*HAIRLINE, "run", str(path), "--home", str(home)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        # As from a terminal: a test run started in the background by a shell inherits
        # SIGINT ignored, and Python then never turns it into KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not live_processes_with(marker):
            assert time.monotonic() < deadline, "the arms never started"
            assert run.poll() is None, "the run ended early"
            time.sleep(0.05)
        time.sleep(0.3)
        run.send_signal(stop)
        assert run.wait(timeout=30) != 0
    finally:
        if run.poll() is None:
            run.kill()
    assert_nothing_left(home)
    assert_no_daemon(marker)


NGINX_EXAMPLE = Path(__file__).parents[2] / "examples" / "nginx-gzip"


@pytest.mark.shares_cpus
@pytest.mark.slow
def test_the_nginx_example_builds_each_arm_once_and_then_from_the_cache(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 1e-5: either verdict passes (exit 0 or 1); the builds and the cache are
    not timed, so it runs beside another test (shares_cpus)."""
    if not Path("/usr/sbin/nginx").exists():
        pytest.skip("nginx is not installed (make sysdeps installs it)")
    import shutil

    folder = tmp_path / "nginx-gzip"
    shutil.copytree(NGINX_EXAMPLE, folder)
    path = folder / "experiment.toml"
    text = path.read_text().replace("trials = 7", "trials = 1")
    path.write_text(text.replace("duration_s = 4", "duration_s = 1"))
    home = tmp_path / "home"
    first = hairline("run", str(path), "--json", str(tmp_path / "1.json"), home=home,
                     engine=engine_path)  # fmt: skip
    assert first.returncode in (0, 1), first.stdout + first.stderr
    assert "A: built" in first.stdout and "B: built" in first.stdout
    second = hairline("run", str(path), "--json", str(tmp_path / "2.json"), home=home,
                      engine=engine_path)  # fmt: skip
    assert "A: cached" in second.stdout and "B: cached" in second.stdout
    check_schema("experiment-report", json.loads((tmp_path / "2.json").read_text()))
    arms = json.loads((tmp_path / "2.json").read_text())["arms"]
    assert [a["build_cached"] for a in arms] == [True, True]
    assert arms[0]["build_key"] != arms[1]["build_key"]
    assert_nothing_left(home)


def test_a_batch_whose_arm_dies_is_run_again_and_the_report_says_why(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 1e-3 (not measured): the kill comes 1 s after the first arm starts, so
    the arm must be healthy within that second (the sample service starts in milliseconds), and
    exactly one batch may be run again: a batch spoiled by a load gate (or by steal
    that hit one arm more) is run again and changes that count; how often batches are
    spoiled here is not recorded."""
    # The first arm ever started is killed a second after it starts; every later one lives.
    flag = tmp_path / "crashed-once"
    path = write_experiment(
        tmp_path / "crash",
        tag="crash",
        design={"trials": 1},
        analysis={"model": "welch-none"},
        wrap=f"sh -c 'if mkdir {flag} 2>/dev/null; then (sleep 1.0; kill -9 $$) & fi; "
        "exec {command}'",
    ).path
    home = tmp_path / "home"
    report = run_to_end(path, home, engine_path)
    assert report["phase"] == "done" and report["trials_done"] == 1
    rerun = [n for n in report["notes"] if "was spoiled and run again" in n]
    assert len(rerun) == 1 and "arm A" in rerun[0], report["notes"]
    assert flag.exists()
    assert_nothing_left(home)
    store = open_store(home=home)
    with store.transaction() as session:
        runs = session.scalars(select(Run).order_by(Run.id)).all()
    store.close()
    # Each run ends with its own batch attempt: three attempts' arms, each stopped before
    # the next attempt's arms started.
    assert len(runs) == 6
    for earlier, later in zip(runs[::2], runs[2::2], strict=False):
        assert earlier.stopped_at is not None and earlier.stopped_at <= later.started_at


@pytest.mark.slow
def test_without_a_rate_the_load_is_calibrated_and_auto_trials_stop_once_settled(
    tmp_path: Path, engine_path: Path
) -> None:
    """Neither a rate nor a utilisation: calibration keeps the candidate rate at which CPU
    per request was most precise in its A/A steps, below the highest servable rate.

    False failure: about 1e-3 (not measured). A 30% regression settles long before 8 trials
    (the comment). Calibration fails only if no candidate rate passes its four 1 s steps,
    each at most 90% of a rate that already passed a 2 s step with every gate holding."""
    path = write_experiment(
        tmp_path / "auto",
        tag="auto",
        arms={"A": {}, "B": {"args": ["--regress-cpu", "0.30"]}},
        # Four A/A steps a candidate, not eight: this checks that the quietest passing
        # candidate is kept, not how surely the steps rank them (12 s less).
        load={"rate_per_s": None, "duration_s": 1.0, "calibration_steps": 4},
        design={"trials": "auto", "max_trials": 8},
    ).path
    home = tmp_path / "home"
    out = tmp_path / "report.json"
    done = hairline("run", str(path), "--json", str(out), home=home, engine=engine_path)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(out.read_text())
    check_schema("experiment-report", report)
    [note] = [n for n in report["notes"] if n.startswith("rate calibrated to")]
    assert "cpu_ns_per_request most precise per minute of" in note
    store = open_store(home=home)
    try:
        with store.transaction() as session:
            [row] = session.scalars(select(Experiment)).all()
            stored = json.loads(row.calibration or "{}")
            states = [t.state for t in session.scalars(select(Trial).order_by(Trial.index))]
    finally:
        store.close()
    calibration = report["calibration"]
    assert row.rate_per_s == report["rate_per_s"] == calibration["rate_per_s"]
    assert stored["rate_per_s"] == row.rate_per_s and stored["target_utilization"] is None
    assert calibration["mode"] == "precision" and calibration["metric"] == "cpu_ns_per_request"
    # The rate kept is the quietest candidate whose every step passed, below the highest rate
    # the ramp saw served with every gate holding.
    passed = [c for c in calibration["candidates"] if c["passed"]]
    chosen = min(passed, key=lambda c: (max(c["sd_per_trial_rel"], 0.001), c["rate_per_s"]))
    assert calibration["rate_per_s"] == chosen["rate_per_s"]
    assert calibration["rate_per_s"] < calibration["servable_rate_per_s"]
    assert all(c["steps"] == 4 and len(c["host_differences"]) == 4 for c in passed)
    assert 0 < calibration["seconds"] < 90
    # A 30% regression settles long before eight trials; the rest are marked not needed.
    cpu = next(m for m in report["analysis"]["metrics"] if m["metric"] == "cpu_ns_per_request")
    assert cpu["verdict"] == "regression"
    assert report["trials_done"] < 8 and states.count("skipped") == 8 - report["trials_done"]
    assert_nothing_left(home)


@pytest.mark.shares_cpus
def test_a_running_experiment_is_cancelled_between_batches_and_leaves_nothing(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 1e-5: 5 trials of 2 s batches leave tens of seconds to cancel in, and
    the deadlines are 30 to 60 s (shares_cpus: a test beside it only slows the run)."""
    path = write_experiment(
        tmp_path / "c", tag="cancel", load={"duration_s": 2.0}, design={"trials": 5}
    ).path
    home = tmp_path / "home"
    queued = hairline("run", str(path), "--no-process", "--no-wait", home=home,
                      engine=engine_path)  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine_path)}
    processor = subprocess.Popen(
        [*HAIRLINE, "lab", "process", "--once", "--home", str(home), "--lease-s", "1.5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    store = open_store(home=home)
    try:
        deadline = time.monotonic() + 60
        while True:
            with store.transaction() as session:
                if session.scalar(select(Trial).where(Trial.state == "running")) is not None:
                    break
            assert time.monotonic() < deadline and processor.poll() is None
            time.sleep(0.05)
        cancelled = hairline("cancel", "1", "--wait", "30", home=home, engine=engine_path)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "cancel requested" in cancelled.stdout and "cancelled" in cancelled.stdout
        processor.wait(timeout=30)
        with store.transaction() as session:
            [row] = session.scalars(select(Experiment)).all()
            states = [t.state for t in session.scalars(select(Trial).order_by(Trial.index))]
        assert row.phase == "cancelled"
        assert "running" not in states and "abandoned" in states and "pending" in states
    finally:
        if processor.poll() is None:
            processor.kill()
        store.close()
    assert_nothing_left(home)
    again = hairline("cancel", "1", home=home, engine=engine_path)
    assert again.returncode == 2 and "already ended" in again.stderr
