"""Sampling an arm's stacks where its processes run: one :class:`~hairline.profile.perf.ArmPerf`
per arm and window, made by :func:`arm_perf` from ``[service.profile]``.

A local arm's window runs in the processor (lab/sampling.py). A Ray arm's runs on its
node: :class:`NodeProfiling` is the node's half (methods of the host's agent, so perf is
the agent's child: started on the arm's CPUs, reading the arm's cgroup there, killed with
the agent by its parent-death signal), :class:`NodeSampler` the processor's (the lab's
``StackSampler`` over the agent's calls). What comes back is the :class:`Sampled` itself;
the processor writes the folded stacks into its own runs folder, as for a local arm.

No perf outlives its window on the node: the processor kills it on every way out of a
batch; the agent kills an arm's perf when it stops the arm, and when its dead-man timer
stops every arm (the processor is gone); and a node that dies takes its agent's children
with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from hairline.arms.local import LocalArm
from hairline.config.profiling import ProfileConfig
from hairline.errors import HostLost
from hairline.profile.perf import ArmPerf, PerfSampler, Sampled

__all__ = ["NodeProfiling", "NodeSampler", "arm_perf"]

# perf stops within 30 s and `perf script` reads within 300 s (profile/perf.py): a stop
# that takes longer than both is a node that is not answering.
_STOP_TIMEOUT_S = 400.0


def arm_perf(
    config: ProfileConfig,
    *,
    cpus: Collection[int] | None,
    pids: Callable[[], Collection[int]],
    workdir: Path,
    name: str,
) -> ArmPerf:
    """One arm's window as ``config`` says: perf on the arm's ``cpus``, the samples of the
    processes ``pids`` lists at both ends, perf's data in ``workdir`` as ``name``."""
    perf = PerfSampler(
        frequency_hz=config.frequency_hz,
        call_graph=config.call_graph,
        stack_bytes=config.stack_bytes,
        cpus=cpus,
        workdir=workdir,
        name=name,
    )
    return ArmPerf(perf, pids)


class NodeProfiling:
    """The agent's sampling methods (a base of arms/host_agent.py's ``HostAgent``), each one
    actor call. The agent provides its arms, its runs folder and its call bookkeeping."""

    workdir: Path
    _arms: dict[int, LocalArm]
    # The agent's bookkeeping around every actor call (HostAgent._call).
    _call: Callable[[], contextlib.AbstractContextManager[None]]

    def __init__(self) -> None:
        self._sampling: dict[int, ArmPerf] = {}

    def start_sampling(self, arm_id: int, config: ProfileConfig, name: str) -> None:
        """Start perf on the arm's CPUs (just before the load)."""
        with self._call():
            self._kill_sampling(arm_id)  # a window a lost call left open: never two perfs
            arm = self._arms[arm_id]
            window = arm_perf(config, cpus=arm.cpus, pids=arm.pids, workdir=self.workdir,
                              name=name)  # fmt: skip
            self._sampling[arm_id] = window
            window.start()

    def interrupt_sampling(self, arm_id: int) -> None:
        """Close the arm's window (just after the load): its processes read, perf told to
        stop."""
        with self._call():
            window = self._sampling.get(arm_id)
            if window is not None:
                window.interrupt()

    def stop_sampling(self, arm_id: int) -> Sampled:
        """The arm's samples (``perf script`` runs here, on the node)."""
        with self._call():
            window = self._sampling.pop(arm_id, None)
            if window is None:
                return Sampled(None, 0, 0, "perf was not started")
            return window.stop()

    def kill_sampling(self, arm_id: int) -> None:
        """Stop the arm's perf without reading it (the batch failed)."""
        with self._call():
            self._kill_sampling(arm_id)

    def _kill_sampling(self, arm_id: int) -> None:
        window = self._sampling.pop(arm_id, None)
        if window is not None:
            window.kill()


class NodeSampler:
    """The processor's handle on one arm's window on its node (the lab's
    ``StackSampler``). ``call`` is the host's actor call (``RemoteHost.call``); a lost
    node raises :class:`HostLost` from every method but :meth:`kill`."""

    def __init__(
        self,
        call: Callable[..., Any],
        *,
        host: str,
        arm_id: int,
        config: ProfileConfig,
        name: str,
    ) -> None:
        self._call = call
        self._host = host
        self._arm_id = arm_id
        self._config = config
        self._name = name
        self._started = False

    def start(self) -> None:
        self._started = True
        self._call("start_sampling", self._arm_id, self._config, self._name)

    def interrupt(self) -> None:
        self._call("interrupt_sampling", self._arm_id)

    def stop(self) -> Sampled:
        """What the node sampled, marked with the host (a reason says where it applies:
        perf is the node's, not the processor's)."""
        got: Sampled = self._call("stop_sampling", self._arm_id, timeout_s=_STOP_TIMEOUT_S)
        reason = f"on {self._host}: {got.reason}" if got.reason else ""
        return dataclasses.replace(got, reason=reason, host=self._host)

    def kill(self) -> None:
        """On a lost node there is nothing to kill: its perfs went with its agent."""
        if self._started:
            with contextlib.suppress(HostLost):
                self._call("kill_sampling", self._arm_id)
