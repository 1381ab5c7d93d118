"""HAProxy as a Kraken load balancer: its runtime API over the admin socket (all of a weight
change in one command line, server states, ``show stat`` rows). It implements
:class:`hairline.lb.balancer.LoadBalancer`; :func:`hairline.lb.factory.open_balancer`
builds it from an ``[lb] kind = "haproxy"``.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path

from hairline.errors import LoadBalancerError, LoadBalancerGone
from hairline.lb.balancer import MAX_WEIGHT

__all__ = ["HAProxyRuntime", "runtime_command", "stat_rows"]


class HAProxyRuntime:
    """HAProxy's runtime API on a ``stats socket ... level admin`` (a Unix socket).

    Each call is one connection in HAProxy's non-interactive mode: the commands go out
    ``;``-separated in one line, so a weight change applies to every server at once rather
    than leaving the backend half-shifted between two round trips.
    """

    def __init__(self, socket_path: Path | str, backend: str, *, timeout_s: float = 2.0) -> None:
        self.socket_path = Path(socket_path)
        self.backend = backend
        self.timeout_s = timeout_s

    def describe(self) -> str:
        return f"haproxy {self.socket_path} backend {self.backend}"

    def weights(self) -> dict[str, int]:
        return {row["srv_name"]: int(row["srv_uweight"]) for row in self._servers_state()}

    def addresses(self) -> dict[str, str]:
        """Server name -> ``host:port``, where its ``/metrics`` can be scraped."""
        return {
            row["srv_name"]: f"{row['srv_addr']}:{row['srv_port']}" for row in self._servers_state()
        }

    def _servers_state(self) -> list[dict[str, str]]:
        command = f"show servers state {self.backend}"
        reply = self._command(command)
        lines = [line for line in reply.splitlines() if line.strip()]
        if not lines or not lines[0].strip().isdigit():
            raise self._refused(command, reply)
        header: list[str] = []
        rows = []
        for line in lines[1:]:
            if line.startswith("#"):
                header = line.lstrip("# ").split()
                continue
            row = dict(zip(header, line.split(), strict=False))
            if {"srv_name", "srv_uweight", "srv_addr", "srv_port"} <= row.keys():
                rows.append(row)
        if not rows:
            raise self._refused(command, reply)
        return rows

    def set_weights(self, weights: Mapping[str, int]) -> None:
        for server, weight in weights.items():
            if not 0 <= weight <= MAX_WEIGHT:
                raise LoadBalancerError(
                    f"weight {weight} for {self.backend}/{server} is outside 0..{MAX_WEIGHT}",
                    hint="HAProxy weights are integers from 0 to 256",
                )
        self._set_servers("weight", {s: str(w) for s, w in weights.items()})

    def set_states(self, states: Mapping[str, str]) -> None:
        """Set the named servers' administrative states (``ready``, ``maint``, ``drain``),
        all in one command line."""
        self._set_servers("state", states)

    def _set_servers(self, what: str, values: Mapping[str, str]) -> None:
        if not values:
            return
        commands = [f"set server {self.backend}/{s} {what} {v}" for s, v in values.items()]
        reply = self._command(";".join(commands))
        # Success is an empty answer per command; HAProxy's refusals are sentences.
        problems = [line.strip() for line in reply.splitlines() if line.strip()]
        if problems:
            raise self._refused("; ".join(commands), "\n".join(problems))

    def _command(self, line: str) -> str:
        return runtime_command(self.socket_path, line, timeout_s=self.timeout_s)

    def _refused(self, command: str, reply: str) -> LoadBalancerError:
        return LoadBalancerError(
            f"HAProxy ({self.socket_path}) refused `{command}`: {reply.strip() or 'no answer'}",
            hint=(
                f"check that backend {self.backend!r} and its servers exist in HAProxy's "
                "config (the [lb] backend and [test] servers fields) and that the socket "
                "is `level admin`"
            ),
        )


def runtime_command(socket_path: Path, line: str, *, timeout_s: float = 2.0) -> str:
    """One line of commands (``;``-separated) to HAProxy's admin socket, and its answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(socket_path))
            conn.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
    except OSError as err:
        # No socket file, or nothing listening on it (a killed HAProxy leaves the file).
        gone = isinstance(err, FileNotFoundError | ConnectionRefusedError)
        raise (LoadBalancerGone if gone else LoadBalancerError)(
            f"cannot reach HAProxy's admin socket {socket_path}: {err}",
            hint=(
                "check that HAProxy runs and that its config has "
                f"`stats socket {socket_path} level admin` (the [lb] socket field)"
            ),
        ) from err
    return b"".join(chunks).decode(errors="replace")


def stat_rows(socket_path: Path) -> list[dict[str, str]]:
    """``show stat``: one row per frontend, backend and server (``pxname``, ``svname``
    (``BACKEND`` for a backend's own row), ``req_tot``, ``stot``, ``status``, ...)."""
    reply = runtime_command(socket_path, "show stat")
    lines = [line for line in reply.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise LoadBalancerError(
            f"HAProxy ({socket_path}) answered `show stat` with {reply.strip()[:200]!r}",
            hint="check that the socket is HAProxy's `stats socket ... level admin`",
        )
    header = lines[0][2:].split(",")
    return [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]
