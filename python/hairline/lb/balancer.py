"""The load-balancer seam: the ``LoadBalancer`` protocol Kraken's controller and watchdog
use, the ``LbSpec`` that says which balancer and where (what
:func:`hairline.lb.factory.open_balancer` builds one from, in the controller and again in the
watchdog's process), and the integer weights that give the servers under test a share.

Kraken shifts live traffic by changing weights (Kraken 4.1), so a balancer needs only to
read and set its servers' weights, say where they are, and describe itself for messages.
A weight of 0 means "no new requests"; any other weight a share in proportion to it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, get_args

__all__ = [
    "MAX_WEIGHT",
    "LbKind",
    "LbSpec",
    "LoadBalancer",
    "share_of",
    "weights_for_share",
]

#: The largest weight :func:`weights_for_share` gives: HAProxy's limit (``set server ...
#: weight`` refuses more), and well within nginx's (which has none below 2^31).
MAX_WEIGHT = 256

LbKind = Literal["haproxy", "nginx"]


class LoadBalancer(Protocol):
    """The weights of one backend's servers, read and set while it serves. Servers are named
    (``web1``): by HAProxy's server names, by the comment that ends each nginx server line."""

    def weights(self) -> dict[str, int]:
        """Server name -> current weight (0: takes no new requests)."""
        ...

    def set_weights(self, weights: Mapping[str, int]) -> None:
        """Set the named servers' weights, all in one change (the others keep theirs)."""
        ...

    def addresses(self) -> dict[str, str]:
        """Server name -> ``host:port``, where its ``/metrics`` can be scraped."""
        ...

    def describe(self) -> str:
        """Where the weights live, for messages (``haproxy /run/admin.sock backend web``)."""
        ...


@dataclass(frozen=True)
class LbSpec:
    """Which load balancer and where: enough to open it in another process (the watchdog
    gets it as JSON). ``backend`` is HAProxy's backend or nginx's ``upstream`` block;
    ``socket`` HAProxy's admin socket; ``config`` nginx's main configuration (``nginx -c``)
    and ``upstream_file`` the file holding the upstream block, which hairline rewrites."""

    kind: LbKind
    backend: str
    socket: Path | None = None
    config: Path | None = None
    upstream_file: Path | None = None

    def to_json(self) -> str:
        fields = {
            "kind": self.kind,
            "backend": self.backend,
            "socket": self.socket,
            "config": self.config,
            "upstream_file": self.upstream_file,
        }
        return json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in fields.items()})

    @classmethod
    def from_json(cls, text: str) -> LbSpec:
        data = json.loads(text)
        kind = data["kind"]
        if kind not in get_args(LbKind):
            raise ValueError(f"unknown load balancer kind {kind!r}")
        paths = {
            k: Path(data[k]) if data.get(k) else None for k in ("socket", "config", "upstream_file")
        }
        return cls(kind=kind, backend=str(data["backend"]), **paths)


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
