"""The local backend: an arm is a cgroup of this machine pinned to its own CPU set.

Every arm runs in its own cgroup (:mod:`hairline.arms.cgroup`), joined before exec, so that
whatever it starts, daemons that call ``setsid`` included, is counted in its CPU and memory
and killed with it. Where no cgroup can be made it falls back to its process group and
procfs counters, and says so (:attr:`LocalArm.measured_by`, :attr:`LocalArm.fallback`).
:class:`LocalArm` is a context manager and stops the arm on every exit path, so no process
outlives the experiment.

An arm with ``isolation`` runs in a network namespace of its own
(:mod:`hairline.arms.isolation`): made, with its relays, before the service starts, entered
by the child before exec, and removed after the service stopped, on every path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from hairline.arms.cgroup import ArmCgroup, create_cgroup, remove_named
from hairline.arms.isolation import ArmIsolation
from hairline.arms.sandbox import ArmSandbox, sandbox_env, sandboxed_command
from hairline.collect.procfs import (
    anon_memory_bytes,
    cpu_time_with_exited_ns,
    process_tree,
    started_ticks,
)
from hairline.config.isolation import IsolationConfig
from hairline.errors import ArmFailed
from hairline.kit.ports import free_port
from hairline.kit.procs import child_setup

__all__ = ["ArmSpec", "LocalArm", "free_port", "wait_http_ok"]


@dataclass(frozen=True)
class ArmSpec:
    """How to run one arm: a command (already split into words), where it answers health."""

    name: str
    command: Sequence[str]
    health_path: str = "/healthz"
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    # A submitted experiment's arm runs in a sandbox (arms/sandbox.py); None: the owner's.
    sandbox: ArmSandbox | None = None


def wait_http_ok(
    url: str,
    *,
    timeout_s: float,
    alive: Callable[[], bool] = lambda: True,
    interval_s: float = 0.05,
) -> None:
    """Poll ``url`` until it answers 2xx; raise :class:`ArmFailed` on timeout or death."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if not alive():
            raise ArmFailed(f"{url}: the process exited before it became healthy")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                if 200 <= response.status < 300:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            last = str(getattr(err, "reason", err))
        time.sleep(interval_s)
    hint = "check the arm's log; raise the health timeout if the service starts slowly"
    if urllib.parse.urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        # A test machine's address (the ray backend): a service that listens on 127.0.0.1
        # never answers here, however long it is given.
        hint = ("check that the start command listens on {host} (a service on 127.0.0.1 "
                "does not answer at the machine's address; `hairline run --check --backend "
                "ray` finds such a command), then the arm's log; raise the health timeout if "
                "the service starts slowly")  # fmt: skip
    raise ArmFailed(f"{url} did not answer 2xx within {timeout_s:g} s (last: {last})", hint=hint)


class LocalArm:
    """A running arm. Use as a context manager; ``stop()`` is idempotent."""

    def __init__(
        self,
        spec: ArmSpec | Callable[[str], ArmSpec],
        *,
        port: int,
        cpus: Sequence[int] | None = None,
        log_path: Path | None = None,
        cgroup: str | None = None,
        host: str = "127.0.0.1",
        isolation: IsolationConfig | None = None,
        workdir: Path | None = None,
    ) -> None:
        # A spec may depend on the address the service binds ({host}), which an isolated
        # arm knows only once its namespace exists.
        if isinstance(spec, ArmSpec):
            fixed = spec
            self._spec_for: Callable[[str], ArmSpec] = lambda _host: fixed
        else:
            self._spec_for = spec
        self.spec = self._spec_for(host)
        self.port = port
        self.cpus = tuple(cpus) if cpus else None
        self.log_path = log_path
        # Where the service answers: loopback locally; a Ray node's address remotely (the
        # start command binds it through the {host} placeholder).
        self.url = f"http://{host}:{port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._cgroup_name = cgroup
        self.cgroup: ArmCgroup | None = None
        # Why the arm runs without a cgroup, when it was asked for one ("" when it has one).
        self.fallback = ""
        self.isolation: ArmIsolation | None = None
        if isolation is not None:
            name = cgroup or f"hl-{self.spec.name}-{port}"
            where = workdir or (log_path.parent if log_path else Path.cwd())
            self.isolation = ArmIsolation(name, isolation, port=port, workdir=where)

    def isolation_report(self) -> dict[str, object]:
        """Refused connections per destination and what the relays carried ({} when the
        arm is not isolated); the last reading once the arm stopped."""
        return self.isolation.report() if self.isolation is not None else {}

    @property
    def measured_by(self) -> str:
        """Where CPU and memory come from: the cgroup, or the procfs fallback."""
        if self.cgroup is not None:
            return self.cgroup.source
        return "procfs (process tree; exited threads counted in 10 ms ticks)"

    @property
    def memory_fallback(self) -> str:
        """Why the arm's memory comes from procfs though it has a cgroup ("" when it does
        not): the memory controller could not be had there (``ArmCgroup.memory_fallback``)."""
        return self.cgroup.memory_fallback if self.cgroup is not None else ""

    def cpu_ns(self) -> int:
        """CPU time the arm used since it started, exited threads and children included."""
        if self.cgroup is not None:
            return self.cgroup.cpu_ns()
        return cpu_time_with_exited_ns(process_tree(self.pid)) if self._proc else 0

    def anon_memory_bytes(self) -> int:
        """Anonymous memory the arm holds now."""
        if self.cgroup is not None:
            held = self.cgroup.anon_memory_bytes()
            return held if held is not None else anon_memory_bytes(self.cgroup.pids())
        return anon_memory_bytes(process_tree(self.pid)) if self._proc else 0

    def peak_memory_bytes(self) -> int | None:
        return self.cgroup.peak_memory_bytes() if self.cgroup is not None else None

    def pids(self) -> list[int]:
        """Every process of the arm now: its cgroup's, or without one its process tree."""
        if self.cgroup is not None:
            return self.cgroup.pids()
        return process_tree(self.pid) if self._proc else []

    def raise_if_host_lost(self) -> None:
        """Nothing to do: this machine is the host (the runner asks every arm while the
        engine runs; a Ray arm's host can die under it)."""

    def running(self) -> bool:
        """Whether anything of the arm still runs: its cgroup is not empty (a service that
        daemonises leaves its leader behind), or without a cgroup its leader lives."""
        if self.cgroup is not None:
            return bool(self.cgroup.pids())
        return self.alive()

    def main_process(self) -> tuple[int, int] | None:
        """The arm's main process as (pid, start time in clock ticks since boot): the start
        command's process while it lives, else (a service that daemonised) the oldest process
        left in the arm; None when nothing of it runs. Another answer later in a batch means
        the service restarted: its main process ended and a process it left, or a new one,
        serves now, which ``running`` alone cannot tell from a sound arm."""
        if self._proc is None:
            return None
        if self.alive() and (started := started_ticks(self._proc.pid)) is not None:
            return self._proc.pid, started
        left = [(t, p) for p in self.pids() if (t := started_ticks(p)) is not None]
        if not left:
            return None
        started, pid = min(left)
        return pid, started

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("arm not started")
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, *, health_timeout_s: float = 30.0) -> LocalArm:
        cpus = self.cpus
        netns: str | None = None
        if self.isolation is not None:
            try:
                self.isolation.start()
            except BaseException:
                self.stop()
                raise
            netns = str(self.isolation.netns_path)
            self.spec = self._spec_for(self.isolation.address)
            self.url = f"http://{self.isolation.address}:{self.port}"
        if self._cgroup_name is not None:
            self.cgroup, self.fallback = create_cgroup(self._cgroup_name)
        join = self.cgroup.procs_files if self.cgroup is not None else ()
        try:
            command, env = self._command()
        except BaseException:
            self.stop()
            raise
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115

        try:
            self._proc = subprocess.Popen(
                command,
                cwd=self.spec.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Pinned before exec, so the service never runs off its CPU set.
                preexec_fn=child_setup(cpus, join=join, netns=netns),
            )
        except subprocess.SubprocessError as err:
            self.stop()
            raise ArmFailed(
                f"arm {self.spec.name}: could not join its cgroup or CPU set before exec: {err}",
                hint="set HAIRLINE_CGROUP=none to run without cgroups (CPU then comes from "
                "procfs), or run hairline as a user that may write the cgroup",
            ) from err
        except OSError as err:
            self.stop()
            raise ArmFailed(
                f"arm {self.spec.name}: cannot start {self.spec.command[0]!r}: {err}",
                hint="check the start command in the service file",
            ) from err
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # type: ignore[union-attr]
        try:
            wait_http_ok(
                self.url + self.spec.health_path, timeout_s=health_timeout_s, alive=self.running
            )
        except ArmFailed as err:
            self.stop()
            raise ArmFailed(
                f"arm {self.spec.name}: {err.message}" + self._log_tail(), hint=err.hint
            ) from None
        return self

    def _command(self) -> tuple[list[str], dict[str, str]]:
        """The arm's command line and environment: as written, or for a sandboxed arm
        inside bubblewrap, under its cgroup's limits, with none of the processor's secrets."""
        sandbox = self.spec.sandbox
        if sandbox is None:
            return list(self.spec.command), {**os.environ, **self.spec.env}
        if self.cgroup is None:
            raise ArmFailed(
                f"arm {self.spec.name}: a submitted experiment's arm runs with a process and "
                f"memory limit, and it has no cgroup here ({self.fallback or 'none asked'})",
                hint="run the processor as root on a machine with cgroup v2 (or v1's pids and "
                "memory hierarchies mounted), without HAIRLINE_CGROUP=none",
            )
        problems = self.cgroup.limit(pids_max=sandbox.pids_max, memory_bytes=sandbox.memory_bytes)
        if problems:
            raise ArmFailed(
                f"arm {self.spec.name}: its process and memory limits could not be set: "
                + "; ".join(problems),
                hint="run the processor as root on a machine with the pids and memory cgroup "
                "controllers",
            )
        env = sandbox_env(os.environ, self.spec.env)
        return sandboxed_command(sandbox, self.spec.command, self.spec.cwd, env), env

    def _log_tail(self, lines: int = 5) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return ("\n  log: " + "\n  log: ".join(tail)) if tail else ""

    def stop(self, *, grace_s: float = 5.0) -> None:
        """SIGTERM the arm (its cgroup, else its process group), SIGKILL what is left after
        ``grace_s``, and remove the cgroup, then the arm's namespace and relays."""
        proc, group = self._proc, self.cgroup
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        if group is not None:
            for pid in group.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
        deadline = time.monotonic() + grace_s
        while group is not None and group.pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        # Children that ignored SIGTERM, or outlived a leader that exited, go too.
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        if group is not None:
            group.kill()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
        if group is not None:
            group.remove()
        elif self._cgroup_name is not None and self._proc is None:
            # Stopped before create_cgroup returned (Ctrl-C in start): what it made, if
            # anything, is found by name. Two such cgroups were left in full suite runs.
            remove_named(self._cgroup_name)
        if self.isolation is not None:
            self.isolation.stop()

    def __enter__(self) -> LocalArm:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
