"""Sampling a Ray arm on its node, without Ray: a HostAgent as the actor would run it, on
loopback, with the real sample service and the real perf. The agent starts perf on the
arm's CPUs as its own child, reads it there, and kills it whenever the arm stops or its
dead-man timer fires; the processor's handle (NodeSampler) gets the result as plain data,
a missing perf's reason naming the node. (With Ray and real nodes:
tests/lab/test_ray_profiling.py.)"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from hairline.arms.host_agent import ArmRecipe, HostAgent
from hairline.arms.node_profile import NodeSampler
from hairline.config import ArmConfig, ServiceConfig
from hairline.config.profiling import ProfileConfig
from hairline.profile.perf import perf_binary
from suitekit import live_processes_with

PREFIX = f"hltest{os.getpid()}-np-"
# Frame-pointer stacks (the engine keeps its frame pointers): cheap to read back.
PROFILE = ProfileConfig(frequency_hz=1999, call_graph="fp")


@pytest.fixture(autouse=True)
def agent_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HAIRLINE_AGENT_HOME", str(tmp_path / "agent"))
    return tmp_path / "agent"


def needs_perf() -> None:
    if perf_binary() is None:
        pytest.skip("perf is not installed (make sysdeps installs linux-perf)")


def start_arm(agent: HostAgent, marker: str) -> dict[str, Any]:
    service = ServiceConfig(
        name="sample",
        start=f"{{engine}} sample-service --host {{host}} --port {{port}} --warmup-s {marker}",
        health="/healthz",
    )
    recipe = ArmRecipe(name="A", service=service, arm=ArmConfig())
    return agent.start_arm(1, recipe, "", "t0b0a1-A", "A", 10.0)


def perfs_writing(data: Path) -> list[int]:
    """The perf processes recording into ``data``."""
    return [p for p in live_processes_with(str(data)) if "record" in _cmdline(p)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])


def wait_for(found: Any, within_s: float = 5.0) -> Any:
    deadline = time.monotonic() + within_s
    while not (got := found()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


def test_the_nodes_agent_samples_its_arm_with_a_perf_of_its_own(engine_path: Path) -> None:
    """False failure: under 1e-6: the service answers requests back to back on its CPU for
    1 s while perf samples that CPU at 1,999 Hz; the test needs 20 of its samples."""
    needs_perf()
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX)
    info = start_arm(agent, "0.0131")
    data = agent.workdir / "t0b0a1-A.perf.data"
    try:
        agent.start_sampling(1, PROFILE, "t0b0a1-A")
        [perf] = wait_for(lambda: perfs_writing(data))
        # perf is the agent's child (on Ray: the actor's, on the arm's node).
        assert parent_of(perf) == os.getpid()
        assert f"-C {agent.cpus[0]}" in _cmdline(perf)
        url = f"http://127.0.0.1:{info['port']}/api/feed"
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            with urllib.request.urlopen(url) as answer:
                answer.read()
        agent.interrupt_sampling(1)
        got = agent.stop_sampling(1)
    finally:
        agent.stop_arm(1)
    assert got.profile is not None, got.reason
    assert got.samples >= 20, got
    names = {f.name for (_, frames) in got.profile.stacks for f in frames}
    assert any(n.startswith("hairline_engine::sample::") for n in names), sorted(names)[:20]
    assert perfs_writing(data) == [] and not data.exists()
    assert agent.stop_sampling(1).reason == "perf was not started"


def test_a_perf_dies_with_its_arm_and_with_the_dead_man_timer(engine_path: Path) -> None:
    """False failure: about 1e-6: a 1 s dead-man timer must stop the perf within 10 s."""
    needs_perf()
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX)
    start_arm(agent, "0.0132")
    data = agent.workdir / "t0b0a1-A.perf.data"
    agent.start_sampling(1, PROFILE, "t0b0a1-A")
    assert wait_for(lambda: perfs_writing(data))
    agent.stop_arm(1)  # a batch that failed with the window open
    assert perfs_writing(data) == [] and not data.exists()

    silent = HostAgent("w2", "127.0.0.1", (0,), PREFIX, deadman_s=1.0)
    start_arm(silent, "0.0133")
    silent.start_sampling(1, PROFILE, "t0b0a1-A")
    assert wait_for(lambda: perfs_writing(data))
    # Nobody calls: the processor is gone. The timer stops the arm and its perf.
    assert wait_for(lambda: not perfs_writing(data), within_s=10.0)
    assert wait_for(lambda: not live_processes_with("--warmup-s 0.0133"), within_s=10.0)


def test_without_perf_on_the_node_the_processor_learns_why_and_where(
    tmp_path: Path, engine_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's perf is the node's: its HAIRLINE_PERF, not the processor's. The
    processor's handle calls the agent as Ray would (here directly) and gets the reason
    with the node's name, and which host sampled."""
    monkeypatch.setenv("HAIRLINE_PERF", str(tmp_path / "no-perf-here"))
    agent = HostAgent("w2", "127.0.0.1", (0,), PREFIX)
    start_arm(agent, "0.0134")

    def call(method: str, *args: Any, timeout_s: float = 20.0) -> Any:
        return getattr(agent, method)(*args)

    sampler = NodeSampler(call, host="w2", arm_id=1, config=PROFILE, name="t0b0a1-A")
    try:
        sampler.start()
        sampler.interrupt()
        got = sampler.stop()
        sampler.kill()  # after a stop: nothing left to kill, no error
    finally:
        agent.stop_arm(1)
    assert got.profile is None and got.host == "w2"
    assert got.reason.startswith(f"on w2: HAIRLINE_PERF={tmp_path / 'no-perf-here'} is not")
