"""The node's half of a remote arm, without Ray: a HostAgent as the actor would run it, on
loopback. Its start command is filled in with the node's values ({host}, {engine},
{artifact}, {workdir}); it sweeps what a dead processor left; its dead-man timer stops
arms nobody asks about; shipped artifacts are kept by build key. (With Ray and real
nodes: tests/lab/test_ray_e2e.py.)"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from hairline.arms.cgroup import create_cgroup
from hairline.arms.host_agent import ArmRecipe, HostAgent, pack_artifact
from hairline.arms.remote import raylet_address, raylet_refuses
from hairline.config import ArmConfig, ServiceConfig
from hairline.errors import ArmFailed
from suitekit import live_processes_with

PREFIX = f"hltest{os.getpid()}-e1-"


@pytest.fixture(autouse=True)
def agent_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HAIRLINE_AGENT_HOME", str(tmp_path / "agent"))
    return tmp_path / "agent"


def recipe(marker: str, *, health: str = "/healthz", args: tuple[str, ...] = ()) -> ArmRecipe:
    service = ServiceConfig(
        name="sample",
        start=f"{{engine}} sample-service --host {{host}} --port {{port}} --warmup-s {marker}",
        health=health,
        root="/nonexistent-on-this-node",
    )
    return ArmRecipe(name="A", service=service, arm=ArmConfig(args=list(args)))


def test_an_arm_starts_bound_to_the_nodes_address_and_its_log_comes_back(
    engine_path: Path, agent_home: Path
) -> None:
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX)
    info = agent.start_arm(1, recipe("0.0123"), "", "t0b0a1-A", "A", 10.0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/healthz") as answer:
            assert answer.status == 200
        assert agent.running(1) and agent.cpu_ns(1) >= 0 and agent.anon_memory_bytes(1) > 0
        assert info["pid"] in live_processes_with("--warmup-s 0.0123")
        # The service file's folder is not on the node: the arm runs in its own folder.
        assert Path(f"/proc/{info['pid']}/cwd").resolve().parent == (
            agent_home / "runs" / PREFIX.rstrip("-")
        )
    finally:
        log = agent.stop_arm(1)
    assert "listening on 127.0.0.1" in log
    assert live_processes_with("--warmup-s 0.0123") == []
    assert agent.stop_arm(1) == ""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_submitted_experiments_arm_runs_sandboxed_on_its_node(engine_path: Path) -> None:
    """An API submission's recipe: the arm runs under bubblewrap as nobody, with its
    cgroup's limits and none of the agent's environment (arms/sandbox.py)."""
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX)
    submitted = dataclasses.replace(recipe("0.0126"), sandboxed=True)
    info = agent.start_arm(1, submitted, "", "t0b0a1-A", "A", 10.0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/healthz") as answer:
            assert answer.status == 200
        tree = live_processes_with("--warmup-s 0.0126")
        names = {Path(f"/proc/{p}/exe").resolve().name for p in tree}
        assert "bwrap" in names, names
        for pid in tree:
            assert b"HAIRLINE_AGENT_HOME" not in Path(f"/proc/{pid}/environ").read_bytes()
    finally:
        agent.stop_arm(1)
    assert live_processes_with("--warmup-s 0.0126") == []


def test_an_arm_that_never_becomes_healthy_fails_as_locally(engine_path: Path) -> None:
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX)
    with pytest.raises(ArmFailed, match="/never"):
        agent.start_arm(1, recipe("0.0124", health="/never"), "", "t0b0a1-A", "A", 1.0)
    assert live_processes_with("--warmup-s 0.0124") == []


def test_a_new_agent_sweeps_what_a_dead_processor_left_of_its_experiment() -> None:
    group, why = create_cgroup(f"{PREFIX}A-1234")
    if group is None:
        pytest.skip(f"no cgroup can be made here: {why}")
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX)
    assert agent.swept == [f"{PREFIX}A-1234"]


def test_arms_nobody_asks_about_are_stopped_by_the_dead_man_timer(engine_path: Path) -> None:
    """False failure: about 1e-6: a 1 s dead-man timer must stop the arm within 10 s."""
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX, deadman_s=1.0)
    agent.start_arm(1, recipe("0.0125"), "", "t0b0a1-A", "A", 10.0)
    deadline = time.monotonic() + 10
    while live_processes_with("--warmup-s 0.0125") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_processes_with("--warmup-s 0.0125") == []


def test_an_artifact_is_shipped_once_per_build_key_with_its_executable_bits(
    tmp_path: Path, engine_path: Path
) -> None:
    build = tmp_path / "out"
    (build / "bin").mkdir(parents=True)
    script = build / "bin" / "serve"
    script.write_text(f'#!/bin/sh\nexec {engine_path} "$@"\n')
    script.chmod(0o755)
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX)
    assert agent.artifact("k1") is None
    path = Path(agent.put_artifact("k1", pack_artifact(build)))
    assert path.name == "out" and os.access(path / "bin" / "serve", os.X_OK)
    assert agent.artifact("k1") == str(path)
    # The same key shipped again (two drivers at once) keeps the first copy.
    assert agent.put_artifact("k1", pack_artifact(build)) == str(path)
    start = "{artifact}/bin/serve sample-service --host {host} --port {port} --warmup-s 0.0126"
    service = ServiceConfig(name="built", start=start)
    arm = ArmRecipe(name="B", service=service, arm=ArmConfig(), artifact_key="k1")
    agent.start_arm(2, arm, str(path), "t0b0a1-B", "B", 10.0)
    try:
        assert live_processes_with("--warmup-s 0.0126")
    finally:
        agent.stop_arm(2)


def test_a_raylet_port_that_refuses_connections_is_a_node_gone() -> None:
    """The driver's pinger asks the node's raylet port, not the head: the head's health
    checks take about a minute to call a node dead. A port that answers, or does not answer
    at all (slow, filtered), is not a death: the calls' own timeouts judge those."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert raylet_refuses("127.0.0.1", port) is None
    gone = raylet_refuses("127.0.0.1", port)
    assert gone is not None and f"127.0.0.1:{port}" in gone and "the node is gone" in gone


def test_the_raylet_of_an_actors_node_is_found_among_the_live_nodes() -> None:
    nodes = [
        {"NodeID": "aa", "Alive": False, "NodeManagerAddress": "127.0.0.2", "NodeManagerPort": 1},
        {"NodeID": "aa", "Alive": True, "NodeManagerAddress": "127.0.0.2", "NodeManagerPort": 2},
        {"NodeID": "bb", "Alive": True, "NodeManagerAddress": "127.0.0.3", "NodeManagerPort": 3},
    ]
    assert raylet_address(nodes, "aa") == ("127.0.0.2", 2)
    assert raylet_address(nodes, "cc") is None
    assert raylet_address(nodes, None) is None
