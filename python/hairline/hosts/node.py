"""A test machine's Ray node as processes: started, recorded, stopped, watched.

The node is ``ray start --block`` (:func:`hairline.hosts.agent.ray_start_command`) in a
session of its own: that process supervises the node's daemons (when one of them dies
with an error it kills the rest and exits 1), and stopping the node is signalling that one
session, never ``ray stop``, which stops every Ray node of the machine. What was started
is recorded in the agent's home (:class:`NodeState`) for ``hairline agent stop``.

Under a supervisor (systemd, a Kubernetes pod) the agent stays in the foreground
(``hairline agent start --foreground``): the node then dies with the agent, and
:func:`watch_node` waits on it and says when it stopped by itself, so that the agent
exits non-zero and is started again.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hairline.arms.host_agent import AGENT_HOME_VARIABLE
from hairline.errors import ConfigError, HairlineError
from hairline.hosts.agent import (
    AgentSpec,
    label_value,
    ray_binary,
    ray_environment,
    ray_start_command,
)
from hairline.hosts.facts import HostFacts

__all__ = [
    "NodeEnded",
    "NodeState",
    "StartedNode",
    "agent_of",
    "start_node",
    "stop_node",
    "watch_node",
]

_READY_LINE = "Ray runtime started."
# Every Ray node, head or worker, runs one raylet; without it the node is gone.
_RAYLET = "raylet"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class NodeState:
    """A started node, as recorded in the agent's home for ``hairline agent stop``."""

    name: str
    pid: int
    node_ip: str
    head_address: str
    hosts: list[str] = field(default_factory=list)
    log: str = ""
    # The pid of `hairline agent start --foreground` when it waits on the node; `agent
    # stop` then asks that process to leave, so that its supervisor sees a clean exit.
    agent_pid: int | None = None

    def save(self, home: Path) -> Path:
        path = _state_path(home, self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    def forget(self, home: Path) -> None:
        _state_path(home, self.name).unlink(missing_ok=True)

    @classmethod
    def load(cls, home: Path, name: str) -> NodeState:
        path = _state_path(home, name)
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as err:
            raise ConfigError(
                f"no agent called {name!r} was started from {home} ({err})",
                hint="pass the --name and --home it was started with",
            ) from None


def _state_path(home: Path, name: str) -> Path:
    return home / "agents" / f"{label_value(name)}.json"


def _session_pids(sid: int) -> list[int]:
    """The processes of session ``sid``: the node's supervisor and every daemon it started
    (workers included; the arms left it with sessions of their own)."""
    return [pid for pid, _ in _session(sid)]


def _session(sid: int) -> list[tuple[int, str]]:
    """(pid, command name) of each live process of session ``sid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = (entry / "stat").read_text()
                fields = text.rsplit(")", 1)[1].split()
                if int(fields[3]) == sid and fields[0] != "Z":
                    found.append((int(entry.name), text[text.index("(") + 1 : text.rindex(")")]))
    return found


def _signal_all(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def agent_of(state: NodeState) -> int | None:
    """The foreground agent waiting on this node, if it is another process and still
    there: the recorded ``agent_pid`` while it is the parent of the node's supervisor (a
    pid reused since by another process is not)."""
    if state.agent_pid is None or state.agent_pid == os.getpid():
        return None
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{state.pid}/stat").read_text().rsplit(")", 1)[1].split()
        if stat[0] != "Z" and int(stat[1]) == state.agent_pid and _alive(state.agent_pid):
            return state.agent_pid
    return None


def stop_node(state: NodeState, *, grace_s: float = 15.0) -> bool:
    """Stop the node: SIGTERM its supervisor (which stops its daemons), then SIGKILL
    whatever of its session is left after ``grace_s``. True if anything was running.

    A node a foreground agent waits on is stopped by that agent: it is sent SIGTERM and
    leaves as its supervisor would have it leave (hosts disabled, node stopped, exit 0).
    """
    agent = agent_of(state)
    if agent is not None:
        os.kill(agent, signal.SIGTERM)
        deadline = time.monotonic() + grace_s + 5.0
        while _alive(agent) and time.monotonic() < deadline:
            time.sleep(0.1)
    left = _session_pids(state.pid)
    if not left:
        return agent is not None
    _signal_all([state.pid] if state.pid in left else left, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if state.pid not in _session_pids(state.pid):
            break
        time.sleep(0.1)
    # Ray's dashboard and runtime-env agents outlived a supervisor whose head was gone.
    _signal_all(_session_pids(state.pid), signal.SIGKILL)
    return True


@dataclass(frozen=True)
class StartedNode:
    """A node this process started: its recorded state and its ``ray start --block``."""

    state: NodeState
    process: subprocess.Popen[bytes]


def start_node(
    spec: AgentSpec,
    facts: HostFacts,
    *,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 90.0,
    on_line: Callable[[str], None] | None = None,
    foreground: bool = False,
) -> StartedNode:
    """Start this machine's Ray node (head or worker) and wait until it has joined.

    With ``foreground`` the node dies with this process (its supervisor gets SIGTERM when
    the parent goes, and Ray's reaper stops the rest), and this process's pid is recorded
    for ``hairline agent stop``. Interrupted while it waits (Ctrl-C, SIGTERM), the node is
    stopped before the interruption goes on.
    """
    env = ray_environment(environ)
    # Where the node's actors keep arm logs and shipped artifacts.
    env[AGENT_HOME_VARIABLE] = str(spec.home.resolve())
    # A node leaving is drained first: with no Serve replica to move, only a wait.
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    command = ray_start_command(spec, facts, ray=ray_binary())
    log = spec.home / "agents" / f"{label_value(spec.name)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    spec.ray_temp_dir.mkdir(parents=True, exist_ok=True)
    housekeeping = spec.housekeeping_cpus

    def pin() -> None:
        os.setsid()
        os.sched_setaffinity(0, housekeeping)
        if foreground:
            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    with log.open("ab") as out:
        offset = out.tell()
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env, preexec_fn=pin, close_fds=True,
        )  # fmt: skip
    unready = NodeState(spec.name, proc.pid, spec.node_ip, spec.head_address or "")
    try:
        _wait_ready(proc, log, offset, timeout_s=timeout_s, on_line=on_line)
    except BaseException:
        stop_node(unready, grace_s=2.0)
        proc.wait()
        raise
    head = spec.head_address or f"{spec.node_ip}:{spec.head_port}"
    state = NodeState(
        spec.name, proc.pid, spec.node_ip, head, spec.hosts, str(log),
        agent_pid=os.getpid() if foreground else None,
    )  # fmt: skip
    state.save(spec.home)
    return StartedNode(state, proc)


def _wait_ready(
    proc: subprocess.Popen[bytes],
    log: Path,
    offset: int,
    *,
    timeout_s: float,
    on_line: Callable[[str], None] | None,
) -> None:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while True:
        text = log.read_bytes()[offset:].decode(errors="replace")
        if on_line:
            for line in text[seen:].splitlines(keepends=True):
                if line.endswith("\n"):
                    on_line(line.rstrip())
                    seen += len(line)
        if _READY_LINE in text:
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = _log_tail(log, offset)
            how = "it exited" if proc.poll() is not None else f"not within {timeout_s:g} s"
            raise HairlineError(
                f"the Ray node did not start ({how}; log {log}):\n  {tail}",
                hint="check --address (the head's host:port), --node-ip, and that this "
                "machine's token matches the head's",
            )
        time.sleep(0.1)


def _log_tail(log: Path, offset: int = 0, lines: int = 8) -> str:
    with contextlib.suppress(OSError):
        text = log.read_bytes()[offset:].decode(errors="replace")
        return "\n  ".join(text.strip().splitlines()[-lines:])
    return ""


@dataclass(frozen=True)
class NodeEnded:
    """How a node this process waited on stopped by itself."""

    returncode: int | None  # of `ray start --block`; None while it lingers without a raylet
    after_s: float
    log_tail: str

    @property
    def how(self) -> str:
        if self.returncode is None:
            return "its raylet exited (`ray start` was still running)"
        return f"`ray start --block` exited with status {self.returncode}"


def watch_node(
    node: StartedNode,
    stop: threading.Event,
    *,
    heartbeat: Callable[[], None],
    heartbeat_s: float,
    poll_s: float = 0.5,
    raylet_check_s: float = 2.0,
    settle_s: float = 2.5,
    clock: Callable[[], float] = time.monotonic,
) -> NodeEnded | None:
    """Wait on a node started in the foreground until ``stop`` is set (None: the caller
    stops it) or the node stops by itself (how); call ``heartbeat`` every ``heartbeat_s``.

    Ray's supervisor exits when one of its daemons dies with an error, but not when the
    raylet exits gracefully (``ray stop`` sends it SIGTERM): then the supervisor lingers
    with nothing to supervise, so the raylet is looked for as well.
    """
    started = clock()
    next_beat = started + heartbeat_s
    next_check = started + raylet_check_s
    while not stop.wait(poll_s):
        now = clock()
        code = node.process.poll()
        if code is None and now >= next_check:
            next_check = now + raylet_check_s
            if not any(name == _RAYLET for _, name in _session(node.state.pid)):
                # Ray's supervisor looks at its daemons once a second: let it say how
                # the raylet died (its exit status and its last lines in the log).
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=settle_s)
                code = node.process.poll()
                if code is None:
                    return NodeEnded(None, now - started, _log_tail(Path(node.state.log)))
        if code is not None:
            return NodeEnded(code, now - started, _log_tail(Path(node.state.log)))
        if now >= next_beat:
            next_beat = now + heartbeat_s
            heartbeat()
    return None
