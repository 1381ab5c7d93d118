"""``--local-fleet N``: a cluster on loopback for Kraken to load-test.

N sample services (web1..webN) and "rest" (the rest of the region: one sample service with
threads to spare and no cache) behind a real HAProxy (``balance roundrobin``, an admin
socket for the weights), all sharing one ``sample-cache`` whose capacity is below the N
servers' together, so the cluster saturates on the cache before N x per-server capacity, as
Kraken's clusters did (Figure 8). The services sleep their work (``--work sleep``), so each
worker thread acts as a CPU of its own and the whole fleet fits beside the engine on a
2-CPU machine.

Every process is started with :func:`hairline.kit.procs.child_setup` (killed with its parent)
and stopped when the ``with`` block ends, on every path.
"""

from __future__ import annotations

import re
import select
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hairline.engine import find_engine
from hairline.errors import HairlineError
from hairline.kit.procs import child_setup, stop_process
from hairline.lb.launch import (
    HAPROXY,
    Child,
    FolderOfChildren,
    free_port,
    haproxy_head,
    start_haproxy,
)

__all__ = ["FleetSpec", "LocalFleet"]

_LISTENING = re.compile(r"^listening on (?P<host>.+):(?P<port>\d+)$")
_START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class FleetSpec:
    """The fleet's numbers; the defaults fit a 2-CPU machine (docs/kraken.md measures them).

    A web server's worker holds a request for its work (``work_scale`` x the sample
    service's ~200 us mean, slept) plus one cache round trip (``cache_service_us``), so one
    thread serves about 1e6 / (200 * work_scale + cache_service_us) requests/s; the cache
    serves ``cache_slots * 1e6 / cache_service_us`` gets/s for all servers together.
    """

    servers: int = 4
    threads_per_server: int = 1
    work_scale: float = 5.0
    cache_slots: int = 1
    cache_service_us: int = 1000
    rest_threads: int = 16
    #: Original weights: each web server's and the rest's (the share the cluster normally
    #: gets is servers * web_weight / (servers * web_weight + rest_weight)).
    web_weight: int = 10
    rest_weight: int = 160

    def __post_init__(self) -> None:
        if not 1 <= self.servers <= 32:
            raise HairlineError(
                f"--local-fleet {self.servers}: expected 1 to 32 servers",
                hint="pass --local-fleet 4 (a 2-CPU machine fits 3 or 4)",
            )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"web{i}" for i in range(1, self.servers + 1))

    @property
    def cache_capacity_per_s(self) -> float:
        return self.cache_slots * 1e6 / self.cache_service_us


@dataclass
class LocalFleet(FolderOfChildren):
    """The running fleet::

    with LocalFleet(FleetSpec(servers=4)) as fleet:
        fleet.socket_path, fleet.frontend_url, fleet.metrics_urls["web1"]
    """

    spec: FleetSpec = field(default_factory=FleetSpec)
    engine: Path | None = None
    haproxy: Path = HAPROXY
    backend: str = "web"
    folder: Path = field(init=False, default=Path())
    frontend_url: str = field(init=False, default="")
    addresses: dict[str, str] = field(init=False, default_factory=dict)
    _children: list[Child] = field(init=False, default_factory=list)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(init=False, default=None)

    @property
    def socket_path(self) -> Path:
        return self.folder / "admin.sock"

    @property
    def servers(self) -> tuple[str, ...]:
        return self.spec.names

    @property
    def metrics_urls(self) -> dict[str, str]:
        return {name: f"http://{addr}/metrics" for name, addr in self.addresses.items()}

    @property
    def original_weights(self) -> dict[str, int]:
        return {**dict.fromkeys(self.servers, self.spec.web_weight), "rest": self.spec.rest_weight}

    @property
    def pids(self) -> list[int]:
        return [c.proc.pid for c in self._children]

    def _start_all(self) -> None:
        binary = str(self.engine or find_engine())
        spec = self.spec
        cache = self._start_listening(
            "cache",
            [binary, "sample-cache", "--port", "0", "--host", "127.0.0.1",
             "--slots", str(spec.cache_slots), "--service-us", str(spec.cache_service_us)],
        )  # fmt: skip
        work = ["--work", "sleep", "--regress-cpu", repr(spec.work_scale - 1.0)]
        for name in spec.names:
            child = self._start_listening(
                name,
                [binary, "sample-service", "--port", "0", "--threads",
                 str(spec.threads_per_server), *work, "--cache", cache.address],
            )  # fmt: skip
            self.addresses[name] = child.address
        rest = self._start_listening(
            "rest",
            [binary, "sample-service", "--port", "0", "--threads", str(spec.rest_threads),
             "--work", "sleep"],
        )  # fmt: skip
        self.addresses["rest"] = rest.address
        port = free_port()
        proc = start_haproxy(self.haproxy, self.folder, self._haproxy_config(port), port)
        self._children.append(Child("haproxy", proc, f"127.0.0.1:{port}"))
        self.frontend_url = f"http://127.0.0.1:{port}"

    def _haproxy_config(self, port: int) -> str:
        servers = "\n".join(
            f"    server {name} {self.addresses[name]} weight {weight}"
            for name, weight in self.original_weights.items()
        )
        return (
            haproxy_head(self.socket_path, port)
            + f"""\
    default_backend {self.backend}

backend {self.backend}
    balance roundrobin
    http-reuse always
{servers}
"""
        )

    def _start_listening(self, name: str, command: list[str]) -> Child:
        """Start a hairline-engine subcommand that prints ``listening on HOST:PORT`` first."""
        log = (self.folder / f"{name}.log").open("w")
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
            preexec_fn=child_setup(),
        )  # fmt: skip
        log.close()
        child = Child(name, proc)
        self._children.append(child)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], _START_TIMEOUT_S)
        first = proc.stdout.readline().strip() if ready else ""
        match = _LISTENING.match(first)
        if match is None:
            self._stop(child)
            stderr = (self.folder / f"{name}.log").read_text(errors="replace").strip()
            raise HairlineError(
                f"the fleet's {name} did not start: `{' '.join(command)}` printed {first!r} "
                f"(exit status {proc.returncode}): {stderr[-2000:]}",
                hint="the engine may be older than this hairline; run `make build`",
            )
        # The pipe stays open (and unread) until the stop: closed, a later line would fail.
        child.address = f"{match['host']}:{match['port']}"
        return child

    def _stop(self, child: Child) -> None:
        stop_process(child.proc)

    def _stop_children(self) -> None:
        # HAProxy first, so that no request reaches a service that is going away.
        for child in reversed(self._children):
            self._stop(child)
        self._children.clear()
