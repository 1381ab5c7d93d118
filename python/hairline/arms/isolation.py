"""An isolated arm's surroundings: its namespace and the relays that reach out of it.

A service in its namespace (:mod:`hairline.arms.netns`) sees a loopback of its own. An
allowed loopback destination (``127.0.0.1:5432``) is served inside the namespace by a plain
TCP relay, the egress proxy listening on the same address there and connecting to the
host's, so the service's configuration does not change. Each
``[[service.isolation.http]]`` downstream gets the egress proxy in HTTP mode: reads are
forwarded, writes answered with the synthetic response and counted, never forwarded.
Relays start before the service and stop after it; :meth:`ArmIsolation.report` is what the
lab stores per batch and the report shows as side effects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from hairline.arms.egress import EgressProxy, EgressSpec, EgressStats
from hairline.arms.netns import ArmNamespace
from hairline.config.isolation import IsolationConfig, is_loopback
from hairline.config.policy import DROPPED_WRITES

__all__ = ["ArmIsolation", "dropped_write_rows", "relay_specs"]


def dropped_write_rows(reports: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, float]]:
    """(arm, metric, writes dropped) per downstream endpoint of one batch, from each isolated
    arm's :meth:`ArmIsolation.report`: every endpoint any arm wrote to, 0 for the arms that
    did not (a write only the candidate makes is the change to see). The counts cover the
    arm's life in the batch, warm-up included: every arm runs the same schedule in lockstep,
    so the arms compare; the per-request rate is not known for the warm-up."""
    counts: dict[str, dict[str, int]] = {}
    for arm, report in reports.items():
        mine = counts.setdefault(arm, {})
        for address, relay in (report.get("downstreams") or {}).items():
            for endpoint, n in (relay.get("dropped") or {}).items():
                key = f"{DROPPED_WRITES}[{address} {endpoint}]"
                mine[key] = mine.get(key, 0) + int(n)
    metrics = sorted({m for mine in counts.values() for m in mine})
    return [
        (arm, metric, float(counts[arm].get(metric, 0)))
        for arm in sorted(counts)
        for metric in metrics
    ]


def relay_specs(isolation: IsolationConfig, netns: Path) -> list[EgressSpec]:
    """One egress proxy per reachable loopback destination and per HTTP downstream."""
    relayed = [address for address in isolation.allow if is_loopback(address)]
    specs = [EgressSpec(listen=a, upstream=a, netns=netns) for a in relayed]
    for http in isolation.http:
        specs.append(
            EgressSpec(
                listen=http.address,
                upstream=http.address,
                netns=netns,
                http=True,
                forward=tuple(http.forward),
                drop_status=http.drop_status,
                drop_body=http.drop_body,
                drop_content_type=http.drop_content_type,
            )
        )
    return specs


class ArmIsolation:
    """The namespace ``name`` and its relays. A context manager; ``stop()`` is idempotent
    and removes everything, relays first."""

    def __init__(
        self,
        name: str,
        isolation: IsolationConfig,
        *,
        port: int,
        workdir: Path,
        engine: Path | None = None,
    ) -> None:
        self.namespace = ArmNamespace(name, isolation, port=port)
        self.isolation = isolation
        self._workdir = workdir
        self._engine = engine
        self._proxies: list[tuple[EgressSpec, EgressProxy]] = []
        self._final: dict[str, EgressStats] = {}

    @property
    def address(self) -> str:
        return self.namespace.address

    @property
    def netns_path(self) -> Path:
        return self.namespace.path

    def start(self) -> ArmIsolation:
        try:
            self.namespace.create()
            self._workdir.mkdir(parents=True, exist_ok=True)
            specs = relay_specs(self.isolation, self.namespace.path)
            for spec in specs:
                kind = "http" if spec.http else "tcp"
                stats = self._workdir / f"{self.namespace.name}-{kind}-{spec.listen}.json"
                proxy = EgressProxy(spec, stats_path=stats, engine=self._engine)
                self._proxies.append((spec, proxy))
                proxy.start()
        except BaseException:
            self.stop()
            raise
        return self

    def report(self) -> dict[str, object]:
        """Refused connections per destination, and per downstream what its proxy carried:
        connections, upstream errors, forwarded and dropped requests per endpoint."""
        downstreams: dict[str, dict[str, object]] = {}
        for spec, proxy in self._proxies:
            stats = self._final.get(spec.listen)
            if stats is None:
                with contextlib.suppress(OSError, ValueError):
                    stats = proxy.stats()
            if stats is None:
                continue
            downstreams[spec.listen] = {
                "mode": "http" if spec.http else "tcp",
                "connections": stats.connections,
                "upstream_errors": stats.upstream_errors,
                "forwarded": dict(stats.forwarded),
                "dropped": dict(stats.dropped),
            }
        return {
            "namespace": self.namespace.name,
            "denied": self.namespace.denied(),
            "downstreams": downstreams,
        }

    def stop(self) -> None:
        for spec, proxy in self._proxies:
            with contextlib.suppress(Exception):
                self._final[spec.listen] = proxy.stop()
        self.namespace.remove()

    def __enter__(self) -> ArmIsolation:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
