"""The ray backend's arms: a :class:`~hairline.arms.local.LocalArm` on a test machine,
started and read through a Ray actor placed on exactly that host.

Two halves. :class:`HostAgent` runs on the test machine, as a Ray actor that holds the
host's custom resource (``hairline_host_<name>: 1``, so there is one per host at a time):
it starts each arm there with ``LocalArm`` (its cgroup, its CPU set, its health check,
its CPU and memory readings) bound to the node's address, keeps shipped build artifacts
by build key, and sweeps the cgroups a dead processor left of its experiment before it
starts anything. :class:`RemoteHost` and :class:`RemoteArm` are the driver's half: the
arm protocol the lab's runner speaks, over actor calls with timeouts.

Failures: the actors are created with ``max_restarts=0`` and called with
``max_task_retries=0``, so Ray never re-runs anything behind hairline's back (with
retries it silently re-ran work on a node that came back). A dead node, a dead actor or a
call that does not return in time raise :class:`HostLost`, a control-flow exception
(not a :class:`~hairline.errors.HairlineError`): the lab marks the host unhealthy and
runs the trial again on other hosts. An actor whose driver stops calling it (the driver
was killed, the head is gone) stops its arms by itself after ``deadman_s``.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from hairline.arms.cgroup import cgroup_name, sweep
from hairline.arms.local import ArmSpec, LocalArm, free_port
from hairline.arms.node_profile import NodeProfiling, NodeSampler
from hairline.arms.sandbox import ArmSandbox
from hairline.config import ArmConfig, ServiceConfig, start_command
from hairline.config.profiling import ProfileConfig
from hairline.errors import HairlineError, HostLost

__all__ = [
    "AGENT_HOME_VARIABLE",
    "ArmRecipe",
    "HostAgent",
    "HostLost",
    "RemoteArm",
    "RemoteHost",
    "pack_artifact",
]

# Where a node keeps arm logs and shipped artifacts; the agent sets it for its node.
AGENT_HOME_VARIABLE = "HAIRLINE_AGENT_HOME"
# A call answers within this unless it says otherwise (reading a cgroup is microseconds).
_CALL_TIMEOUT_S = 20.0
_PING_INTERVAL_S = 2.0
# The most of an arm's log brought back to the processor's runs folder.
_LOG_TAIL_BYTES = 256 * 1024


@dataclass(frozen=True)
class ArmRecipe:
    """What a node needs to start an arm: the service and arm as configured (the start
    command is filled in on the node, where ``{engine}``, ``{artifact}``, ``{workdir}`` and
    ``{host}`` have their node's values) and the build key of its artifact, if any."""

    name: str
    service: ServiceConfig
    arm: ArmConfig
    artifact_key: str | None = None
    # An API submission's arm: run in the sandbox of arms/sandbox.py.
    sandboxed: bool = False


def pack_artifact(path: Path) -> bytes:
    """A build artifact (a file or a folder) as a tar archive, executable bits kept."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(path), arcname=path.name)
    return buffer.getvalue()


def _agent_home() -> Path:
    configured = os.environ.get(AGENT_HOME_VARIABLE)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "hairline-agent"


class HostAgent(NodeProfiling):
    """The actor on a test machine (see the module's doc). Its methods run one at a time on
    the worker's main thread: an arm, or an arm's perf (:class:`NodeProfiling`), started
    from it is killed with it (parent-death signal), as a pool's thread would not ensure."""

    def __init__(
        self,
        name: str,
        address: str,
        cpus: tuple[int, ...],
        cgroup_prefix: str,
        deadman_s: float = 30.0,
    ) -> None:
        self.name = name
        self.address = address
        self.cpus = cpus
        self.prefix = cgroup_prefix
        self.home = _agent_home()
        self.workdir = self.home / "runs" / cgroup_prefix.rstrip("-")
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Whatever a processor that died left of this experiment on this machine: arms in
        # its cgroups (daemons included) go before anything of this driver starts.
        self.swept = sweep(cgroup_prefix)
        super().__init__()
        self._arms: dict[int, LocalArm] = {}
        self._lock = threading.Lock()
        self._busy = 0
        self._last_s = time.monotonic()
        self._deadman_s = deadman_s
        threading.Thread(target=self._deadman, name="deadman", daemon=True).start()

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        with self._lock:
            self._busy += 1
            self._last_s = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                self._last_s = time.monotonic()

    def _deadman(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                silent = not self._busy and time.monotonic() - self._last_s > self._deadman_s
            if silent and self._arms:
                self.stop_all()
                sweep(self.prefix)

    def ready(self) -> dict[str, Any]:
        with self._call():
            return {"pid": os.getpid(), "swept": self.swept, "home": str(self.home)}

    def ping(self) -> None:
        with self._call():
            return None

    def artifact(self, key: str) -> str | None:
        """The node's copy of the artifact ``key``, if it has one."""
        with self._call():
            folder = self.home / "artifacts" / key
            entries = list(folder.iterdir()) if folder.is_dir() else []
            return str(entries[0]) if len(entries) == 1 else None

    def put_artifact(self, key: str, archive: bytes) -> str:
        """Unpack a shipped artifact into the cache, whole or not at all."""
        with self._call():
            cache = self.home / "artifacts"
            cache.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=cache))
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(staging, filter="tar")
            final = cache / key
            try:
                staging.rename(final)
            except OSError:  # another driver put the same key meanwhile: keep theirs
                shutil.rmtree(staging, ignore_errors=True)
            [entry] = list(final.iterdir())
            return str(entry)

    def start_arm(
        self,
        arm_id: int,
        recipe: ArmRecipe,
        artifact: str,
        log_name: str,
        label: str,
        health_timeout_s: float,
    ) -> dict[str, Any]:
        """Start an arm on this host and wait for its health check; what the driver needs
        to know of it. An arm that does not come up raises :class:`ArmFailed` as locally."""
        from hairline.engine import find_engine

        with self._call():
            port = free_port(self.address)
            arm_dir = self.workdir / f"{log_name}.d"
            arm_dir.mkdir(parents=True, exist_ok=True)
            words = start_command(
                recipe.service,
                recipe.arm,
                {
                    "port": str(port),
                    "host": self.address,
                    "artifact": artifact,
                    "cpus": ",".join(map(str, self.cpus)),
                    "engine": str(find_engine()),
                    "workdir": str(arm_dir),
                    "arm": recipe.name,
                },
            )
            root = Path(recipe.service.root)
            arm = LocalArm(
                ArmSpec(
                    name=recipe.name,
                    command=words,
                    health_path=recipe.service.health,
                    # The service file's folder is on the processor's machine; a start
                    # command that needs files there should use {artifact} instead.
                    cwd=root if root.is_dir() else arm_dir,
                    env={**recipe.service.env, **recipe.arm.env},
                    sandbox=_sandbox(recipe, arm_dir, root, artifact, str(find_engine())),
                ),
                port=port,
                cpus=self.cpus,
                log_path=self.workdir / f"{log_name}.log",
                cgroup=cgroup_name(self.prefix, label, port),
                host=self.address,
            )
            arm.start(health_timeout_s=health_timeout_s)
            self._arms[arm_id] = arm
            return {
                "port": port,
                "pid": arm.pid,
                "measured_by": arm.measured_by,
                "fallback": arm.fallback,
                "memory_fallback": arm.memory_fallback,
            }

    def cpu_ns(self, arm_id: int) -> int:
        with self._call():
            return self._arms[arm_id].cpu_ns()

    def anon_memory_bytes(self, arm_id: int) -> int:
        with self._call():
            return self._arms[arm_id].anon_memory_bytes()

    def peak_memory_bytes(self, arm_id: int) -> int | None:
        with self._call():
            return self._arms[arm_id].peak_memory_bytes()

    def running(self, arm_id: int) -> bool:
        with self._call():
            return self._arms[arm_id].running()

    def main_process(self, arm_id: int) -> tuple[int, int] | None:
        with self._call():
            return self._arms[arm_id].main_process()

    def stop_arm(self, arm_id: int) -> str:
        """Stop the arm (cgroup killed and removed); the tail of its log."""
        with self._call():
            self._kill_sampling(arm_id)
            arm = self._arms.pop(arm_id, None)
            if arm is None:
                return ""
            arm.stop()
            log = arm.log_path
            if log is None or not log.exists():
                return ""
            with log.open("rb") as f:
                f.seek(max(log.stat().st_size - _LOG_TAIL_BYTES, 0))
                return f.read().decode(errors="replace")

    def stop_all(self) -> None:
        for arm_id in list(self._arms):
            self._kill_sampling(arm_id)
            arm = self._arms.pop(arm_id, None)
            if arm is not None:
                arm.stop()


def _sandbox(
    recipe: ArmRecipe, arm_dir: Path, root: Path, artifact: str, engine: str
) -> ArmSandbox | None:
    """A submitted experiment's arm: its arm folder writable; the service file's folder, its
    artifact and the engine on this node read-only."""
    if not recipe.sandboxed:
        return None
    paths = (str(root), artifact, engine)
    readable = tuple(Path(p) for p in paths if p and Path(p).exists())
    return ArmSandbox(writable=(arm_dir,), readable=readable)


def _ray() -> Any:
    import ray

    return ray


class RemoteHost:
    """The driver's handle on one host's :class:`HostAgent`. ``index`` is the host's place
    in the batch; every failure of the node or the actor becomes :class:`HostLost`."""

    def __init__(
        self,
        index: int,
        name: str,
        address: str,
        resource: str,
        cpus: tuple[int, ...],
        *,
        cgroup_prefix: str,
        deadman_s: float = 30.0,
    ) -> None:
        self.index = index
        self.name = name
        self.address = address
        self.resource = resource
        self.cpus = cpus
        self._prefix = cgroup_prefix
        self._deadman_s = deadman_s
        self._actor: Any = None
        self._lost: str | None = None
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pinger = threading.Thread(target=self._ping, name=f"ping-{name}", daemon=True)
        self._artifacts: dict[str, str] = {}
        self._next_arm = 0
        self.swept: list[str] = []

    def open(self, *, timeout_s: float = 60.0) -> RemoteHost:
        """Place the actor on the host (waiting for the resource a dead driver's actor may
        still hold) and start pinging it."""
        ray = _ray()
        actor_class = ray.remote(HostAgent)
        self._actor = actor_class.options(
            resources={self.resource: 1},
            num_cpus=0,
            max_restarts=0,
            max_task_retries=0,
            max_concurrency=1,
        ).remote(self.name, self.address, self.cpus, self._prefix, self._deadman_s)
        info = self.call("ready", timeout_s=timeout_s)
        self.swept = list(info["swept"])
        self._pinger.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._actor is not None:
            with contextlib.suppress(Exception):
                _ray().kill(self._actor, no_restart=True)

    def _ping(self) -> None:
        ray = _ray()
        while not self._stop.wait(_PING_INTERVAL_S):
            with self._lock:
                idle = self._in_flight == 0
            if not idle:
                continue  # the actor runs one call at a time; the call in flight is news
            try:
                ray.get(self._actor.ping.remote(), timeout=_CALL_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                continue  # a slow node is the next real call's to judge
            except ray.exceptions.RayError as err:
                self._lost = _why(err)
                return

    def call(self, method: str, *args: Any, timeout_s: float = _CALL_TIMEOUT_S) -> Any:
        """``method(*args)`` on the actor; its :class:`HairlineError` re-raised as is."""
        ray = _ray()
        if self._lost is not None:
            raise HostLost(self.index, self.name, self._lost)
        with self._lock:
            self._in_flight += 1
        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=timeout_s)
        except ray.exceptions.RayTaskError as err:
            if isinstance(err.cause, HairlineError):
                raise err.cause from None
            raise
        except ray.exceptions.GetTimeoutError:
            self._lost = f"{method} did not answer within {timeout_s:g} s"
            raise HostLost(self.index, self.name, self._lost) from None
        except ray.exceptions.RayError as err:
            self._lost = _why(err)
            raise HostLost(self.index, self.name, self._lost) from None
        finally:
            with self._lock:
                self._in_flight -= 1

    def artifact(self, key: str, local: Path) -> str:
        """The node's path of a build artifact, shipped once per build key (the node keeps
        it; another experiment of the same build finds it there)."""
        if key not in self._artifacts:
            found = self.call("artifact", key)
            if found is None:
                archive = _ray().put(pack_artifact(local))
                found = self.call("put_artifact", key, archive, timeout_s=600.0)
            self._artifacts[key] = str(found)
        return self._artifacts[key]

    def new_arm_id(self) -> int:
        self._next_arm += 1
        return self._next_arm


def _why(err: Exception) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}"


class RemoteArm:
    """An arm on a Ray node, as the runner sees it (the runner's ``Arm`` protocol)."""

    def __init__(
        self,
        host: RemoteHost,
        recipe: ArmRecipe,
        *,
        artifact: str,
        log_path: Path,
        label: str,
    ) -> None:
        self._host = host
        self._recipe = recipe
        self._artifact = artifact
        self._log_path = log_path
        self._label = label
        self._id = host.new_arm_id()
        self._started = False
        self.port = 0
        self.pid = 0
        self.url = ""
        self.cpus: tuple[int, ...] | None = host.cpus
        self.measured_by = ""
        self.fallback = ""
        self.memory_fallback = ""

    def start(self, *, health_timeout_s: float = 30.0) -> RemoteArm:
        self._started = True
        info = self._host.call(
            "start_arm", self._id, self._recipe, self._artifact, self._log_path.stem,
            self._label, health_timeout_s, timeout_s=health_timeout_s + _CALL_TIMEOUT_S,
        )  # fmt: skip
        self.port, self.pid = int(info["port"]), int(info["pid"])
        self.url = f"http://{self._host.address}:{self.port}"
        self.measured_by = f"{info['measured_by']} on {self._host.name}"
        self.fallback = str(info["fallback"])
        self.memory_fallback = str(info.get("memory_fallback", ""))
        return self

    def cpu_ns(self) -> int:
        return int(self._host.call("cpu_ns", self._id))

    def anon_memory_bytes(self) -> int:
        # Sampled on a thread of its own: a lost host is the main thread's to report.
        try:
            return int(self._host.call("anon_memory_bytes", self._id))
        except HostLost:
            return 0

    def peak_memory_bytes(self) -> int | None:
        peak = self._host.call("peak_memory_bytes", self._id)
        return None if peak is None else int(peak)

    def running(self) -> bool:
        return bool(self._host.call("running", self._id))

    def main_process(self) -> tuple[int, int] | None:
        """The arm's main process on its node (:meth:`LocalArm.main_process`)."""
        found = self._host.call("main_process", self._id)
        return None if found is None else (int(found[0]), int(found[1]))

    def pids(self) -> list[int]:
        """None here: a Ray arm's processes are sampled on its node (:meth:`stack_sampler`)."""
        return []

    def stack_sampler(self, config: ProfileConfig, name: str) -> NodeSampler:
        """The lab's ``SamplesOnItsNode``: sampled on the node by the host's agent."""
        return NodeSampler(self._host.call, host=self._host.name, arm_id=self._id,
                           config=config, name=name)  # fmt: skip

    def stop(self) -> None:
        """Stop the arm on its node and bring its log back; on a lost host there is
        nothing left to stop (its arms died with its actor)."""
        if not self._started:
            return
        self._started = False
        try:
            log = self._host.call("stop_arm", self._id, timeout_s=60.0)
        except HostLost:
            return
        if log:
            self._log_path.write_text(log)

    def __enter__(self) -> RemoteArm:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
