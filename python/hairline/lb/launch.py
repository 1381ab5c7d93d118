"""Starting a load balancer on loopback: HAProxy (its configuration's head, an admin socket
for the weights) or nginx (a main configuration including the upstream file whose weights
hairline rewrites), each in the foreground until it is ready and its port answers; and the
base class of a fleet of children behind one (Kraken's ``--local-fleet``, semantic
routing's fleet).

Every process is started with :func:`hairline.kit.procs.child_setup` (killed with its
parent), with ``own_session`` in a session of its own (Ctrl-C in the terminal then reaches
only the parent, which stops them when it is done with them: Kraken puts the weights back
first), and stopped when the ``with`` block ends, on every path, whatever signal comes
meanwhile.
"""

from __future__ import annotations

import abc
import contextlib
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from hairline.errors import HairlineError
from hairline.kit import interrupts
from hairline.kit.ports import free_port
from hairline.kit.procs import child_setup, stop_process

__all__ = [
    "HAPROXY",
    "Child",
    "FolderOfChildren",
    "free_port",
    "haproxy_head",
    "nginx_config",
    "require_haproxy",
    "require_nginx",
    "start_haproxy",
    "start_nginx",
]

HAPROXY = Path("/usr/sbin/haproxy")
_START_TIMEOUT_S = 10.0


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[str]
    address: str = ""


class FolderOfChildren(abc.ABC):
    """What a loopback fleet shares: its balancer required (HAProxy unless ``_require``
    says otherwise), a temporary folder for its configs, sockets and logs (in ``tmp_dir``
    if set: a folder a janitor removes, kit/janitor.py), children started on ``with`` entry
    and stopped on every path out. A subclass starts them in :meth:`_start_all` and stops
    them in :meth:`_stop_children`."""

    haproxy: Path
    folder: Path
    _tmp: tempfile.TemporaryDirectory[str] | None
    _folder_prefix = "hairline-fleet-"
    tmp_dir: Path | None = None

    def __enter__(self) -> Self:
        self._require()
        self._tmp = tempfile.TemporaryDirectory(prefix=self._folder_prefix, dir=self.tmp_dir)
        self.folder = Path(self._tmp.name)
        try:
            self._start_all()
        except BaseException:
            self._stop_all()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_all()

    def _require(self) -> None:
        """Fail before starting anything if the balancer is not installed."""
        require_haproxy(self.haproxy)

    @abc.abstractmethod
    def _start_all(self) -> None:
        """Start the children (each registered before the next starts)."""

    @abc.abstractmethod
    def _stop_children(self) -> None:
        """Stop every child started so far; called on every path out."""

    def _stop_all(self) -> None:
        with interrupts.deferred():
            self._stop_children()
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None


def require_haproxy(haproxy: Path) -> None:
    if not haproxy.exists():
        raise HairlineError(
            f"HAProxy not found at {haproxy}",
            hint="install it (`make sysdeps`, or `apt-get install haproxy`)",
        )


def require_nginx(nginx: Path) -> None:
    if not nginx.exists():
        raise HairlineError(
            f"nginx not found at {nginx}",
            hint="install it (`apt-get install nginx-light`, or `nginx`)",
        )


def haproxy_head(socket_path: Path, port: int) -> str:
    """A loopback fleet's HAProxy configuration up to its frontend's bind line: the admin
    socket (``level admin``: weights and states change through it), HTTP keep-alive."""
    return f"""\
global
    stats socket {socket_path} mode 600 level admin
    maxconn 4000
    nbthread 1

defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    option http-keep-alive

frontend users
    bind 127.0.0.1:{port}
"""


def start_haproxy(
    haproxy: Path, folder: Path, config: str, port: int, *, own_session: bool = False
) -> subprocess.Popen[str]:
    """Write ``config`` to ``folder/haproxy.cfg``, start HAProxy in the foreground on it
    (killed with its parent; its log in ``folder/haproxy.log``) and wait until its admin
    socket ``folder/admin.sock`` exists and ``127.0.0.1:port`` accepts connections."""
    path = folder / "haproxy.cfg"
    path.write_text(config)
    return _start(
        "HAProxy", [str(haproxy), "-db", "-f", str(path)], folder / "haproxy.log",
        folder / "admin.sock", port, check=f"{haproxy} -c -f {path}", own_session=own_session,
    )  # fmt: skip


def nginx_config(folder: Path, port: int, upstream_file: Path, upstream: str) -> str:
    """A loopback fleet's nginx main configuration: in the foreground (``daemon off``, a
    master that reloads and one worker, as HAProxy's one thread), every path in ``folder``,
    the upstream block included from ``upstream_file`` (the file hairline rewrites), the
    frontend on ``127.0.0.1:port`` proxying to it over kept-alive HTTP/1.1 connections."""
    tmp = folder / "nginx-tmp"
    return f"""\
daemon off;
worker_processes 1;
pid {folder / "nginx.pid"};
error_log {folder / "nginx.log"} notice;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {upstream_file};
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def start_nginx(
    nginx: Path, folder: Path, config: str, port: int, *, own_session: bool = False
) -> subprocess.Popen[str]:
    """Write ``config`` to ``folder/nginx.conf`` (from :func:`nginx_config`), start nginx's
    master in the foreground on it (killed with its parent; its output in
    ``folder/nginx.out``) and wait until its pid file exists and ``127.0.0.1:port``
    accepts connections."""
    path = folder / "nginx.conf"
    path.write_text(config)
    (folder / "nginx-tmp").mkdir(exist_ok=True)
    return _start(
        "nginx", [str(nginx), "-c", str(path)], folder / "nginx.out", folder / "nginx.pid",
        port, check=f"{nginx} -t -c {path}", own_session=own_session,
    )  # fmt: skip


def _start(
    name: str,
    command: list[str],
    log_path: Path,
    ready_file: Path,
    port: int,
    *,
    check: str,
    own_session: bool,
) -> subprocess.Popen[str]:
    """Start a balancer in the foreground (its output in ``log_path``, in its folder) and
    wait until ``ready_file`` exists and ``127.0.0.1:port`` accepts connections."""
    log = log_path.open("w")
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True,
        preexec_fn=child_setup(), cwd=log_path.parent, start_new_session=own_session,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if ready_file.exists():
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=0.5),
            ):
                return proc
        time.sleep(0.02)
    stop_process(proc)
    text = log_path.read_text(errors="replace")
    raise HairlineError(
        f"{name} did not start on 127.0.0.1:{port} within {_START_TIMEOUT_S:.0f} s "
        f"(exit status {proc.poll()}): {text.strip()[-2000:]}",
        hint=f"run `{check}` to check it",
    )
