"""The agent of a test machine: its Ray node, pinned away from the CPUs under test.

``hairline agent start --address HEAD`` probes the machine's facts, starts a Ray worker
node that carries them as labels and one custom resource per host
(``hairline_host_<name>: 1``, so that an arm's actor lands on exactly that host), and then
registers the hosts in the database (:mod:`hairline.hosts.registry`). The node is
``ray start --block`` in a session of its own (:mod:`hairline.hosts.node`).

Ray's daemons cost about 1% of a CPU per idle node, and more when actors start: they run
on the housekeeping CPUs (every worker and actor inherits the affinity), and the arms
move onto their host's CPUs as they start (:class:`~hairline.arms.local.LocalArm`).

Ray's token authentication is on unless ``RAY_AUTH_MODE=disabled`` says otherwise; the
token comes from ``RAY_AUTH_TOKEN``, or the file ``RAY_AUTH_TOKEN_PATH`` names, or Ray's
default ``~/.ray/auth_token``, and a file others may read is refused.

Starting, stopping and watching the node's processes is :mod:`hairline.hosts.node`'s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired

from typing_extensions import TypedDict

from hairline.errors import ConfigError
from hairline.hosts.facts import HostFacts
from hairline.kit import cpulist
from hairline.kit.jsonout import documented
from hairline.kit.secretfiles import check_private

__all__ = [
    "RAY_WORKER_PORTS",
    "AgentHostJson",
    "AgentSpec",
    "AgentStartedJson",
    "AgentStoppedJson",
    "host_names",
    "label_value",
    "local_ip_towards",
    "node_labels",
    "parse_cpu_list",
    "ray_binary",
    "ray_environment",
    "ray_start_command",
    "resource_name",
    "server_type",
]
_LABEL_PREFIX = "hairline/"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")
_RESOURCE_NAME = re.compile(r"[^A-Za-z0-9_]+")


@documented
class AgentHostJson(TypedDict):
    """A host the agent registered."""

    name: str
    id: int
    cpus: list[int]
    revived: bool
    """Whether it had been unhealthy."""


@documented
class AgentStartedJson(TypedDict):
    """A started agent (``hairline agent start --json``; one line with --foreground;
    docs/scale-out.md)."""

    name: str
    head: bool
    """Whether this node is the Ray head."""
    address: str
    """The head's address."""
    node_ip: str
    pid: int
    """The Ray node's process."""
    log: str
    housekeeping_cpus: list[int]
    """The CPUs Ray's daemons run on."""
    hosts: list[AgentHostJson]
    warning: str | None
    foreground: bool


@documented
class AgentStoppedJson(TypedDict):
    """A stopped agent (``hairline agent stop --json``, and the line a foreground agent
    prints when asked to leave)."""

    name: str
    stopped: bool
    """Whether its Ray node was running and was stopped."""
    disabled: list[str]
    """The hosts disabled in the inventory."""
    warning: NotRequired[str | None]
    """A foreground agent's: what could not be done."""


def parse_cpu_list(text: str, *, flag: str) -> tuple[int, ...]:
    """A CPU list ("0-3,8" is 0, 1, 2, 3 and 8); a :class:`ConfigError` naming ``flag``
    otherwise."""
    try:
        cpus = cpulist.parse_cpu_list(text)
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r} is not a CPU list", hint=f"write {flag} 2-5 or {flag} 2,3,6"
        ) from None
    if not cpus:
        raise ConfigError(f"{flag} {text!r} names no CPU", hint=f"write {flag} 2-5")
    return cpus


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


def label_value(text: str) -> str:
    """A fact as a Ray (Kubernetes-syntax) label value: at most 63 characters of letters,
    digits, '-', '_' and '.', starting and ending with a letter or digit."""
    value = _LABEL_VALUE.sub("_", text).strip("_.-")[:63].strip("_.-")
    return value or "unknown"


def node_labels(facts: HostFacts, *, region: str, server: str) -> dict[str, str]:
    """The node's labels: the facts allocation matches on, for Ray's label selectors and
    for people reading `ray status`. The database keeps the exact values."""
    return {
        f"{_LABEL_PREFIX}{key}": label_value(value)
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


# The ports a Ray node hands its workers (``ray start``'s default --min/--max-worker-port);
# no other component of the node may take one.
RAY_WORKER_PORTS = (10_002, 19_999)


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

    def __post_init__(self) -> None:
        low, high = RAY_WORKER_PORTS
        if self.head_address is None and low <= self.head_port <= high:
            raise ConfigError(
                f"--port {self.head_port} lies in Ray's worker port range {low}-{high}, and "
                "the head would refuse to start",
                hint="choose a port outside it, e.g. --port 6379 (the default)",
            )

    @property
    def hosts(self) -> list[str]:
        return [] if self.head_address is None else host_names(self.name, self.host_cpus)

    @property
    def ray_temp_dir(self) -> Path:
        # Ray's socket paths live under it and must stay below 108 bytes: a short default.
        return self.temp_dir or Path(f"/tmp/hl-ray-{os.getuid()}") / label_value(self.name)


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


def ray_binary() -> str:
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
