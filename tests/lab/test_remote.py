"""The processor's side of the ray backend, without Ray: what a driver is told (the plan
survives the trip whole), when the engine must not spin, how the head is probed, and how
a driver's user error comes back as the same kind. (With Ray: tests/lab/test_ray_e2e.py.)"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

from hairline.arms.remote import RemoteHost
from hairline.config import ExperimentConfig
from hairline.errors import ArmFailed, HairlineError
from hairline.lab.driver import _plan
from hairline.lab.remote import RemoteRun, _error, engine_shares_a_host, head_reachable
from hairline.lab.runner import ArmDef, RunPlan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample-service"


def config() -> ExperimentConfig:
    from hairline.lab.files import load_experiment_file

    return load_experiment_file(EXAMPLE / "experiment.toml")


def plan(tmp_path: Path) -> RunPlan:
    arms = tuple(ArmDef(name=n, spec=lambda port, cpus: None) for n in ("A", "B"))  # type: ignore[arg-type,return-value]
    return RunPlan(
        arms=arms, hosts=((2, 3), (4, 5)), trace=EXAMPLE / "trace.jsonl", rate_per_s=3500.0,
        duration_s=4.0, warmup_rate_per_s=400.0, warmup_duration_s=1.5, trials=7,
        design="fully-balanced", workdir=tmp_path / "runs", counters=("reads_total",),
        engine_cpus=(0, 1), engine_shares_a_host=True, cgroup_prefix="hl1234abcd-e7-",
        max_batch_attempts=2, max_error_rate=0.02,
    )  # fmt: skip


def test_the_driver_rebuilds_the_processors_plan_from_its_job(tmp_path: Path) -> None:
    run = RemoteRun(
        ray_address="10.0.0.1:6379", host_names=("m1", "m2/cpu4-5"),
        addresses=("10.0.0.11", "10.0.0.12"), config=config(), arm_names=("A", "B"),
        artifacts={},
    )  # fmt: skip
    sent = plan(tmp_path)
    job = json.loads(json.dumps(run.job("trial", sent, tmp_path / "out.parquet")))
    assert [h["resource"] for h in job["hosts"]] == ["hairline_host_m1", "hairline_host_m2_cpu4_5"]
    hosts = [
        RemoteHost(i, h["name"], h["address"], h["resource"], tuple(h["cpus"]), cgroup_prefix="p")
        for i, h in enumerate(job["hosts"])
    ]
    got = _plan(job, hosts)

    def plain(p: RunPlan) -> dict[str, object]:
        return {
            f.name: getattr(p, f.name)
            for f in dataclasses.fields(p)
            if f.name not in ("arms", "arm_factory")
        }

    assert plain(got) == plain(sent)
    assert [a.name for a in got.arms] == ["A", "B"]
    assert got.arms[0].warm_path == "/warm" and got.arms[0].metrics_path == "/metrics"
    arm = got.new_arm(got.arms[1], 1, log_name="t0b0a1-B", label="B")
    assert arm.cpus == (4, 5)


def test_the_engine_spins_unless_it_shares_a_cpu_with_a_host_of_this_machine() -> None:
    assert engine_shares_a_host(["127.0.0.2", "127.0.0.3"], [(0,), (1,)], (0, 1))
    assert not engine_shares_a_host(["127.0.0.2", "127.0.0.3"], [(2,), (3,)], (0, 1))
    # Another machine's CPU 0 is not this one's.
    assert not engine_shares_a_host(["192.0.2.77", "192.0.2.78"], [(0,), (1,)], (0, 1))


def test_the_head_is_probed_on_its_port() -> None:
    """False failure: about 1e-6: a connect to a listening loopback socket succeeds at once, and one
    to a closed port is refused at once, well within the 0.5 s timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert head_reachable(f"127.0.0.1:{port}")
    assert not head_reachable(f"127.0.0.1:{port}", timeout_s=0.5)
    assert not head_reachable("no-port-here")


def test_a_drivers_user_error_is_raised_here_as_the_same_kind() -> None:
    err = _error({"type": "ArmFailed", "message": "arm A: /healthz never 2xx", "hint": "log"})
    assert isinstance(err, ArmFailed) and err.hint == "log"
    for odd in ("KeyboardInterrupt", "Path", None):
        assert type(_error({"type": odd, "message": "m"})) is HairlineError
