"""The trial runner on loopback: real sample services, the real engine, real collectors."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from hairline.arms.local import ArmSpec
from hairline.collect.memory import PEAK_MEMORY
from hairline.collect.registry import LATENCY, OPTIONAL, collectors_for
from hairline.errors import ArmFailed
from hairline.lab.runner import ArmDef, RunPlan, run_trials
from hairline.lab.schedule import Batch
from hairline.stats.data import ARM_A, ARM_B
from hairline.store.observations import read_observations, write_observations

TRACE = Path(__file__).resolve().parents[2] / "examples" / "sample-service" / "trace.jsonl"


def sample_arm(engine_path: Path, name: str, *extra: str, health: str = "/healthz") -> ArmDef:
    def spec(port: int, cpus: tuple[int, ...]) -> ArmSpec:
        command = [str(engine_path), "sample-service", "--port", str(port), *extra]
        return ArmSpec(name=name, command=command, health_path=health)

    return ArmDef(name=name, spec=spec, warm_path="/warm", metrics_path="/metrics")


def plan(tmp_path: Path, arms: tuple[ArmDef, ...], **overrides: object) -> RunPlan:
    cpus = sorted(os.sched_getaffinity(0))
    hosts = ((cpus[0],), (cpus[-1],))
    values: dict[str, object] = dict(
        arms=arms,
        hosts=hosts,
        trace=TRACE,
        rate_per_s=200.0,
        duration_s=1.0,
        warmup_rate_per_s=200.0,
        warmup_duration_s=0.3,
        trials=1,
        design="fully-balanced",
        workdir=tmp_path / "run",
        counters=("sample_downstream_reads_total",),
        health_timeout_s=10.0,
    )
    values.update(overrides)
    return RunPlan(**values)  # type: ignore[arg-type]


def own_children() -> set[int]:
    me = os.getpid()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[1]) == me and fields[0] != "Z":
                found.add(int(entry))
    return found


def test_the_engine_coalesces_its_sends_only_when_it_sleeps_beside_an_arm(tmp_path: Path) -> None:
    """No engine runs (a property of the plan): costs milliseconds."""
    arms = (ArmDef(name="A", spec=lambda port, cpus: None),)  # type: ignore[arg-type,return-value]
    # Every CPU a host's (the 2-CPU lab): the engine sleeps beside host 0's arm, and sends
    # due within 150 µs share a wake-up.
    shared = plan(tmp_path, arms)
    assert (shared.engine_spin_us, shared.engine_coalesce_us) == (0, 150)
    # Poisson arrivals keep a wake-up per send: coalescing would bunch their gaps.
    assert plan(tmp_path, arms, arrival="poisson").engine_coalesce_us == 0
    # A CPU of its own: it spins before each send, and sends each on time.
    spare = plan(tmp_path, arms, engine_cpus=(0,))
    assert (spare.engine_spin_us, spare.engine_coalesce_us) == (150, 0)


def test_one_trial_yields_every_metric_for_both_arms_and_leaves_nothing(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 1e-5: 400 requests an arm (200/s over two 1 s batches) against the bound
    of 150 ids, and CPU per request in microseconds against the bound of 1; the counters are
    exact."""
    before = own_children()
    arms = (
        sample_arm(engine_path, "A"),
        sample_arm(engine_path, "B", "--extra-reads", "2"),
    )
    table = run_trials(plan(tmp_path, arms, collect=tuple(OPTIONAL)))
    assert own_children() == before

    obs = read_observations(write_observations(tmp_path / "obs.parquet", table))
    assert obs.arms == ("A", "B")
    # Every metric of every collector (the optional ones turned on), and the per-request
    # latency; the peak only where the arms' cgroups are v2.
    registered = {m.name for c in collectors_for(OPTIONAL) for m in c.metrics}
    record = json.loads((tmp_path / "run" / "t0b0a1.batch.json").read_text())
    if not all(by.startswith("cgroup v2") for by in record["measured_by"].values()):
        registered.discard(PEAK_MEMORY.name)
    assert registered | {LATENCY.name} <= set(obs.metrics)
    samples = {metric: s for metric, _, s in obs.samples()}
    # Two batches (the fully balanced swap), one per-batch row per arm in each.
    cpu = samples["cpu_ns_per_request"]
    assert len(cpu) == 4 and set(cpu.host.tolist()) == {0, 1}  # type: ignore[union-attr]
    assert np.all(cpu.value > 1_000)  # real work: microseconds of CPU per request
    # --extra-reads 2 shows up in the service's own counter, per request and endpoint.
    reads = samples["sample_downstream_reads_total[/api/feed]_per_request"]
    assert reads.arm_values(ARM_B).mean() == pytest.approx(reads.arm_values(ARM_A).mean() + 2)
    # Lockstep: every request id measured on A was also measured on B.
    latency = table.filter(pc.equal(table.column("metric"), "latency_us"))
    ids = {
        arm: set(latency.filter(pc.equal(latency.column("arm"), arm)).column("request").to_pylist())
        for arm in ("A", "B")
    }
    assert ids["A"] == ids["B"] and len(ids["A"]) >= 150


def test_an_arm_that_never_gets_healthy_fails_the_run_and_stops_the_other(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: none: the health path never answers 2xx, so the 1 s timeout is reached however
    slow the machine."""
    before = own_children()
    arms = (
        sample_arm(engine_path, "A"),
        sample_arm(engine_path, "B", health="/never-healthy"),
    )
    with pytest.raises(ArmFailed, match=r"arm B: .*/never-healthy did not answer 2xx"):
        run_trials(plan(tmp_path, arms, health_timeout_s=1.0))
    assert own_children() == before


def test_an_arm_that_restarts_during_the_measurement_spoils_its_batch(
    tmp_path: Path, engine_path: Path
) -> None:
    """B's start process runs the sample service as a child, then ends once B's first batch
    starts measuring (a file the progress hook writes): the child keeps serving, so B is
    still "running", but it restarted. That attempt is spoiled with both pids named; the
    next attempt (its start process never told to end) and the other batch are sound.

    False failure: about 1e-6: the shell looks for its trigger every 20 ms and must end
    within the 1 s measurement; the rest is exact."""
    trigger = tmp_path / "restart-B"
    service = sample_arm(engine_path, "B")

    def restarting(port: int, cpus: tuple[int, ...]) -> ArmSpec:
        serve = shlex.join(service.spec(port, cpus).command)
        script = f"{serve} & while [ ! -e {trigger} ]; do sleep 0.02; done; rm {trigger}"
        return ArmSpec(name="B", command=["sh", "-c", script], health_path="/healthz")

    said: list[str] = []

    def progress(batch: Batch, text: str) -> None:
        said.append(f"batch {batch.batch} {text}")
        if text == "measuring" and len([s for s in said if s.endswith("measuring")]) == 1:
            trigger.touch()

    arms = (sample_arm(engine_path, "A"), ArmDef("B", restarting, "/warm", "/metrics"))
    before = own_children()
    table = run_trials(plan(tmp_path, arms, max_batch_attempts=2), progress=progress)
    assert own_children() == before

    spoiled = json.loads((tmp_path / "run" / "t0b0a1.batch.json").read_text())
    assert spoiled["accepted"] is False
    [problem] = spoiled["problems"]
    match = re.fullmatch(
        r"arm B restarted during the measurement: its main process \(pid (\d+)\) ended "
        r"and pid (\d+) serves now",
        problem,
    )
    assert match is not None and match[1] != match[2], problem
    assert f"batch 0 spoiled (attempt 1): {problem}" in said
    for tag in ("t0b0a2", "t0b1a1"):
        assert json.loads((tmp_path / "run" / f"{tag}.batch.json").read_text())["accepted"]
    # Only the sound attempts' rows: one per arm and batch.
    cpu = table.filter(pc.equal(table.column("metric"), "cpu_ns_per_request"))
    assert sorted(cpu.column("arm").to_pylist()) == ["A", "A", "B", "B"]
