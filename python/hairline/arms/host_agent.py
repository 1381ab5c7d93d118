"""The node's half of the ray backend: :class:`HostAgent`, a Ray actor on a test machine
that holds the host's custom resource (``hairline_host_<name>: 1``, so there is one per
host at a time). It starts each arm there with :class:`~hairline.arms.local.LocalArm` (its
cgroup, its CPU set, its health check, its CPU and memory readings) bound to the node's
address, keeps shipped build artifacts by build key, and sweeps the cgroups a dead
processor left of its experiment before it starts anything. The driver's half, which
calls it, is arms/remote.py.

An actor whose driver stops calling it (the driver was killed, the head is gone) stops its
arms by itself after ``deadman_s``; one whose node's raylet died stops them and exits
within a second, so that the driver's calls fail at once.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hairline.arms.cgroup import cgroup_name, sweep
from hairline.arms.local import ArmSpec, LocalArm, free_port
from hairline.arms.node_profile import NodeProfiling
from hairline.arms.sandbox import ArmSandbox
from hairline.config import ArmConfig, ServiceConfig, start_command

__all__ = ["AGENT_HOME_VARIABLE", "ArmRecipe", "HostAgent", "pack_artifact", "ray_module"]

# Where a node keeps arm logs and shipped artifacts; the agent sets it for its node.
AGENT_HOME_VARIABLE = "HAIRLINE_AGENT_HOME"
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
        # The raylet that started this worker. When it dies (its node is gone) the actor
        # goes on answering the driver, worker to worker, until the head's health checks call
        # the node dead (about a minute here): batches went on starting arms on it.
        self._raylet_pid = os.getppid()
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
            if os.getppid() != self._raylet_pid:
                self._leave()
            with self._lock:
                silent = not self._busy and time.monotonic() - self._last_s > self._deadman_s
            if silent and self._arms:
                self.stop_all()
                sweep(self.prefix)

    def _leave(self) -> None:
        """Stop every arm and exit: this node's raylet died, so the driver's next call
        fails at once (the actor is gone) and the host is lost, instead of the batches
        going on here until Ray notices. The arms' cgroups go with them."""
        print(f"hairline: {self.name}'s raylet (pid {self._raylet_pid}) died; stopping "
              f"{len(self._arms)} arm(s) and leaving", file=sys.stderr, flush=True)  # fmt: skip
        with contextlib.suppress(Exception):
            self.stop_all()
        with contextlib.suppress(Exception):
            sweep(self.prefix)
        os._exit(1)

    def ready(self) -> dict[str, Any]:
        with self._call():
            node_id = ray_module().get_runtime_context().get_node_id()
            return {"pid": os.getpid(), "swept": self.swept, "home": str(self.home),
                    "node_id": node_id}  # fmt: skip

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


def ray_module() -> Any:
    """Ray, imported when first needed: the local backend never loads it."""
    import ray

    return ray
