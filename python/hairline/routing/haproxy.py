"""A routing fleet's HAProxy: the configuration, and placements applied to it live.

Semantic routing (HHVM section 2.2): one frontend whose path ACLs send each partition's
endpoints to that partition's backend; every backend lists every host, those the partition
does not have ``disabled``, and picks between two random hosts by their load (``balance
random(2)``, the paper's pick-2); paths no partition names go to the default backend of
all hosts. Hosts move between partitions through the runtime API (``set server B/S state
ready|maint``, ``weight``), never by a reload, so no connection is dropped and the
counters of ``show stat`` keep counting. The round-robin policy is the baseline: one
backend of every host, ``balance roundrobin``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from hairline.lb.haproxy import HAProxyRuntime, stat_rows
from hairline.lb.launch import haproxy_head
from hairline.routing.balancer import Placement
from hairline.routing.partition import Partitioning

__all__ = ["DEFAULT_BACKEND", "POLICIES", "HAProxyRouter", "haproxy_config", "server_weights"]

POLICIES = ("semantic", "round-robin")
DEFAULT_BACKEND = "any"
# A whole host's weight; a split host's part is in proportion (HAProxy allows 1..256).
_WHOLE = 100
# HAProxy reads at most 64 words a line: long endpoint lists take several `acl` lines.
_ACL_WORDS = 32


def server_weights(placement: Placement, partitions: Sequence[str]) -> dict[str, dict[str, int]]:
    """Backend -> host -> weight, 0 for a host the partition does not have."""
    fractions = placement.weights()
    out: dict[str, dict[str, int]] = {}
    for p in partitions:
        mine = fractions.get(p, {})
        out[p] = {
            host: max(1, round(_WHOLE * mine[host])) if mine.get(host, 0.0) > 0 else 0
            for host in placement.home
        }
    return out


def haproxy_config(
    *,
    port: int,
    socket_path: Path,
    servers: Mapping[str, str],
    partitioning: Partitioning | None = None,
    placement: Placement | None = None,
) -> str:
    """The whole configuration: semantic when given a partitioning and its placement on
    ``servers`` (name -> ``host:port``), round-robin otherwise."""
    head = haproxy_head(socket_path, port)
    if partitioning is None or placement is None:
        every = "".join(f"    server {name} {address}\n" for name, address in servers.items())
        return head + f"    default_backend all\n\nbackend all\n    balance roundrobin\n{every}"
    names = [p.name for p in partitioning.partitions]
    weights = server_weights(placement, names)
    lines = []
    for p in partitioning.partitions:
        for i in range(0, len(p.endpoints), _ACL_WORDS):
            lines.append(f"    acl is_{p.name} path {' '.join(p.endpoints[i : i + _ACL_WORDS])}")
    lines += [f"    use_backend {name} if is_{name}" for name in names]
    lines.append(f"    default_backend {DEFAULT_BACKEND}")
    backends = [_backend(DEFAULT_BACKEND, servers, dict.fromkeys(servers, _WHOLE))]
    backends += [_backend(name, servers, weights[name]) for name in names]
    return head + "\n".join(lines) + "\n" + "".join(backends)


def _backend(name: str, servers: Mapping[str, str], weights: Mapping[str, int]) -> str:
    rows = "".join(
        f"    server {host} {address} weight {weights[host] or 1}"
        + ("" if weights[host] else " disabled")
        + "\n"
        for host, address in servers.items()
    )
    return f"\nbackend {name}\n    balance random(2)\n{rows}"


class HAProxyRouter:
    """The partitions' backends of a running HAProxy, moved by placements."""

    def __init__(self, socket_path: Path, partitions: Sequence[str]) -> None:
        self.socket_path = socket_path
        self.partitions = tuple(partitions)
        self._backends = {p: HAProxyRuntime(socket_path, p) for p in self.partitions}

    def apply(self, placement: Placement) -> None:
        """Every backend's hosts and weights as ``placement`` has them. Hosts are enabled
        everywhere first and disabled after, so no backend is ever without a host."""
        weights = server_weights(placement, self.partitions)
        for p, backend in self._backends.items():
            wanted = {h: w for h, w in weights[p].items() if w > 0}
            backend.set_weights(wanted)
            backend.set_states(dict.fromkeys(wanted, "ready"))
        for p, backend in self._backends.items():
            backend.set_states({h: "maint" for h, w in weights[p].items() if w == 0})

    def enabled(self) -> dict[str, dict[str, int]]:
        """Backend -> the hosts it may send to, with their weights (from ``show stat``)."""
        out: dict[str, dict[str, int]] = {p: {} for p in self.partitions}
        for row in stat_rows(self.socket_path):
            backend, server = row.get("pxname", ""), row.get("svname", "")
            up = row.get("status", "").upper() != "MAINT"
            if backend in out and server not in ("BACKEND", "FRONTEND") and up:
                out[backend][server] = int(row.get("weight") or 0)
        return out

    def requests(self) -> dict[str, int]:
        """Backend -> the HTTP requests it has taken since HAProxy started."""
        out = dict.fromkeys(self.partitions, 0)
        for row in stat_rows(self.socket_path):
            if row.get("svname") == "BACKEND" and row.get("pxname") in out:
                out[row["pxname"]] = int(row.get("req_tot") or row.get("stot") or 0)
        return out
