"""The driver's half of the ray backend: :class:`RemoteHost` and :class:`RemoteArm`, the
arm protocol the lab's runner speaks, over calls with timeouts to the
:class:`~hairline.arms.host_agent.HostAgent` actor placed on exactly that host.

Failures: the actors are created with ``max_restarts=0`` and called with
``max_task_retries=0``, so Ray never re-runs anything behind hairline's back (with
retries it silently re-ran work on a node that came back). A dead node, a dead actor or a
call that does not return in time raise :class:`HostLost`, a control-flow exception
(not a :class:`~hairline.errors.HairlineError`): the lab marks the host unhealthy and
runs the trial again on other hosts. A node is found dead by its raylet's port refusing
connections, every 2 s: the head's own health checks take about a minute.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from hairline.arms.host_agent import ArmRecipe, HostAgent, pack_artifact, ray_module
from hairline.arms.node_profile import NodeSampler
from hairline.config.profiling import ProfileConfig
from hairline.errors import HairlineError, HostLost

__all__ = ["HostLost", "RemoteArm", "RemoteHost", "raylet_address", "raylet_refuses"]

# A call answers within this unless it says otherwise (reading a cgroup is microseconds).
_CALL_TIMEOUT_S = 20.0
_PING_INTERVAL_S = 2.0
# How often a call waiting on its node looks whether the pinger found the node gone.
_LOST_CHECK_S = 0.25


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
        self._raylet: tuple[str, int] | None = None
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
        ray = ray_module()
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
        self._raylet = raylet_address(ray.nodes(), info.get("node_id"))
        self._pinger.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._actor is not None:
            with contextlib.suppress(Exception):
                ray_module().kill(self._actor, no_restart=True)

    def _ping(self) -> None:
        ray = ray_module()
        while not self._stop.wait(_PING_INTERVAL_S):
            # The node's raylet first, busy or not: a call in flight when the node died
            # waited for the head's health checks (about a minute here) before it failed.
            if self._raylet is not None and (gone := raylet_refuses(*self._raylet)):
                self._lost = gone
                return
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

    def raise_if_lost(self) -> None:
        if self._lost is not None:
            raise HostLost(self.index, self.name, self._lost)

    def call(self, method: str, *args: Any, timeout_s: float = _CALL_TIMEOUT_S) -> Any:
        """``method(*args)`` on the actor; its :class:`HairlineError` re-raised as is."""
        ray = ray_module()
        self.raise_if_lost()
        with self._lock:
            self._in_flight += 1
        try:
            pending = getattr(self._actor, method).remote(*args)
            deadline = time.monotonic() + timeout_s
            # In slices, so that a node the pinger found gone ends the wait at once.
            while not ray.wait([pending], timeout=min(_LOST_CHECK_S, timeout_s))[0]:
                self.raise_if_lost()
                if time.monotonic() >= deadline:
                    raise ray.exceptions.GetTimeoutError()
            return ray.get(pending)
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
                archive = ray_module().put(pack_artifact(local))
                found = self.call("put_artifact", key, archive, timeout_s=600.0)
            self._artifacts[key] = str(found)
        return self._artifacts[key]

    def new_arm_id(self) -> int:
        self._next_arm += 1
        return self._next_arm


def raylet_address(nodes: list[dict[str, Any]], node_id: str | None) -> tuple[str, int] | None:
    """Where the live node ``node_id``'s raylet listens, from ``ray.nodes()``; None when
    it is not listed (the pinger then only pings the actor)."""
    for node in nodes:
        if node.get("NodeID") == node_id and node.get("Alive"):
            return str(node["NodeManagerAddress"]), int(node["NodeManagerPort"])
    return None


def raylet_refuses(address: str, port: int, *, timeout_s: float = 1.0) -> str | None:
    """Why the node is gone when its raylet's port refuses connections (the machine
    answers, nothing listens there), else None: a slow or unreachable port is the calls'
    own timeouts to judge, not a death."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return f"its node's raylet ({address}:{port}) refuses connections: the node is gone"
    except OSError:
        return None


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

    def raise_if_host_lost(self) -> None:
        """:class:`HostLost` when the pinger found this arm's node gone; no call is made,
        so the runner asks it every quarter second while the engine runs."""
        self._host.raise_if_lost()

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
