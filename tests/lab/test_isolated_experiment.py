"""An experiment whose arms run isolated ([service.isolation]): the side effects the service
tried are in the report, and no namespace, veth or nftables table outlives the run, a Ctrl-C,
or a processor killed with SIGKILL once another takes the experiment over.

Needs root (network namespaces, nftables); skips with the reason elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from experiment_files import write_experiment
from sqlalchemy import select

from hairline.arms.netns import leftovers, netns_available
from hairline.lab.trials import cgroup_prefix
from hairline.store.db import open_store
from hairline.store.models import Experiment
from schema_check import check_schema

HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(reason := netns_available()), reason=f"network namespaces unavailable: {reason}"
    ),
]
# Port 9 (discard) on the host's loopback: not on the allow-list, so refused and counted.
KNOCK = "import socket\nsocket.socket().connect_ex(('127.0.0.1', 9))\n"


def isolated_experiment(folder: Path, tag: str, trials: int) -> Path:
    """The sample service, isolated, knocking once on a denied port as each arm starts."""
    folder.mkdir(parents=True, exist_ok=True)
    knock = folder / "knock.py"
    knock.write_text(KNOCK)
    return write_experiment(
        folder,
        tag=tag,
        service={"isolation": {"local_ports": []}},
        design={"trials": trials},
        analysis={"model": "welch-none"},
        wrap=f"sh -c '{sys.executable} {knock}; exec {{command}}'",
    ).path


def env(engine: Path) -> dict[str, str]:
    return {**os.environ, "HAIRLINE_ENGINE": str(engine)}


def hairline(*args: str, home: Path, engine: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HAIRLINE, *args, "--home", str(home)],
        capture_output=True, text=True, timeout=300, env=env(engine),
    )  # fmt: skip


def prefixes(home: Path) -> list[str]:
    store = open_store(home=home)
    try:
        with store.transaction() as session:
            ids = session.scalars(select(Experiment.id)).all()
        return [cgroup_prefix(store, i) for i in ids]
    finally:
        store.close()


def left(home: Path) -> list[str]:
    return [thing for prefix in prefixes(home) for thing in leftovers(prefix)]


def wait_for_namespaces(home: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not left(home):
        assert time.monotonic() < deadline, "the arms' namespaces never appeared"
        assert proc.poll() is None, "the run ended early"
        time.sleep(0.05)


@pytest.mark.shares_cpus
def test_the_report_names_the_refused_connections_and_nothing_is_left(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 1e-3 (not measured), beside another test (shares_cpus): either
    verdict passes, and the knocks are counted against the arm starts the report itself
    lists (every accepted batch, and every spoiled attempt run again), so a batch a
    neighbour spoils moves both sides alike. What the count cannot follow is a trial left
    out (three spoiled attempts of one batch in a row): that fails the test."""
    home = tmp_path / "home"
    path = isolated_experiment(tmp_path / "run", "iso", trials=2)
    done = hairline("run", str(path), home=home, engine=engine_path)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert left(home) == []
    report = json.loads(hairline("report", "1", "--json", "-", home=home,
                                 engine=engine_path).stdout)  # fmt: skip
    check_schema("experiment-report", report)
    assert report["trials_done"] == 2, report["notes"]
    # Each arm starts once per batch attempt: 2 trials x 2 batches, and any run again.
    spoiled = [n for n in report["notes"] if "was spoiled and run again" in n]
    starts = 2 * 2 + len(spoiled)
    notes = [n for n in report["notes"] if n.startswith("side effects")]
    assert notes == [
        f"side effects of arm {arm}: {starts} connections refused (127.0.0.1:9: {starts})"
        for arm in "AB"
    ]


def test_ctrl_c_leaves_no_namespace(tmp_path: Path, engine_path: Path) -> None:
    """False failure: about 1e-5: the namespaces appear within seconds of the 60 s allowed, and the
    run must end within 30 s of SIGINT."""
    home = tmp_path / "home"
    path = isolated_experiment(tmp_path / "int", "iso-int", trials=3)
    run = subprocess.Popen(
        [*HAIRLINE, "run", str(path), "--home", str(home)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(engine_path),
        # As from a terminal (a background shell would leave SIGINT ignored).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        wait_for_namespaces(home, run)
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=30) != 0
    finally:
        if run.poll() is None:
            run.kill()
    assert left(home) == []


@pytest.mark.shares_cpus
def test_a_killed_processors_namespaces_are_swept_by_the_next(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 1e-5: the takeover after a 3 s lease must finish a 1-trial run within 60
    s, beside another test (shares_cpus): the sweep takes only this experiment's prefix."""
    home = tmp_path / "home"
    path = isolated_experiment(tmp_path / "kill", "iso-kill", trials=1)
    queued = hairline("run", str(path), "--no-process", "--no-wait", home=home,
                      engine=engine_path)  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    first = subprocess.Popen(
        [*HAIRLINE, "lab", "process", "--home", str(home), "--lease-s", "3", "--poll-s", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(engine_path),
    )  # fmt: skip
    try:
        wait_for_namespaces(home, first)
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert left(home) != []  # what a dead processor leaves, until someone sweeps
        deadline = time.monotonic() + 60
        while True:
            second = hairline("lab", "process", "--once", "--lease-s", "3", home=home,
                              engine=engine_path)  # fmt: skip
            if "done" in second.stdout or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        assert "done" in second.stdout, second.stdout + second.stderr
        assert "removed network namespace" in second.stdout + second.stderr
    finally:
        if first.poll() is None:
            first.kill()
    assert left(home) == []
