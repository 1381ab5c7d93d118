"""``--local-fleet N``: a cluster on loopback for Kraken to load-test.

N sample services (web1..webN) and "rest" (the rest of the region: one sample service with
threads to spare and no cache) behind a real load balancer, HAProxy (``balance roundrobin``,
an admin socket for the weights) or nginx (weighted round robin, the upstream block in a
file of its own that hairline rewrites and reloads), all sharing one ``sample-cache`` whose
capacity is below the N servers' together, so the cluster saturates on the cache before N x
per-server capacity, as Kraken's clusters did (Figure 8). The services sleep their work
(``--work sleep``), so each worker thread acts as a CPU of its own and the whole fleet fits
beside the engine on a 2-CPU machine.

Every process is started with :func:`hairline.kit.procs.child_setup` (killed with its parent)
in a session of its own (Ctrl-C in the terminal reaches ``hairline kraken`` alone, which puts
the weights back before it stops the fleet) and stopped when the ``with`` block ends, on
every path.
"""

from __future__ import annotations

import re
import select
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hairline.engine import find_engine
from hairline.errors import HairlineError
from hairline.kit.procs import child_setup, stop_process
from hairline.lb.balancer import LbKind, LbSpec
from hairline.lb.launch import (
    HAPROXY,
    Child,
    FolderOfChildren,
    free_port,
    haproxy_head,
    nginx_config,
    require_nginx,
    start_haproxy,
    start_nginx,
)
from hairline.lb.nginx import NGINX

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
    #: False only to test what Kraken does on a kernel that gives no receive timestamps:
    #: the web servers then run with ``--test-no-recv-timestamps`` (docs/engine.md).
    recv_timestamps: bool = True

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

    with LocalFleet(FleetSpec(servers=4), lb="nginx") as fleet:
        fleet.lb_spec, fleet.frontend_url, fleet.metrics_urls["web1"]
    """

    spec: FleetSpec = field(default_factory=FleetSpec)
    engine: Path | None = None
    lb: LbKind = "haproxy"
    haproxy: Path = HAPROXY
    nginx: Path = NGINX
    backend: str = "web"
    #: Where its temporary folder goes (``hairline kraken``: the run's, which its janitor
    #: removes even after a SIGKILL); None: the system's temporary folder.
    tmp_dir: Path | None = None
    folder: Path = field(init=False, default=Path())
    frontend_url: str = field(init=False, default="")
    addresses: dict[str, str] = field(init=False, default_factory=dict)
    _children: list[Child] = field(init=False, default_factory=list)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(init=False, default=None)

    @property
    def socket_path(self) -> Path:
        """HAProxy's admin socket (an nginx fleet has none)."""
        return self.folder / "admin.sock"

    @property
    def upstream_file(self) -> Path:
        """nginx's upstream file, which hairline rewrites (a HAProxy fleet has none)."""
        return self.folder / "upstream.conf"

    @property
    def lb_spec(self) -> LbSpec:
        """The fleet's load balancer, for :func:`hairline.lb.factory.open_balancer`."""
        if self.lb == "nginx":
            return LbSpec(
                "nginx", self.backend, config=self.folder / "nginx.conf",
                upstream_file=self.upstream_file,
            )  # fmt: skip
        return LbSpec("haproxy", self.backend, socket=self.socket_path)

    @property
    def balancer_name(self) -> Literal["HAProxy", "nginx"]:
        return "nginx" if self.lb == "nginx" else "HAProxy"

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

    def _require(self) -> None:
        if self.lb == "nginx":
            require_nginx(self.nginx)
        else:
            super()._require()

    def _start_all(self) -> None:
        binary = str(self.engine or find_engine())
        spec = self.spec
        cache = self._start_listening(
            "cache",
            [binary, "sample-cache", "--port", "0", "--host", "127.0.0.1",
             "--slots", str(spec.cache_slots), "--service-us", str(spec.cache_service_us)],
        )  # fmt: skip
        work = ["--work", "sleep", "--regress-cpu", repr(spec.work_scale - 1.0)]
        if not spec.recv_timestamps:
            work.append("--test-no-recv-timestamps")
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
        if self.lb == "nginx":
            self.upstream_file.write_text(self._nginx_upstream())
            config = nginx_config(self.folder, port, self.upstream_file, self.backend)
            proc = start_nginx(self.nginx, self.folder, config, port, own_session=True)
        else:
            proc = start_haproxy(
                self.haproxy, self.folder, self._haproxy_config(port), port, own_session=True
            )
        self._children.append(Child(self.lb, proc, f"127.0.0.1:{port}"))
        self.frontend_url = f"http://127.0.0.1:{port}"

    def _nginx_upstream(self) -> str:
        """The upstream block (lb/nginx.py's format: each server line named by its comment),
        with idle connections kept to the servers as HAProxy's ``http-reuse always``."""
        servers = "\n".join(
            f"    server {self.addresses[name]} weight={weight};  # {name}"
            for name, weight in self.original_weights.items()
        )
        return f"upstream {self.backend} {{\n    keepalive 64;\n{servers}\n}}\n"

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
            preexec_fn=child_setup(), start_new_session=True,
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
        # The balancer first, so that no request reaches a service that is going away.
        for child in reversed(self._children):
            self._stop(child)
        self._children.clear()
