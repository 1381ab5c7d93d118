"""The agent of a test machine: its Ray node, pinned away from the CPUs under test.

``hairline agent start --address HEAD`` probes the machine's facts, starts a Ray worker
node that carries them as labels and one custom resource per host
(``hairline_host_<name>: 1``, so that an arm's actor lands on exactly that host), and then
registers the hosts in the database (:mod:`hairline.hosts.registry`). The node is
``ray start --block`` in a session of its own: that process supervises the node's daemons
(when the raylet dies it kills the rest), and stopping the node is signalling that one
session, never ``ray stop``, which stops every Ray node of the machine.

Ray's daemons cost about 1% of a CPU per idle node, and more when actors start: they run
on the housekeeping CPUs (every worker and actor inherits the affinity), and the arms
move onto their host's CPUs as they start (:class:`~hairline.arms.local.LocalArm`).

Ray's token authentication is on unless ``RAY_AUTH_MODE=disabled`` says otherwise; the
token comes from ``RAY_AUTH_TOKEN``, or the file ``RAY_AUTH_TOKEN_PATH`` names, or Ray's
default ``~/.ray/auth_token``, and a file others may read is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hairline.arms.remote import AGENT_HOME_VARIABLE
from hairline.errors import ConfigError, HairlineError
from hairline.hosts.facts import HostFacts
from hairline.secretfiles import check_private

__all__ = [
    "AgentSpec",
    "NodeState",
    "host_names",
    "node_labels",
    "parse_cpu_list",
    "ray_environment",
    "ray_start_command",
    "resource_name",
    "server_type",
    "start_node",
    "stop_node",
]

_READY_LINE = "Ray runtime started."
_LABEL_PREFIX = "hairline/"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")
_RESOURCE_NAME = re.compile(r"[^A-Za-z0-9_]+")


def parse_cpu_list(text: str, *, flag: str) -> tuple[int, ...]:
    """A CPU list ("0-3,8" is 0, 1, 2, 3 and 8); a :class:`ConfigError` naming ``flag``
    otherwise."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r} is not a CPU list", hint=f"write {flag} 2-5 or {flag} 2,3,6"
        ) from None
    if not cpus or min(cpus) < 0:
        raise ConfigError(f"{flag} {text!r} names no CPU", hint=f"write {flag} 2-5")
    return tuple(sorted(cpus))


def server_type(root: Path = Path("/")) -> str:
    """The machine's model as its firmware names it (``/sys/class/dmi/id/product_name``),
    or "unknown" (virtual machines and ARM boards often have none)."""
    try:
        text = (root / "sys/class/dmi/id/product_name").read_text(errors="replace").strip()
    except OSError:
        return "unknown"
    return text or "unknown"


def resource_name(host: str) -> str:
    """The Ray custom resource that is this host: one unit, so one arm actor at a time."""
    return "hairline_host_" + _RESOURCE_NAME.sub("_", host)


def _label_value(text: str) -> str:
    """A fact as a Ray (Kubernetes-syntax) label value: at most 63 characters of letters,
    digits, '-', '_' and '.', starting and ending with a letter or digit."""
    value = _LABEL_VALUE.sub("_", text).strip("_.-")[:63].strip("_.-")
    return value or "unknown"


def node_labels(facts: HostFacts, *, region: str, server: str) -> dict[str, str]:
    """The node's labels: the facts allocation matches on, for Ray's label selectors and
    for people reading `ray status`. The database keeps the exact values."""
    return {
        f"{_LABEL_PREFIX}{key}": _label_value(value)
        for key, value in (
            ("region", region),
            ("server-type", server),
            ("cpu-arch", facts.arch),
            ("cpu-model", facts.cpu_model),
            ("kernel", facts.kernel),
            ("turbo", facts.turbo),
            ("cores", str(facts.cores)),
            ("memory-gib", str(facts.memory_bytes >> 30)),
        )
    }


def host_names(name: str, host_cpus: Sequence[Sequence[int]]) -> list[str]:
    """One host per CPU set: ``name`` alone, or ``name/cpuA-B`` for each of several."""
    if len(host_cpus) == 1:
        return [name]
    return [
        f"{name}/cpu{cpus[0]}" if len(cpus) == 1 else f"{name}/cpu{cpus[0]}-{cpus[-1]}"
        for cpus in host_cpus
    ]


@dataclass(frozen=True)
class AgentSpec:
    """What ``hairline agent start`` was asked for, checked."""

    name: str
    home: Path
    head_address: str | None  # None: start a head node
    node_ip: str
    host_cpus: tuple[tuple[int, ...], ...]
    housekeeping_cpus: tuple[int, ...]
    region: str = "default"
    server_type: str = "unknown"
    head_port: int = 6379
    temp_dir: Path | None = None

    @property
    def hosts(self) -> list[str]:
        return [] if self.head_address is None else host_names(self.name, self.host_cpus)

    @property
    def ray_temp_dir(self) -> Path:
        # Ray's socket paths live under it and must stay below 108 bytes: a short default.
        return self.temp_dir or Path(f"/tmp/hl-ray-{os.getuid()}") / _label_value(self.name)


def ray_start_command(spec: AgentSpec, facts: HostFacts, *, ray: str = "ray") -> list[str]:
    """The ``ray start --block`` command of this node (pure)."""
    common = [
        "--node-ip-address", spec.node_ip,
        "--temp-dir", str(spec.ray_temp_dir),
        "--disable-usage-stats",
        "--block",
    ]  # fmt: skip
    if spec.head_address is None:
        # The head runs the cluster's control plane and no arm: no CPUs to hand out.
        return [ray, "start", "--head", "--port", str(spec.head_port), "--num-cpus", "0",
                "--include-dashboard", "false", *common]  # fmt: skip
    labels = node_labels(facts, region=spec.region, server=spec.server_type)
    resources = {resource_name(h): 1 for h in spec.hosts}
    return [
        ray, "start", "--address", spec.head_address,
        "--num-cpus", str(sum(len(c) for c in spec.host_cpus)),
        "--resources", json.dumps(resources, sort_keys=True),
        "--labels", ",".join(f"{k}={v}" for k, v in labels.items()),
        *common,
    ]  # fmt: skip


def ray_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of Ray processes hairline starts or connects with: token
    authentication on (unless ``RAY_AUTH_MODE=disabled``), the token's source checked.

    The token itself is never put on a command line; Ray reads it from the environment or
    the file, as every node and driver of the cluster must.
    """
    env = dict(os.environ if environ is None else environ)
    mode = env.get("RAY_AUTH_MODE", "token").lower()
    if mode == "disabled":
        return env
    if mode != "token":
        raise ConfigError(
            f"RAY_AUTH_MODE={env['RAY_AUTH_MODE']!r} is not a mode Ray knows",
            hint="use RAY_AUTH_MODE=token (hairline's default) or disabled",
        )
    env["RAY_AUTH_MODE"] = "token"
    if env.get("RAY_AUTH_TOKEN"):
        return env
    path_text = env.get("RAY_AUTH_TOKEN_PATH")
    variable = "RAY_AUTH_TOKEN_PATH"
    if not path_text:
        default = Path(env.get("HOME", str(Path.home()))) / ".ray" / "auth_token"
        if not default.exists():
            raise ConfigError(
                "Ray token authentication is on, but no token is set",
                hint="put the cluster's token in a file (`chmod 600` it) and set "
                "RAY_AUTH_TOKEN_PATH to it, or set RAY_AUTH_TOKEN; `ray get-auth-token "
                "--generate` makes one in ~/.ray/auth_token. RAY_AUTH_MODE=disabled turns "
                "authentication off (anyone who reaches the head can then run code)",
            )
        path_text, variable = str(default), "the default token file"
    check_private(Path(path_text), what="Ray token", variable=variable)
    return env


def _ray_binary() -> str:
    beside = Path(sys.executable).with_name("ray")
    if beside.is_file():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise ConfigError(
            "Ray is not installed", hint="pip install 'hairline[ray]' (or `make build`)"
        )
    return found


def local_ip_towards(address: str) -> str:
    """The IP address this machine uses to reach ``address`` ("host:port"); no packet is
    sent (a UDP socket only picks its route)."""
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host or address, int(port or 6379)))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


@dataclass(frozen=True)
class NodeState:
    """A started node, as recorded in the agent's home for ``hairline agent stop``."""

    name: str
    pid: int
    node_ip: str
    head_address: str
    hosts: list[str] = field(default_factory=list)
    log: str = ""

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
    return home / "agents" / f"{_label_value(name)}.json"


def _session_pids(sid: int) -> list[int]:
    """The processes of session ``sid``: the node's supervisor and every daemon it started
    (workers included; the arms left it with sessions of their own)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid and fields[0] != "Z":
                    pids.append(int(entry.name))
    return pids


def _signal_all(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def stop_node(state: NodeState, *, grace_s: float = 15.0) -> bool:
    """Stop the node: SIGTERM its supervisor (which stops its daemons), then SIGKILL
    whatever of its session is left after ``grace_s``. True if anything was running."""
    left = _session_pids(state.pid)
    if not left:
        return False
    _signal_all([state.pid] if state.pid in left else left, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if state.pid not in _session_pids(state.pid):
            break
        time.sleep(0.1)
    # Ray's dashboard and runtime-env agents outlived a supervisor whose head was gone.
    _signal_all(_session_pids(state.pid), signal.SIGKILL)
    return True


def start_node(
    spec: AgentSpec,
    facts: HostFacts,
    *,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 90.0,
    on_line: Callable[[str], None] | None = None,
) -> NodeState:
    """Start this machine's Ray node (head or worker) and wait until it has joined."""
    env = ray_environment(environ)
    # Where the node's actors keep arm logs and shipped artifacts.
    env[AGENT_HOME_VARIABLE] = str(spec.home.resolve())
    # A node leaving is drained first: with no Serve replica to move, only a wait.
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    command = ray_start_command(spec, facts, ray=_ray_binary())
    log = spec.home / "agents" / f"{_label_value(spec.name)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    spec.ray_temp_dir.mkdir(parents=True, exist_ok=True)
    housekeeping = spec.housekeeping_cpus

    def pin() -> None:
        os.setsid()
        os.sched_setaffinity(0, housekeeping)

    with log.open("ab") as out:
        offset = out.tell()
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env, preexec_fn=pin, close_fds=True,
        )  # fmt: skip
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
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            state = NodeState(spec.name, proc.pid, spec.node_ip, spec.head_address or "")
            stop_node(state, grace_s=2.0)
            proc.wait()
            tail = "\n  ".join(text.strip().splitlines()[-8:])
            how = "it exited" if proc.returncode is not None else f"not within {timeout_s:g} s"
            raise HairlineError(
                f"the Ray node did not start ({how}; log {log}):\n  {tail}",
                hint="check --address (the head's host:port), --node-ip, and that this "
                "machine's token matches the head's",
            )
        time.sleep(0.1)
    head = spec.head_address or f"{spec.node_ip}:{spec.head_port}"
    state = NodeState(spec.name, proc.pid, spec.node_ip, head, spec.hosts, str(log))
    state.save(spec.home)
    return state
