"""Local arms: real processes, pinned, health-checked, and stopped with all their children."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hairline.arms.local import ArmSpec, LocalArm, free_port, wait_http_ok
from hairline.collect.procfs import process_tree
from hairline.errors import ArmFailed


def http_server(tmp_path: Path, port: int) -> ArmSpec:
    (tmp_path / "healthz").write_text("ok")
    return ArmSpec(
        name="A",
        command=[sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        health_path="/healthz",
        cwd=tmp_path,
    )


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it no longer runs.
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_arm_is_healthy_pinned_and_stopped(tmp_path: Path) -> None:
    port = free_port()
    with LocalArm(http_server(tmp_path, port), port=port, cpus=[0]).start() as arm:
        assert arm.alive()
        assert os.sched_getaffinity(arm.pid) == {0}
        pid = arm.pid
    assert gone(pid)


def test_stop_takes_the_whole_process_group(tmp_path: Path) -> None:
    """False failure: about 1e-6: a shell's fork within 5 s."""
    port = free_port()
    (tmp_path / "healthz").write_text("ok")
    # A shell that forks a long sleep and then serves: the sleep must not outlive the arm.
    script = f"sleep 300 & exec {sys.executable} -m http.server {port} --bind 127.0.0.1"
    spec = ArmSpec(name="B", command=["sh", "-c", script], cwd=tmp_path)
    with LocalArm(spec, port=port).start() as arm:
        deadline = time.monotonic() + 5
        while len(process_tree(arm.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = process_tree(arm.pid)
        assert len(tree) >= 1
        all_pids = {int(p) for p in os.listdir("/proc") if p.isdigit()}
        sleepers = [
            p
            for p in all_pids
            if os.getpgid(p) == arm.pid and Path(f"/proc/{p}/comm").read_text().strip() == "sleep"
        ]
        assert sleepers
    assert all(gone(p) for p in sleepers)


def test_health_that_never_passes_fails_clearly_and_leaves_nothing(tmp_path: Path) -> None:
    """False failure: none: the path never answers 2xx, so the 1 s timeout is reached however slow
    the machine."""
    port = free_port()
    spec = ArmSpec(
        name="A",
        command=[sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        health_path="/never-there",
        cwd=tmp_path,
    )
    arm = LocalArm(spec, port=port, log_path=tmp_path / "arm.log")
    with pytest.raises(ArmFailed, match=r"arm A: .*/never-there did not answer 2xx within 1 s"):
        arm.start(health_timeout_s=1.0)
    assert not arm.alive()


def test_no_answer_at_a_machines_address_points_at_host_not_the_timeout(tmp_path: Path) -> None:
    """A service bound to 127.0.0.1, checked at another address (127.0.0.2 stands for a test
    machine's, as on a one-machine Ray setup): the hint names {host} first.

    False failure: none: nothing listens at 127.0.0.2 on that port, so the timeout is reached
    however slow the machine."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/", timeout_s=10)
        with pytest.raises(ArmFailed, match=r"did not answer 2xx within 0\.3 s") as err:
            wait_http_ok(f"http://127.0.0.2:{port}/", timeout_s=0.3)
        assert err.value.hint is not None
        assert err.value.hint.startswith("check that the start command listens on {host}")
        with pytest.raises(ArmFailed) as local:
            wait_http_ok(f"http://127.0.0.1:{port}/never-there", timeout_s=0.3)
        assert local.value.hint == (
            "check the arm's log; raise the health timeout if the service starts slowly"
        )
    finally:
        server.terminate()
        server.wait()


def test_a_command_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    spec = ArmSpec(name="A", command=["sh", "-c", "echo cannot bind >&2; exit 3"])
    arm = LocalArm(spec, port=free_port(), log_path=tmp_path / "arm.log")
    with pytest.raises(ArmFailed, match="exited before it became healthy") as err:
        arm.start(health_timeout_s=5.0)
    assert "log: cannot bind" in err.value.message


def test_a_missing_program_is_named(tmp_path: Path) -> None:
    spec = ArmSpec(name="A", command=["/nonexistent/service"])
    with pytest.raises(ArmFailed, match="cannot start '/nonexistent/service'"):
        LocalArm(spec, port=free_port()).start()


def test_a_service_whose_start_process_ends_while_a_child_serves_has_a_new_main_process(
    tmp_path: Path,
) -> None:
    """False failure: about 1e-6: the shell must notice its trigger file within 5 s (it
    looks every 20 ms). Without a cgroup the child cannot be told from a stranger, so this
    needs one (as root here, cgroup v1 or v2)."""
    port = free_port()
    (tmp_path / "healthz").write_text("ok")
    trigger = tmp_path / "restart"
    # The start process serves through a child, then ends when told; the child goes on
    # serving, as after a service's self-restart (its leader died, a child survives).
    script = (
        f"{sys.executable} -m http.server {port} --bind 127.0.0.1 & "
        f"while [ ! -e {trigger} ]; do sleep 0.02; done"
    )
    spec = ArmSpec(name="R", command=["sh", "-c", script], cwd=tmp_path)
    with LocalArm(spec, port=port, cgroup=f"test-r-{port}").start() as arm:
        if arm.cgroup is None:
            pytest.skip(f"no cgroup here: {arm.fallback}")
        before = arm.main_process()
        assert before is not None and before[0] == arm.pid  # the start command's process
        trigger.touch()
        deadline = time.monotonic() + 5
        while arm.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not arm.alive() and arm.running()  # "running" alone would call it sound
        after = arm.main_process()
        assert after is not None and after != before and after[0] in arm.pids()
        assert arm.main_process() == after  # the child stays the main process
