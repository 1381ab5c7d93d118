"""Starting HAProxy on loopback: its configuration's head (an admin socket for the weights),
the process in the foreground until its socket and port answer, and the base class of a
fleet of children behind it (Kraken's ``--local-fleet``, semantic routing's fleet).

Every process is started with :func:`hairline.kit.procs.child_setup` (killed with its
parent) and stopped when the ``with`` block ends, on every path.
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
from hairline.kit.ports import free_port
from hairline.kit.procs import child_setup, stop_process

__all__ = [
    "HAPROXY",
    "Child",
    "FolderOfChildren",
    "free_port",
    "haproxy_head",
    "require_haproxy",
    "start_haproxy",
]

HAPROXY = Path("/usr/sbin/haproxy")
_START_TIMEOUT_S = 10.0


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[str]
    address: str = ""


class FolderOfChildren(abc.ABC):
    """What a loopback fleet shares: HAProxy required, a temporary folder for its configs,
    sockets and logs, children started on ``with`` entry and stopped on every path out. A
    subclass starts them in :meth:`_start_all` and stops them in :meth:`_stop_children`."""

    haproxy: Path
    folder: Path
    _tmp: tempfile.TemporaryDirectory[str] | None
    _folder_prefix = "hairline-fleet-"

    def __enter__(self) -> Self:
        require_haproxy(self.haproxy)
        self._tmp = tempfile.TemporaryDirectory(prefix=self._folder_prefix)
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

    @abc.abstractmethod
    def _start_all(self) -> None:
        """Start the children (each registered before the next starts)."""

    @abc.abstractmethod
    def _stop_children(self) -> None:
        """Stop every child started so far; called on every path out."""

    def _stop_all(self) -> None:
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


def start_haproxy(haproxy: Path, folder: Path, config: str, port: int) -> subprocess.Popen[str]:
    """Write ``config`` to ``folder/haproxy.cfg``, start HAProxy in the foreground on it
    (killed with its parent; its log in ``folder/haproxy.log``) and wait until its admin
    socket ``folder/admin.sock`` exists and ``127.0.0.1:port`` accepts connections."""
    path = folder / "haproxy.cfg"
    path.write_text(config)
    log = (folder / "haproxy.log").open("w")
    proc = subprocess.Popen(
        [str(haproxy), "-db", "-f", str(path)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True,
        preexec_fn=child_setup(), cwd=folder,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if (folder / "admin.sock").exists():
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=0.5),
            ):
                return proc
        time.sleep(0.02)
    stop_process(proc)
    text = (folder / "haproxy.log").read_text(errors="replace")
    raise HairlineError(
        f"HAProxy did not start on 127.0.0.1:{port} within {_START_TIMEOUT_S:.0f} s "
        f"(exit status {proc.poll()}): {text.strip()[-2000:]}",
        hint=f"run `{haproxy} -c -f {path}` to check it",
    )
