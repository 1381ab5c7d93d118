"""The ray backend, the processor's side: an experiment's trials (and the calibration) run
by a driver process (:mod:`hairline.lab.driver`) that holds the Ray client, watched from
here. One driver serves every trial of a :class:`RemoteDriver` (its actors on the hosts
stay up between trials); it is started with the first job and ends with the last, or at
the first job that does not end well.

Why a child process: when the Ray head dies, a Ray client blocks and its process is
killed about 60 s later (measured with Ray 2.60); the processor must instead fail the batch
within seconds, keep its lease and stop what runs on the nodes. So the processor never
imports Ray. It writes the driver a job file, reads its events (progress, arm started,
arms stopped, done) from a pipe and acts on them as the local runner's hooks, and kills it:

- on a lost lease, a cancel or Ctrl-C (SIGTERM first: the driver stops its arms through
  their actors; SIGKILL after a grace);
- when the head stops answering on its port (:class:`HeadUnreachable`);
- when the driver goes silent (no heartbeat) for ``silence_s``.

The driver dies with the processor (parent-death signal), and its actors and their arms
with it (Ray kills a dead driver's actors; each arm has its actor's parent-death signal).
Whatever is left is swept by the next driver's actors (cgroups by the experiment's
prefix) or stopped by an actor's dead-man timer.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from hairline import errors
from hairline.arms.remote import HostLost
from hairline.config import ExperimentConfig
from hairline.errors import ConfigError, HairlineError, HeadUnreachable
from hairline.hosts.agent import ray_environment, resource_name
from hairline.kit.procs import child_setup, stop_process
from hairline.lab.calibrate import Calibration, calibration_from_dict
from hairline.lab.runner import Hooks, RunPlan, TrialLeftOut
from hairline.lab.schedule import Batch

__all__ = [
    "HeadUnreachable",
    "RemoteDriver",
    "RemoteRun",
    "engine_shares_a_host",
    "head_reachable",
]

# Fields of RunPlan that are not plain data: the driver makes its own.
_NOT_SHIPPED = ("arms", "arm_factory")
# What the driver does after SIGTERM (stop its arms through their actors) takes this long
# at most; then SIGKILL, and the actors' own timers stop what is left.
_STOP_GRACE_S = 25.0
# A probe is a TCP connect to the head's port: on a dead head it is refused within a
# millisecond, so probing twice a second costs nothing and finds the head gone in about a
# second, not four (the dead-head test's processor gave up 10.4 s after the kill with
# probes 2 s apart). A port that drops packets makes each probe wait its 2 s timeout.
_HEAD_PROBE_INTERVAL_S = 0.5
# A driver that sent its last event only closes its actors and Ray's client.
_EXIT_GRACE_S = 15.0
# Consecutive failed probes of the head's port before the head counts as gone.
_HEAD_PROBE_FAILURES = 2


def head_reachable(address: str, *, timeout_s: float = 2.0) -> bool:
    """Whether something accepts connections at the head's GCS address ("host:port")."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _is_this_machine(address: str | None) -> bool:
    if address is None:
        return True
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(address).is_loopback:
            return True
    with contextlib.suppress(OSError):
        return address in {i[4][0] for i in socket.getaddrinfo(socket.gethostname(), None)}
    return False


def engine_shares_a_host(
    addresses: Sequence[str | None], hosts: Sequence[Sequence[int]], engine_cpus: Sequence[int]
) -> bool:
    """Whether the engine's CPUs are also some host's (a Ray node of this very machine, as
    in tests): then the engine must not spin while it paces."""
    return any(
        _is_this_machine(a) and set(cpus) & set(engine_cpus)
        for a, cpus in zip(addresses, hosts, strict=True)
    )


@dataclass(frozen=True)
class RemoteRun:
    """What a driver needs besides the plan: the cluster, the hosts, the experiment."""

    ray_address: str
    host_names: tuple[str, ...]
    addresses: tuple[str, ...]
    config: ExperimentConfig
    arm_names: tuple[str, ...]
    # arm -> (local artifact path, build key), for arms that have a build
    artifacts: Mapping[str, tuple[str, str]]
    # A submitted experiment's arms run sandboxed on their nodes (arms/sandbox.py).
    sandboxed: bool = False
    deadman_s: float = 30.0
    actor_timeout_s: float = 60.0
    silence_s: float = 60.0
    connect_timeout_s: float = 30.0

    def job(self, mode: str, plan: RunPlan, output: Path, **extra: Any) -> dict[str, Any]:
        plain = {f.name: getattr(plan, f.name) for f in fields(plan) if f.name not in _NOT_SHIPPED}
        return {
            "mode": mode,
            "ray_address": self.ray_address,
            "config": json.loads(self.config.model_dump_json()),
            "arm_names": list(self.arm_names),
            "artifacts": {k: list(v) for k, v in self.artifacts.items()},
            "sandboxed": self.sandboxed,
            "hosts": [
                {"name": n, "address": a, "resource": resource_name(n), "cpus": list(c)}
                for n, a, c in zip(self.host_names, self.addresses, plan.hosts, strict=True)
            ],
            "plan": json.loads(json.dumps(plain, default=str)),
            "deadman_s": self.deadman_s,
            "actor_timeout_s": self.actor_timeout_s,
            "output": str(output),
            **extra,
        }


class RemoteDriver:
    """The driver of one run of an experiment's trials on one allocation: started by the
    first job, fed one job after another, stopped by :meth:`close` (a context manager) or
    by a job that ends badly. Every method raises as the local runner would, and
    :class:`HostLost` or :class:`HeadUnreachable`."""

    def __init__(self, run: RemoteRun, workdir: Path, *, name: str = "driver") -> None:
        self._run = run
        self._workdir = workdir
        self._proc: subprocess.Popen[bytes] | None = None
        self._read_fd = -1
        # Drivers of one experiment's host pairs share its workdir: each its own log.
        self._log_path = workdir / f"{name}.log"
        self._connected = False
        self._pending = b""

    def __enter__(self) -> RemoteDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def trial(
        self, plan: RunPlan, batches: Sequence[Batch], hooks: Hooks, *, check: Callable[[], None]
    ) -> pa.Table:
        """One trial's batches, the hooks called here."""
        tag = f"t{batches[0].trial}"
        output = plan.workdir / f"driver-{tag}.parquet"
        job = self._run.job(
            "trial", plan, output,
            batches=[{"trial": b.trial, "batch": b.batch, "arm_on_host": list(b.arm_on_host)}
                     for b in batches],
        )  # fmt: skip

        def on_event(event: dict[str, Any]) -> None:
            kind = event["kind"]
            if kind == "progress" and hooks.progress:
                hooks.progress(_batch(event["batch"]), str(event["text"]))
            elif kind == "arm_started" and hooks.arm_started:
                hooks.arm_started(
                    _batch(event["batch"]), str(event["arm"]), int(event["host"]),
                    int(event["pid"]), int(event["port"]),
                )  # fmt: skip
            elif kind == "arms_stopped" and hooks.arms_stopped:
                hooks.arms_stopped(_batch(event["batch"]))

        self._job(job, tag, on_event=on_event, check=check)
        try:
            return pq.read_table(output)
        finally:
            output.unlink(missing_ok=True)

    def calibrate(
        self,
        plan: RunPlan,
        *,
        target_utilization: float | None,
        decide_on: Sequence[str],
        start_rate_per_s: float,
        aa_steps: int,
        progress: Callable[[str], None],
        check: Callable[[], None],
    ) -> Calibration:
        """:func:`~hairline.lab.calibrate.calibrate` of the baseline, on the hosts."""
        job = self._run.job(
            "calibrate", plan, plan.workdir / "driver-calibration.json",
            target_utilization=target_utilization, decide_on=list(decide_on),
            start_rate_per_s=start_rate_per_s, aa_steps=aa_steps,
        )  # fmt: skip

        def on_event(event: dict[str, Any]) -> None:
            if event["kind"] == "phase":
                progress(str(event["text"]))

        done = self._job(job, "calibration", on_event=on_event, check=check)
        return calibration_from_dict(done["calibration"])

    def close(self) -> None:
        """End the driver: the end of its input lets it close its actors and exit."""
        self._stop(finished=True)

    def _start(self) -> subprocess.Popen[bytes]:
        run = self._run
        if not head_reachable(run.ray_address):
            raise HeadUnreachable(f"nothing answers at {run.ray_address}")
        self._workdir.mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        with self._log_path.open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "hairline.lab.driver", run.ray_address, str(write_fd)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                env=ray_environment(), pass_fds=(write_fd,), preexec_fn=child_setup(),
            )  # fmt: skip
        os.close(write_fd)
        self._proc, self._read_fd = proc, read_fd
        self._connected, self._pending = False, b""
        return proc

    def _stop(self, *, finished: bool) -> None:
        """Let a driver that said its last word exit (the end of its input is its cue);
        SIGTERM one that did not (it stops its arms), and SIGKILL either after a grace."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if finished:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_EXIT_GRACE_S)
        stop_process(proc, grace_s=_STOP_GRACE_S, close_stdout=False)
        os.close(self._read_fd)

    def _job(
        self,
        job: dict[str, Any],
        tag: str,
        *,
        on_event: Callable[[dict[str, Any]], None],
        check: Callable[[], None],
    ) -> dict[str, Any]:
        """Run ``job`` on the driver (started if need be) to its end; its "done" event, or
        the exception its end stands for."""
        run = self._run
        proc = self._proc or self._start()
        job_path = self._workdir / f"driver-{tag}.json"
        job_path.write_text(json.dumps(job))
        final: dict[str, Any] | None = None
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(f"{job_path}\n".encode())
                proc.stdin.flush()
            except BrokenPipeError:
                pass  # it died: its end is read below
            final = self._follow(proc, on_event=on_event, check=check)
        finally:
            if final is None or final["kind"] not in ("done", "left_out"):
                self._stop(finished=final is not None)
        if final is None:
            if not head_reachable(run.ray_address):
                raise HeadUnreachable(f"the driver ended and nothing answers at {run.ray_address}")
            raise HairlineError(
                f"the Ray driver exited ({proc.returncode}) without a result; its log "
                f"{self._log_path}:{_log_tail(self._log_path)}",
                hint="check that the processor reaches the head and has the cluster's token",
            )
        kind = final["kind"]
        if kind == "done":
            return final
        if kind == "left_out":
            raise TrialLeftOut(str(final["message"]))
        if kind == "head_lost" or not head_reachable(run.ray_address):
            raise HeadUnreachable(str(final.get("reason", f"nothing answers at {run.ray_address}")))
        if kind == "host_lost":
            raise HostLost(int(final["host"]), str(final["name"]), str(final["reason"]))
        raise _error(final)

    def _follow(
        self,
        proc: subprocess.Popen[bytes],
        *,
        on_event: Callable[[dict[str, Any]], None],
        check: Callable[[], None],
    ) -> dict[str, Any] | None:
        """Relay the driver's events until the job's last one (or the driver's end);
        meanwhile keep checking the lease and the head."""
        run = self._run
        selector = selectors.DefaultSelector()
        selector.register(self._read_fd, selectors.EVENT_READ)
        started_s = heard_s = probed_s = time.monotonic()
        failed_probes = 0
        try:
            while True:
                check()
                now = time.monotonic()
                if not self._connected and now - started_s > run.connect_timeout_s:
                    raise _not_connected(run, self._log_path)
                if now - probed_s >= _HEAD_PROBE_INTERVAL_S:
                    probed_s = now
                    failed_probes = 0 if head_reachable(run.ray_address) else failed_probes + 1
                    if failed_probes >= _HEAD_PROBE_FAILURES:
                        raise HeadUnreachable(f"the head at {run.ray_address} stopped answering")
                if now - heard_s > run.silence_s:
                    raise HairlineError(
                        f"the Ray driver was silent for {run.silence_s:g} s",
                        hint="see the driver's log in the experiment's runs folder",
                    )
                if not selector.select(timeout=0.5):
                    continue
                chunk = os.read(self._read_fd, 65536)
                if not chunk:
                    proc.wait()
                    return None
                heard_s = time.monotonic()
                self._pending += chunk
                *lines, self._pending = self._pending.split(b"\n")
                for i, line in enumerate(lines):
                    event = json.loads(line)
                    if event["kind"] in ("done", "left_out", "host_lost", "head_lost", "error"):
                        # What follows can only be heartbeats (the next job is not sent
                        # yet): kept for the next read all the same.
                        self._pending = b"\n".join([*lines[i + 1 :], self._pending])
                        return dict(event)
                    self._connected = self._connected or event["kind"] == "connected"
                    if event["kind"] not in ("alive", "connected"):
                        on_event(event)
        finally:
            selector.close()


def _batch(data: Mapping[str, Any]) -> Batch:
    return Batch(int(data["trial"]), int(data["batch"]), tuple(data["arm_on_host"]))


def _error(event: Mapping[str, Any]) -> HairlineError:
    """The driver's user error, as the same kind of exception here."""
    kind = getattr(errors, str(event.get("type")), HairlineError)
    if not (isinstance(kind, type) and issubclass(kind, HairlineError)):
        kind = HairlineError
    return kind(str(event["message"]), hint=event.get("hint"))


def _log_tail(path: Path, lines: int = 6) -> str:
    with contextlib.suppress(OSError):
        tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
        return ("\n  " + "\n  ".join(tail)) if tail else ""
    return ""


def _not_connected(run: RemoteRun, log_path: Path) -> Exception:
    """Why a driver did not connect: the head refused its token (a user error), or the
    head is not up yet (wait for it)."""
    tail = _log_tail(log_path, lines=3)
    if "InvalidAuthToken" in tail or "Unauthenticated" in tail:
        return ConfigError(
            f"the Ray head at {run.ray_address} refused this processor's token:{tail}",
            hint="give the processor the cluster's token: RAY_AUTH_TOKEN, or "
            "RAY_AUTH_TOKEN_PATH naming a file only you can read (and RAY_AUTH_MODE=token)",
        )
    return HeadUnreachable(
        f"the driver could not connect to {run.ray_address} in {run.connect_timeout_s:g} s"
    )
