"""``hairline route fleet``: N instances of a service behind HAProxy, routed semantically
(with the balancer moving hosts between partitions every interval) or round-robin.

It is one foreground process so that the lab can start it as an arm: its instances and
HAProxy are its children, in the arm's cgroup and CPU set, so the lab's CPU per request
counts all of them; each child is killed with it (:func:`hairline.kit.procs.child_setup`), and
leaving the ``with`` block stops them all, on every path.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hairline.arms.local import free_port, wait_http_ok
from hairline.errors import ArmFailed, ConfigError, DataError
from hairline.kit.procs import child_setup, stop_process
from hairline.lb.launch import HAPROXY, FolderOfChildren, start_haproxy
from hairline.routing import balancer
from hairline.routing.haproxy import POLICIES, HAProxyRouter, haproxy_config
from hairline.routing.partition import Partitioning, partitioning_from_json

__all__ = ["FleetOptions", "RoutingFleet", "describe", "read_partitions"]

_HEALTH_TIMEOUT_S = 15.0


def read_partitions(path: Path) -> Partitioning:
    """The partitions file that ``hairline route partition --output`` wrote."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(
            f"cannot read the partitions file {path}: {err}",
            hint="write it with `hairline route partition PROFILE --output FILE`",
        ) from err
    except json.JSONDecodeError as err:
        raise DataError(
            f"{path}:{err.lineno}: not valid JSON: {err.msg}",
            hint="write it with `hairline route partition PROFILE --output FILE`",
        ) from err
    return partitioning_from_json(data, source=str(path))


@dataclass(frozen=True)
class FleetOptions:
    """What ``route fleet`` was asked for; ``command`` is one instance's start command with
    ``{port}`` where its port goes."""

    policy: str
    instances: int
    port: int
    command: tuple[str, ...]
    partitioning: Partitioning | None = None
    balance_interval_s: float = 60.0
    health_path: str = "/healthz"
    settings: balancer.BalancerSettings = field(default_factory=balancer.BalancerSettings)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(
                f"--policy {self.policy}: unknown", hint=f"pass one of {', '.join(POLICIES)}"
            )
        if self.instances < 1:
            raise ConfigError(f"--instances {self.instances}: need at least 1", hint="pass 4")
        if not any("{port}" in word for word in self.command):
            raise ConfigError(
                "the service command has no {port}",
                hint="write {port} where each instance's port goes, e.g. "
                "`-- hairline-engine sample-service --port {port}` (in a service file's "
                "start command, {{port}})",
            )
        if self.policy == "semantic":
            if self.partitioning is None:
                raise ConfigError(
                    "--policy semantic needs --partitions FILE",
                    hint="write one with `hairline route partition PROFILE --output FILE`",
                )
            wanted = len(self.partitioning.partitions) * self.settings.min_share
            if self.instances < wanted:
                raise ConfigError(
                    f"--instances {self.instances} cannot give each of "
                    f"{len(self.partitioning.partitions)} partitions a host",
                    hint=f"pass --instances {int(wanted)} or more, or make fewer partitions "
                    "(`hairline route partition --k N`)",
                )
        if self.balance_interval_s <= 0:
            raise ConfigError(
                f"--balance-interval-s {self.balance_interval_s}: must be positive",
                hint="pass 60 (the paper's minute), or a few seconds in a short test",
            )


@dataclass
class RoutingFleet(FolderOfChildren):
    """The running fleet::

    with RoutingFleet(options) as fleet:
        fleet.url, fleet.instance_urls, fleet.serve()   # serve() until interrupted
    """

    options: FleetOptions
    haproxy: Path = HAPROXY
    folder: Path = field(init=False, default=Path())
    instance_urls: dict[str, str] = field(init=False, default_factory=dict)
    state: balancer.BalancerState | None = field(init=False, default=None)
    router: HAProxyRouter | None = field(init=False, default=None)
    _instances: list[subprocess.Popen[str]] = field(init=False, default_factory=list)
    _haproxy: subprocess.Popen[str] | None = field(init=False, default=None)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(init=False, default=None)
    _folder_prefix = "hairline-route-"
    _last_requests: dict[str, int] = field(init=False, default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.options.port}"

    @property
    def socket_path(self) -> Path:
        return self.folder / "admin.sock"

    @property
    def haproxy_pid(self) -> int:
        assert self._haproxy is not None
        return self._haproxy.pid

    @property
    def pids(self) -> list[int]:
        every = [*self._instances, *([self._haproxy] if self._haproxy else [])]
        return [p.pid for p in every]

    def _start_all(self) -> None:
        options = self.options
        for i in range(1, options.instances + 1):
            name, port = f"s{i}", free_port()
            words = [word.replace("{port}", str(port)) for word in options.command]
            with (self.folder / f"{name}.log").open("w") as log:
                try:
                    proc = subprocess.Popen(
                        words, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                        text=True, preexec_fn=child_setup(),
                    )  # fmt: skip
                except OSError as err:
                    raise ArmFailed(
                        f"cannot start the fleet's instance {name} `{' '.join(words)}`: {err}",
                        hint="check the command after `--`",
                    ) from err
            self._instances.append(proc)
            self.instance_urls[name] = f"http://127.0.0.1:{port}"
        for (name, url), proc in zip(self.instance_urls.items(), self._instances, strict=True):
            try:
                wait_http_ok(
                    url + options.health_path,
                    timeout_s=_HEALTH_TIMEOUT_S,
                    alive=_alive(proc),
                )
            except ArmFailed as err:
                said = (self.folder / f"{name}.log").read_text(errors="replace").strip()
                raise ArmFailed(f"the fleet's instance {name}: {err.message}: {said[-1000:]}",
                                hint=err.hint) from None  # fmt: skip
        servers = {name: url.removeprefix("http://") for name, url in self.instance_urls.items()}
        partitioning = options.partitioning if options.policy == "semantic" else None
        placement = None
        if partitioning is not None:
            self.state = balancer.start(tuple(servers), partitioning.load_shares, options.settings)
            placement = self.state.placement
        config = haproxy_config(
            port=options.port, socket_path=self.socket_path, servers=servers,
            partitioning=partitioning, placement=placement,
        )  # fmt: skip
        self._haproxy = start_haproxy(self.haproxy, self.folder, config, options.port)
        if partitioning is not None:
            self.router = HAProxyRouter(self.socket_path, [p.name for p in partitioning.partitions])
            self._last_requests = self.router.requests()

    def balance_once(self) -> balancer.BalancerState | None:
        """One balancer interval: each partition's requests since the last, the balancer's
        step, the new placement applied if it changed. None under round-robin."""
        if self.state is None or self.router is None:
            return None
        now = self.router.requests()
        loads = {p: float(now[p] - self._last_requests.get(p, 0)) for p in now}
        self._last_requests = now
        before = self.state.placement
        self.state = balancer.step(self.state, loads)
        if self.state.placement != before:
            self.router.apply(self.state.placement)
        return self.state

    def serve(
        self,
        *,
        on_step: Callable[[balancer.BalancerState], None] = lambda state: None,
        intervals: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Balance every interval until interrupted (or ``intervals`` times); under
        round-robin, just wait."""
        done = 0
        while intervals is None or done < intervals:
            sleep(self.options.balance_interval_s)
            state = self.balance_once()
            if state is not None:
                on_step(state)
            done += 1

    def _stop_children(self) -> None:
        # HAProxy first, so that no request reaches an instance that is going away.
        if self._haproxy is not None:
            stop_process(self._haproxy)
        for proc in self._instances:
            stop_process(proc)


def describe(state: balancer.BalancerState) -> str:
    """One line per interval: each partition's share and the hosts it has."""
    weights = state.placement.weights()
    parts = []
    for p, share in state.shares.items():
        held = ",".join(h if w >= 1.0 else f"{h}:{w:.2f}" for h, w in weights.get(p, {}).items())
        parts.append(f"{p} {share:.2f} [{held}]")
    return "balance: " + "  ".join(parts)


def _alive(proc: subprocess.Popen[str]) -> Callable[[], bool]:
    return lambda: proc.poll() is None
