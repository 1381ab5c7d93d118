"""The ray backend's driver: a child process of the processor that holds the Ray client and
runs an experiment's trials' batches (and the calibration) with the arms on their hosts'
nodes.

``python -m hairline.lab.driver EVENTS_FD``: reads job files (what :mod:`hairline.lab.remote`
wrote), one path a line, from standard input and does each in turn; events go to the
inherited pipe ``EVENTS_FD`` as JSON lines (``connected``, then for each job
``progress``, ``arm_started``, ``arms_stopped``, ``phase``, and exactly one of ``done``,
``left_out``, ``host_lost``, ``head_lost``, ``error``; ``alive`` every few seconds
throughout). After a job that did not end ``done`` or ``left_out``, or at the end of its
input, it closes its actors and exits. The actors are opened by the first job and kept
for the next: a new driver per trial cost 5.4 s between trials on this project's VM
(Python, Ray's client, an actor's worker process on each node), as long as a trial of two
2 s batches. Ray's own chatter goes to stdout and stderr, which the processor keeps as the
driver's log. The batches are the local runner's (:func:`~hairline.lab.runner.run_trial`),
with arms made by :class:`~hairline.arms.remote.RemoteArm`; the engine runs here, where
the processor runs, and replays to the arms' node addresses. SIGTERM stops the arms
through their actors, as Ctrl-C stops local ones.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import IO, Any

import pyarrow.parquet as pq

from hairline.arms.host_agent import ArmRecipe
from hairline.arms.remote import HostLost, RemoteArm, RemoteHost
from hairline.collect.summary import CPU_PER_REQUEST
from hairline.config import ExperimentConfig
from hairline.errors import HairlineError
from hairline.lab.calibrate import calibrate
from hairline.lab.rate_choice import AA_STEPS
from hairline.lab.runner import Arm, ArmDef, Hooks, RunPlan, TrialLeftOut, run_trial
from hairline.lab.schedule import Batch

__all__ = ["main"]

_ALIVE_INTERVAL_S = 2.0
_TOKEN_HINT = (
    "give the processor the cluster's token: RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH naming "
    "a file only you can read"
)


class _Events:
    """JSON lines to the processor, whole lines only, from any thread."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def __call__(self, kind: str, **data: Any) -> None:
        line = json.dumps({"kind": kind, **data}, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def _batch(b: Batch) -> dict[str, Any]:
    return {"trial": b.trial, "batch": b.batch, "arm_on_host": list(b.arm_on_host)}


def _no_local_spec(port: int, cpus: tuple[int, ...]) -> Any:
    raise RuntimeError("a remote arm's command is made on its node")


def _plan(job: Mapping[str, Any], hosts: list[RemoteHost]) -> RunPlan:
    """The runner's plan, with arms that start on the hosts' nodes."""
    config = ExperimentConfig.model_validate(job["config"])
    artifacts: dict[str, list[str]] = job["artifacts"]
    recipes = {
        name: ArmRecipe(
            name=name,
            service=config.service,
            arm=config.arms[name],
            artifact_key=artifacts[name][1] if name in artifacts else None,
            sandboxed=bool(job.get("sandboxed", False)),
        )
        for name in job["arm_names"]
    }
    # Each build shipped to each node once (the node keeps it by build key).
    on_node = [
        {name: host.artifact(key, Path(path)) for name, (path, key) in artifacts.items()}
        for host in hosts
    ]

    def make(plan: RunPlan, arm: ArmDef, host: int, *, log_name: str, label: str) -> Arm:
        return RemoteArm(
            hosts[host],
            recipes[arm.name],
            artifact=on_node[host].get(arm.name, ""),
            log_path=plan.workdir / f"{log_name}.log",
            label=label,
        )

    fields = dict(job["plan"])
    return RunPlan(
        arms=tuple(
            ArmDef(
                name=name,
                spec=_no_local_spec,
                warm_path=config.service.warm,
                metrics_path=config.service.metrics_path,
            )
            for name in job["arm_names"]
        ),
        hosts=tuple(tuple(h["cpus"]) for h in job["hosts"]),
        trace=Path(fields.pop("trace")),
        workdir=Path(fields.pop("workdir")),
        counters=tuple(fields.pop("counters")),
        collect=tuple(fields.pop("collect", ())),
        engine_cpus=tuple(c) if (c := fields.pop("engine_cpus")) else None,
        # Shipped as JSON text: the service file's table is the typed original.
        profile=config.service.profile if fields.pop("profile", None) is not None else None,
        arm_factory=make,
        **{k: v for k, v in fields.items() if k != "hosts"},
    )


def _open_hosts(job: Mapping[str, Any], ray: Any) -> list[RemoteHost]:
    """One actor per host, each on its own node; a host whose node is not in the cluster
    is lost at once (its actor would wait for the resource forever)."""
    alive = {
        resource
        for node in ray.nodes()
        if node.get("Alive")
        for resource in node.get("Resources", {})
    }
    hosts = []
    for index, h in enumerate(job["hosts"]):
        if h["resource"] not in alive:
            raise HostLost(
                index, h["name"], "its Ray node is not in the cluster (agent stopped or "
                "machine down)"
            )  # fmt: skip
        hosts.append(
            RemoteHost(
                index,
                h["name"],
                h["address"],
                h["resource"],
                tuple(h["cpus"]),
                cgroup_prefix=job["plan"]["cgroup_prefix"],
                deadman_s=float(job["deadman_s"]),
            )
        )
    try:
        for host in hosts:
            host.open(timeout_s=float(job["actor_timeout_s"]))
    except BaseException:
        for host in hosts:
            host.close()
        raise
    return hosts


class _Hosts:
    """The actors, opened by the first job and kept for the next ones (every job of a
    driver is of one experiment, on one allocation)."""

    def __init__(self) -> None:
        self.open: list[RemoteHost] = []

    def for_job(self, job: Mapping[str, Any], ray: Any, emit: _Events) -> list[RemoteHost]:
        names = [h["name"] for h in job["hosts"]]
        if self.open and [h.name for h in self.open] != names:
            raise HairlineError(f"one driver, one allocation: {names} after "
                                f"{[h.name for h in self.open]}")  # fmt: skip
        if not self.open:
            self.open = _open_hosts(job, ray)
            for host in self.open:
                if host.swept:
                    emit("phase", text=f"stopped what was left on {host.name}: {host.swept}")
        return self.open

    def close(self) -> None:
        for host in self.open:
            host.close()
        self.open = []


def _run(job: Mapping[str, Any], emit: _Events, ray: Any, kept: _Hosts) -> dict[str, Any]:
    """Do the job; the last event's data."""
    try:
        hosts = kept.for_job(job, ray, emit)
        plan = _plan(job, hosts)
        if job["mode"] == "calibrate":
            result = calibrate(
                plan,
                plan.arms[0],
                target_utilization=(
                    None if job["target_utilization"] is None else float(job["target_utilization"])
                ),
                decide_on=tuple(job.get("decide_on") or (CPU_PER_REQUEST.name,)),
                start_rate_per_s=float(job["start_rate_per_s"]),
                aa_steps=int(job.get("aa_steps") or AA_STEPS),
                progress=lambda line: emit("phase", text=line),
            )
            return {"kind": "done", "calibration": result.as_dict()}
        batches = [Batch(b["trial"], b["batch"], tuple(b["arm_on_host"])) for b in job["batches"]]
        table = run_trial(
            plan,
            batches,
            Hooks(
                progress=lambda b, text: emit("progress", batch=_batch(b), text=text),
                arm_started=lambda b, arm, host, pid, port: emit(
                    "arm_started", batch=_batch(b), arm=arm, host=host, pid=pid, port=port
                ),
                arms_stopped=lambda b: emit("arms_stopped", batch=_batch(b)),
            ),
        )
        pq.write_table(table, job["output"])
        return {"kind": "done"}
    except HostLost as err:
        return {"kind": "host_lost", "host": err.index, "name": err.name, "reason": err.reason}
    except TrialLeftOut as err:
        return {"kind": "left_out", "message": err.message}
    except HairlineError as err:
        return {"kind": "error", "type": type(err).__name__, "message": err.message,
                "hint": err.hint}  # fmt: skip


# The jobs after which the driver takes the next one; after any other end it exits.
_GOES_ON = ("done", "left_out")


def _serve(emit: _Events, ray: Any, jobs: IO[str]) -> None:
    """Do each job read from ``jobs`` until its end or a job that ends the driver; every
    actor is gone before the last event of a job that ends it is said."""
    kept = _Hosts()
    try:
        for line in jobs:
            job = json.loads(Path(line.strip()).read_text())
            last = _run(job, emit, ray, kept)
            if last["kind"] not in _GOES_ON:
                kept.close()
                emit(**last)
                return
            emit(**last)
    finally:
        kept.close()


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    address, events_fd = argv if argv is not None else sys.argv[1:]
    emit = _Events(open(int(events_fd), "w", buffering=1))  # noqa: SIM115 (lives as long as we do)
    import ray

    # A client without the cluster's token retries for ever (Ray 2.60 logs "InvalidAuthToken"
    # once a second and never raises): the processor gives up when "connected" is late.
    try:
        ray.init(
            address=address, namespace="hairline", logging_level=logging.ERROR,
            log_to_driver=False,
        )  # fmt: skip
    except ray.exceptions.AuthenticationError as err:
        emit("error", type="ConfigError", message=f"the Ray head refused the token: {err}",
             hint=_TOKEN_HINT)  # fmt: skip
        return 2
    except Exception as err:
        emit("head_lost", reason=f"cannot connect to {address}: {err}")
        return 3
    # After ray.init, which installs a SIGTERM handler of its own that exits at once: ours
    # lets the batch's context managers stop the arms through their actors.
    signal.signal(signal.SIGTERM, _interrupt)
    emit("connected")
    stop_alive = threading.Event()

    def alive() -> None:
        while not stop_alive.wait(_ALIVE_INTERVAL_S):
            emit("alive")

    threading.Thread(target=alive, daemon=True).start()
    try:
        _serve(emit, ray, sys.stdin)
    except KeyboardInterrupt:
        # Stopped (SIGTERM, Ctrl-C), its arms and actors already stopped by _serve: leave
        # without Ray's exit handlers. Their shutdown waits on the head, and when the head
        # is what died, the processor waited 6 s for this exit (2026-11-29: the driver
        # returned 0.05 s after the SIGTERM and its process ended 6 s later). The
        # heartbeat thread ends with the process.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    finally:
        stop_alive.set()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
