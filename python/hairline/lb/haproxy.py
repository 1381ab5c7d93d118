"""Load-balancer weights, the one lever Kraken pulls: an adapter protocol, HAProxy's runtime
API over its admin socket, and the integer weights that give the servers under test a share.

Kraken shifts live traffic by changing weights (Kraken 4.1), so the controller needs only
``weights`` and ``set_weights``; an Envoy or cloud adapter implements the same protocol.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from hairline.errors import LoadBalancerError

__all__ = [
    "MAX_WEIGHT",
    "HAProxyRuntime",
    "LoadBalancer",
    "runtime_command",
    "share_of",
    "stat_rows",
    "weights_for_share",
]

#: HAProxy's largest server weight (``set server ... weight`` refuses more).
MAX_WEIGHT = 256


class LoadBalancer(Protocol):
    """The weights of one backend's servers, read and set while it serves."""

    def weights(self) -> dict[str, int]:
        """Server name -> current weight."""
        ...

    def set_weights(self, weights: Mapping[str, int]) -> None:
        """Set the named servers' weights (the others keep theirs)."""
        ...

    def describe(self) -> str:
        """Where the weights live, for messages (``haproxy /run/admin.sock backend web``)."""
        ...


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
        raise LoadBalancerError(
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


def share_of(weights: Mapping[str, int], servers_under_test: Sequence[str]) -> float:
    """The share of a round-robin backend's requests the servers under test get."""
    total = sum(weights.values())
    return sum(weights.get(s, 0) for s in servers_under_test) / total if total else 0.0


def weights_for_share(
    servers_under_test: Sequence[str], others: Sequence[str] | Mapping[str, int], share: float
) -> dict[str, int]:
    """Integer weights (0..256) that give ``servers_under_test`` ``share`` of the traffic as
    closely as possible. The servers under test are weighted alike (round robin spreads
    their part evenly); ``others`` too, or, given as a mapping of their weights, in those
    proportions (as nearly as integers allow), so that the rest of the region keeps its
    own balance. Of equally close answers the one with the largest weights wins, so that
    the next small step is still representable."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    if not servers_under_test:
        raise ValueError("no servers under test")
    proportions = dict(others) if isinstance(others, Mapping) else dict.fromkeys(others, 1)
    if not any(proportions.values()) and proportions:
        proportions = dict.fromkeys(proportions, 1)
    if not proportions or share >= 1.0:
        return {**dict.fromkeys(servers_under_test, MAX_WEIGHT), **dict.fromkeys(others, 0)}
    if share <= 0.0:
        return {**dict.fromkeys(servers_under_test, 0), **_scaled(proportions, MAX_WEIGHT)}
    n = len(servers_under_test)
    best: tuple[float, int, int, dict[str, int]] | None = None
    for largest in range(1, MAX_WEIGHT + 1):
        rest = _scaled(proportions, largest)
        total = sum(rest.values())
        # n*a / (n*a + total) = share  <=>  a = share * total / (n * (1 - share))
        ideal = share * total / (n * (1.0 - share))
        for a in {min(MAX_WEIGHT, max(0, int(ideal))), min(MAX_WEIGHT, int(ideal) + 1)}:
            error = abs(n * a / (n * a + total) - share)
            key = (round(error, 9), -(a + largest), a, rest)
            if best is None or key[:3] < best[:3]:
                best = key
    assert best is not None
    return {**dict.fromkeys(servers_under_test, best[2]), **best[3]}


def _scaled(proportions: Mapping[str, int], largest: int) -> dict[str, int]:
    """The weights in these proportions whose largest is ``largest`` (none below 1 that was
    above 0, so that no server of the rest is drained by rounding)."""
    top = max(proportions.values())
    return {s: 0 if w <= 0 else max(1, round(w * largest / top)) for s, w in proportions.items()}
