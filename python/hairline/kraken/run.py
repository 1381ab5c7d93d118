"""One ``hairline kraken`` run: a Kraken file's test made phases and run against its load
balancer while the engine sends the users' traffic through it.

A cluster test without ``per_server_capacity_per_s`` first measures one server's capacity
by queueing delay (Kraken 5.1.1: its first server alone, the cluster's other servers
drained, so that no shared dependency saturates) and takes theoretical capacity as that
times the servers under test (Kraken 3.4); then it shifts traffic to the cluster.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from hairline.engine import ControlledLoad, LoadPlan, find_engine
from hairline.errors import ConfigError, EngineError
from hairline.kit.janitor import OwnedFolder
from hairline.kraken.control import Policy
from hairline.kraken.controller import Controller, PhaseSpec
from hairline.kraken.file import KrakenTest, check_servers
from hairline.kraken.fleet import LocalFleet
from hairline.kraken.health import HealthMetric
from hairline.kraken.promql import parse
from hairline.kraken.results import KrakenResult, Step
from hairline.lb.balancer import LbSpec
from hairline.lb.factory import open_balancer

__all__ = ["QUEUE_METRIC", "KrakenPlan", "plan_of", "queue_metric", "run_kraken"]

#: The name of the queueing-delay metric a server test adds to the file's metrics.
QUEUE_METRIC = "server_queue_delay_ms"
_TRACE_REQUESTS = 20_000


@dataclass(frozen=True)
class KrakenPlan:
    """What a Kraken file asks for, as the controller needs it."""

    file: Path
    kind: Literal["cluster", "server"]
    servers: tuple[str, ...]
    health: tuple[HealthMetric, ...]
    policy: Policy
    control_interval_s: float
    sample_interval_s: float
    max_duration_s: float
    #: The load balancer whose weights move (a local fleet's replaces it).
    lb: LbSpec
    rate_per_s: float
    start_share: float | None = None
    queue_limit_ms: float = 20.0
    per_server_capacity_per_s: float | None = None
    trace: Path | None = None
    #: The load balancer's frontend, where the users' traffic goes.
    url: str | None = None


_NEEDED = {
    "haproxy": {
        "socket": (
            "HAProxy's admin socket",
            'write socket = "/run/haproxy/admin.sock" (a `stats socket ... level admin` of '
            "HAProxy's config)",
        ),
    },
    "nginx": {
        "config": (
            "nginx's main configuration",
            'write config = "/etc/nginx/nginx.conf" (what `nginx -c` takes)',
        ),
        "upstream_file": (
            "the file holding the upstream block, which hairline rewrites",
            'write upstream_file = "/etc/nginx/conf.d/web-upstream.conf" (included by the '
            "main configuration)",
        ),
    },
}


def plan_of(test: KrakenTest, *, local_fleet: bool = False) -> KrakenPlan:
    """The plan of a checked Kraken file. Without ``local_fleet`` the file must say where
    its load balancer is (``[lb] socket`` for HAProxy; ``config`` and ``upstream_file``
    for nginx)."""
    t = test.test
    lb = test.lb
    for name, (what, fix) in _NEEDED[lb.kind].items():
        if getattr(lb, name) is None and not local_fleet:
            raise ConfigError(
                f"{test.path}: [lb] {name} is missing: {what}",
                hint=f"{fix}, or run with --local-fleet N",
            )
    return KrakenPlan(
        file=test.path,
        kind=t.kind,
        servers=tuple(t.servers),
        health=test.health,
        policy=test.policy(),
        control_interval_s=t.control_interval_s,
        sample_interval_s=t.sample_interval_s,
        max_duration_s=t.max_duration_s,
        lb=LbSpec(
            kind=lb.kind,
            backend=lb.backend,
            socket=Path(lb.socket) if lb.socket else None,
            config=Path(lb.config) if lb.config else None,
            upstream_file=Path(lb.upstream_file) if lb.upstream_file else None,
        ),
        rate_per_s=test.traffic.rate_per_s,
        start_share=t.start_share,
        queue_limit_ms=t.queue_limit_ms,
        per_server_capacity_per_s=t.per_server_capacity_per_s,
        trace=Path(test.traffic.trace) if test.traffic.trace else None,
        url=test.traffic.url,
    )


def queue_metric(limit_ms: float, window_s: float) -> HealthMetric:
    """The worst server's mean queueing delay, NOMORE from ``limit_ms``: a server test's
    steps shrink to 1% within 10% of the limit and it holds once a server crossed it."""
    key = (
        f"1000 * max(rate(sample_queue_seconds_sum[{window_s:g}s])"
        f" / rate(sample_queue_seconds_count[{window_s:g}s]))"
    )
    ranges = (
        (0.0, 0.5 * limit_ms),
        (0.5 * limit_ms, 0.75 * limit_ms),
        (0.75 * limit_ms, limit_ms),
        (limit_ms, 3 * limit_ms),
        (3 * limit_ms, float("inf")),
    )
    return HealthMetric(
        name=QUEUE_METRIC,
        entity="cluster",
        key=key,
        ranges=ranges,
        time_window_s=window_s,
        sample_fraction=0.5,
        query=parse(key),
    )


def server_phase(plan: KrakenPlan, servers: tuple[str, ...], drained: tuple[str, ...]) -> PhaseSpec:
    # A cluster's metrics judge the cluster; a server test keeps the users' (engine) and
    # named servers' metrics and judges each server by its queueing delay.
    kept = tuple(m for m in plan.health if m.entity != "cluster")
    # A server tested before its cluster takes steps in proportion to its part of the
    # cluster: 15 points of all traffic would be half its capacity in one step, and its
    # queueing delay, flat until the knee, would then say little about where the knee is.
    part = len(servers) / (len(servers) + len(drained))
    policy = replace(
        plan.policy,
        steps={level: step * part for level, step in plan.policy.steps.items()},
        near_step=plan.policy.near_step * part,
    )
    return PhaseSpec(
        kind="server",
        servers=servers,
        drained=drained,
        health=(*kept, queue_metric(plan.queue_limit_ms, plan.control_interval_s)),
        policy=policy,
        control_interval_s=plan.control_interval_s,
        sample_interval_s=plan.sample_interval_s,
        max_duration_s=plan.max_duration_s,
        start_share=None,
        queue_limit_ms=plan.queue_limit_ms,
    )


def cluster_phase(plan: KrakenPlan) -> PhaseSpec:
    return PhaseSpec(
        kind="cluster",
        servers=plan.servers,
        health=plan.health,
        policy=plan.policy,
        control_interval_s=plan.control_interval_s,
        sample_interval_s=plan.sample_interval_s,
        max_duration_s=plan.max_duration_s,
        start_share=plan.start_share,
        queue_limit_ms=plan.queue_limit_ms,
    )


def _sample_trace(folder: Path, engine: Path) -> Path:
    path = folder / "users.jsonl"
    done = subprocess.run(
        [str(engine), "sample-trace", "--requests", str(_TRACE_REQUESTS), "--output", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise EngineError(f"hairline-engine sample-trace failed: {done.stderr.strip()}")
    return path


def run_kraken(
    plan: KrakenPlan,
    *,
    fleet: LocalFleet | None = None,
    engine: Path | None = None,
    on_step: Callable[[str, Step], None] = lambda phase, step: None,
    watchdog_log: Path | None = None,
    folder: Path | None = None,
) -> KrakenResult:
    """Run the plan's test (and the server test before a cluster test without a
    per-server capacity); the weights are back as they were when this returns or raises.
    Temporary files (the users' trace, the engine's) go in ``folder``, or in a folder of
    its own that a janitor removes even if this process is killed (kit/janitor.py)."""
    if fleet is not None:
        plan = replace(plan, lb=fleet.lb_spec, url=plan.url or fleet.frontend_url)
    if not plan.url:
        raise ConfigError(
            f"{plan.file}: [traffic] url is missing: where the users' traffic goes",
            hint='write the load balancer\'s frontend, url = "http://127.0.0.1:8080", '
            "or run with --local-fleet N",
        )
    balancer = open_balancer(plan.lb)
    # Before anything starts: a server the balancer lacks is a mistake in the file.
    check_servers(plan.file, plan.servers, balancer.weights(), balancer.describe())
    addresses = fleet.addresses if fleet is not None else balancer.addresses()
    metrics_urls = {name: f"http://{address}/metrics" for name, address in addresses.items()}
    binary = engine or find_engine()
    with contextlib.ExitStack() as stack:
        tmp = folder or stack.enter_context(OwnedFolder("hairline-kraken-"))
        trace = plan.trace or _sample_trace(tmp, binary)
        load_plan = LoadPlan(
            targets=(("users", plan.url),),
            duration_s=0,
            rate_per_s=plan.rate_per_s,
            trace=trace,
            interval_ms=round(plan.sample_interval_s * 1000),
            connections=64,
            timeout_ms=5000,
            spin_us=0,
        )
        # The engine out of our process group: Ctrl-C is ours to act on, weights first.
        with ControlledLoad(load_plan, engine=binary, folder=tmp, own_session=True) as load:
            controller = Controller(plan.lb, metrics_urls, load, watchdog_log=watchdog_log)
            server_test = None
            per_server = plan.per_server_capacity_per_s
            notes: list[str] = []
            if plan.kind == "cluster" and per_server is None:
                controller.on_step = lambda step: on_step("server", step)
                first, rest = plan.servers[:1], plan.servers[1:]
                server_test = controller.run(server_phase(plan, first, rest))
                per_server = server_test.capacity_per_s
                if server_test.aborted:
                    return KrakenResult(
                        file=str(plan.file),
                        kind=plan.kind,
                        test=server_test,
                        queue_limit_ms=plan.queue_limit_ms,
                    )
                if per_server is None:
                    why = server_test.server_capacities[0].queueing_unmeasured
                    notes.append(
                        f"{first[0]}'s {why}: no per-server capacity, so no theoretical capacity"
                        if why
                        else f"{first[0]}'s queueing delay never reached "
                        f"{plan.queue_limit_ms:g} ms: no per-server capacity, so no theoretical "
                        "capacity"
                    )
            controller.on_step = lambda step: on_step(plan.kind, step)
            if plan.kind == "server":
                test = controller.run(server_phase(plan, plan.servers, ()))
                per_server = test.capacity_per_s
            else:
                test = controller.run(cluster_phase(plan))
    server_kind = plan.kind == "server"
    theoretical = per_server * len(plan.servers) if per_server is not None else None
    return KrakenResult(
        file=str(plan.file),
        kind=plan.kind,
        test=test,
        server_test=server_test,
        per_server_capacity_per_s=per_server,
        # A server test's answer is the per-server capacity itself.
        theoretical_capacity_per_s=None if server_kind else theoretical,
        measured_capacity_per_s=test.capacity_per_s,
        queue_limit_ms=plan.queue_limit_ms,
        notes=tuple(notes),
    )
