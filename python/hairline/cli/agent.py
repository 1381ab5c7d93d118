"""``hairline agent start|stop``: a test machine joins the lab as a Ray node, or leaves it.

The database URL comes from ``--db``, ``$HAIRLINE_DB`` or the private file
``$HAIRLINE_DB_FILE`` names (better on a shared machine: a command line is visible to
every user); Ray's token from ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``.

``agent start --foreground`` is the same start for a supervisor (systemd, a Kubernetes
pod): a flag rather than a command of its own (``agent run``) because every option and
everything it does is ``agent start``'s; only who waits on the node differs. It stays
while the node runs, keeps its hosts' ``last_seen_at`` fresh, leaves on SIGTERM or Ctrl-C
as ``agent stop --force`` would (exit 0), and exits 2 when the node stops by itself, its
hosts marked unhealthy, so that the supervisor starts it again.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

import click
from rich.console import Console

from hairline.cli._base import console, main
from hairline.cli._options import db_option
from hairline.errors import ConfigError, NodeLost
from hairline.hosts.agent import (
    AgentSpec,
    AgentStartedJson,
    AgentStoppedJson,
    local_ip_towards,
    parse_cpu_list,
    server_type,
)
from hairline.hosts.facts import probe_facts
from hairline.hosts.node import NodeEnded, NodeState, StartedNode, start_node, stop_node, watch_node
from hairline.hosts.registry import (
    Registered,
    disable_hosts,
    mark_seen,
    mark_unhealthy,
    register_host,
)
from hairline.store.db import Store, open_store

_DEFAULT_HOME = Path.home() / ".hairline-agent"
_HEARTBEAT_S = 30.0


@main.group()
def agent() -> None:
    """Join this machine to a lab on Ray (its hosts registered in the database), or leave."""


def _default_cpus(
    host_cpus: tuple[tuple[int, ...], ...], housekeeping: tuple[int, ...] | None
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], str | None]:
    """Hosts and housekeeping CPUs with their defaults filled; a warning when they share."""
    online = tuple(sorted(os.sched_getaffinity(0)))
    if not host_cpus:
        keep = housekeeping or online[:1]
        rest = tuple(c for c in online if c not in keep)
        host_cpus = (rest or online,)
    used = {c for cpus in host_cpus for c in cpus}
    if housekeeping is None:
        housekeeping = tuple(c for c in online if c not in used) or online
    warning = None
    if used & set(housekeeping):
        warning = (
            f"Ray's daemons share CPUs {sorted(used & set(housekeeping))} with the hosts; "
            "their ~1% of a CPU then lands in the arms' measurements"
        )
    return host_cpus, housekeeping, warning


@agent.command()
@click.option("--address", "head_address", metavar="HOST:PORT",
              help="The Ray head to join (not with --head).")  # fmt: skip
@click.option("--head", is_flag=True, help="Start a Ray head here (no hosts) instead.")
@click.option("--port", "head_port", type=click.IntRange(1, 65535), default=6379,
              show_default=True, help="With --head: the head's port.")  # fmt: skip
@click.option("--name", help="The host's name in the inventory (default: the hostname).")
@click.option("--region", default="default", show_default=True)
@click.option("--server-type", "server", help="Default: the firmware's product name.")
@click.option("--cpus", "cpus_text", multiple=True, metavar="LIST",
              help="A host's CPUs (e.g. 2-5); repeat for several hosts on this machine. "
              "Default: every CPU but the housekeeping ones.")  # fmt: skip
@click.option("--housekeeping-cpus", "housekeeping_text", metavar="LIST",
              help="CPUs for Ray's daemons (default: those of no host).")  # fmt: skip
@click.option("--node-ip", help="This node's IP address (default: the one facing the head).")
@db_option
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=_DEFAULT_HOME,
              show_default=True, help="The agent's state, logs and artifact cache.")  # fmt: skip
@click.option("--ray-temp-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Ray's session folder (default: /tmp/hl-ray-UID/NAME; short).")  # fmt: skip
@click.option("--foreground", is_flag=True,
              help="Stay while the node runs, for a supervisor (systemd, a Kubernetes pod): "
              "SIGTERM or Ctrl-C disables the hosts and stops the node (exit 0); the node "
              "stopping by itself exits 2 (docs/scale-out.md).")  # fmt: skip
@click.option("--heartbeat-s", type=click.FloatRange(0.1), default=None, metavar="SECONDS",
              help=f"With --foreground: how often the hosts' last_seen_at is written "
              f"(default {_HEARTBEAT_S:g}).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True,
              help="Print what was started as JSON (with --foreground: one line, and one "
              "more when it leaves).")  # fmt: skip
def start(
    head_address: str | None,
    head: bool,
    head_port: int,
    name: str | None,
    region: str,
    server: str | None,
    cpus_text: tuple[str, ...],
    housekeeping_text: str | None,
    node_ip: str | None,
    db_url: str | None,
    home: Path,
    ray_temp_dir: Path | None,
    foreground: bool,
    heartbeat_s: float | None,
    as_json: bool,
) -> None:
    """Start this machine's Ray node and register its hosts (or, with --head, a head).

    A host that was marked unhealthy (its node died mid-trial) is healthy again once its
    agent registers it here. With --foreground the command stays until SIGTERM or Ctrl-C
    (exit 0) or until the node stops by itself (exit 2).
    """
    out = console()
    if head == (head_address is not None):
        raise ConfigError(
            "give exactly one of --address HOST:PORT (join a head) and --head (start one)",
            hint="e.g. hairline agent start --address 10.0.0.1:6379",
        )
    if heartbeat_s is not None and not foreground:
        raise ConfigError(
            "--heartbeat-s is for an agent that stays: add --foreground",
            hint="hairline agent start --foreground --heartbeat-s 30 ...",
        )
    host_cpus = tuple(parse_cpu_list(c, flag="--cpus") for c in cpus_text)
    housekeeping = (
        parse_cpu_list(housekeeping_text, flag="--housekeeping-cpus") if housekeeping_text else None
    )
    if head:
        housekeeping = housekeeping or tuple(sorted(os.sched_getaffinity(0)))
        warning = None
    else:
        host_cpus, housekeeping, warning = _default_cpus(host_cpus, housekeeping)
    facts = probe_facts()
    spec = AgentSpec(
        name=name or ("head" if head else socket.gethostname()),
        home=home,
        head_address=head_address,
        node_ip=node_ip or local_ip_towards(head_address or "192.0.2.1:6379"),
        host_cpus=host_cpus,
        housekeeping_cpus=housekeeping,
        region=region,
        server_type=server or server_type(),
        head_port=head_port,
        temp_dir=ray_temp_dir,
    )
    store = None if head else open_store(db_url)
    try:
        try:
            node = start_node(spec, facts, foreground=foreground)
            try:
                registered = _register(store, spec) if store is not None else []
                # From here on SIGTERM and Ctrl-C ask a foreground agent to leave (_stay).
                stop = _stop_requests() if foreground else None
            except BaseException:
                _stop(node, spec)
                raise
        except KeyboardInterrupt:
            if not foreground:
                raise
            # A supervisor that stops the agent while it starts gets a clean exit too.
            out.print(f"{spec.name}: stopped before its node was up; nothing left running")
            return
        _print_started(out, spec, node.state, registered, warning, head=head,
                       as_json=as_json, foreground=foreground)  # fmt: skip
        if stop is not None:
            # The agent's own polling stays off the CPUs under test, like Ray's daemons.
            os.sched_setaffinity(0, spec.housekeeping_cpus)
            _stay(node, spec, registered, store, stop, heartbeat_s or _HEARTBEAT_S, out, as_json)
    finally:
        if store is not None:
            store.close()


def _register(store: Store, spec: AgentSpec) -> list[Registered]:
    registered = []
    for host, cpus in zip(spec.hosts, spec.host_cpus, strict=True):
        one = register_host(
            store, name=host, address=spec.node_ip, cpus=cpus, facts=probe_facts(cpus),
            region=spec.region, server_type=spec.server_type,
        )  # fmt: skip
        registered.append(one)
    return registered


def _stop(node: StartedNode, spec: AgentSpec, *, grace_s: float = 15.0) -> None:
    stop_node(node.state, grace_s=grace_s)
    node.process.wait()
    node.state.forget(spec.home)


def _print_started(
    out: Console,
    spec: AgentSpec,
    state: NodeState,
    registered: list[Registered],
    warning: str | None,
    *,
    head: bool,
    as_json: bool,
    foreground: bool,
) -> None:
    if as_json:
        document: AgentStartedJson = {
            "name": spec.name,
            "head": head,
            "address": state.head_address,
            "node_ip": spec.node_ip,
            "pid": state.pid,
            "log": state.log,
            "housekeeping_cpus": list(spec.housekeeping_cpus),
            "hosts": [
                {"name": r.name, "id": r.id, "cpus": list(c), "revived": r.revived}
                for r, c in zip(registered, spec.host_cpus, strict=False)
            ],
            "warning": warning,
            "foreground": foreground,
        }
        # A supervisor's journal keeps lines: one document per line there.
        click.echo(json.dumps(document, indent=None if foreground else 2))
        return
    if warning:
        out.print(f"[yellow]warning[/]: {warning}")
    what = "head" if head else "worker node"
    out.print(
        f"Ray {what} {spec.name} started on {spec.node_ip} (daemons on CPUs "
        f"{list(spec.housekeeping_cpus)}; log {state.log})"
    )
    if head:
        out.print(f"join test machines with: hairline agent start --address {state.head_address}")
    for r, cpus in zip(registered, spec.host_cpus, strict=False):
        again = " (healthy again)" if r.revived else ""
        out.print(f"host {r.name}: CPUs {list(cpus)}, region {spec.region}{again}")
    if foreground:
        out.print("staying in the foreground: SIGTERM or Ctrl-C stops the node and disables "
                  "its hosts")  # fmt: skip


def _stop_requests() -> threading.Event:
    """An event that SIGTERM and SIGINT set from now on, instead of interrupting."""
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    return stop


def _stay(
    node: StartedNode,
    spec: AgentSpec,
    registered: list[Registered],
    store: Store | None,
    stop: threading.Event,
    heartbeat_s: float,
    out: Console,
    as_json: bool,
) -> None:
    """Wait on the node; leave once ``stop`` is set, or raise :class:`NodeLost`."""

    def heartbeat() -> None:
        if store is None or not spec.hosts:
            return
        try:
            mark_seen(store, spec.hosts)
        except Exception as err:  # the database away is no reason to stop a healthy node
            out.print(f"[yellow]warning[/]: heartbeat not written ({err}); trying again")

    ended = watch_node(node, stop, heartbeat=heartbeat, heartbeat_s=heartbeat_s)
    # Leaving takes a few seconds (the node drains); a second signal must not cut it short.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    if ended is None:
        _leave(node, spec, store, out, as_json)
    else:
        _lost(node, spec, registered, store, ended)


def _leave(
    node: StartedNode, spec: AgentSpec, store: Store | None, out: Console, as_json: bool
) -> None:
    """Asked to stop: as `agent stop --force` (the hosts disabled, then the node stopped)."""
    disabled: list[str] = []
    problem = None
    if store is not None and spec.hosts:
        try:
            disabled = disable_hosts(store, spec.hosts, force=True)
        except Exception as err:  # stop the node all the same; say what was not done
            problem = f"hosts not disabled ({err}); a processor marks them unhealthy on use"
    _stop(node, spec)
    if as_json:
        left: AgentStoppedJson = {"name": spec.name, "stopped": True, "disabled": disabled,
                                  "warning": problem}  # fmt: skip
        click.echo(json.dumps(left))
        return
    if problem:
        out.print(f"[yellow]warning[/]: {problem}")
    out.print(
        f"{spec.name}: Ray node stopped"
        + (f"; hosts disabled: {', '.join(disabled)}" if disabled else "")
    )


def _lost(
    node: StartedNode,
    spec: AgentSpec,
    registered: list[Registered],
    store: Store | None,
    ended: NodeEnded,
) -> None:
    reason = f"its Ray node stopped by itself: {ended.how}"
    marked = "; its hosts are marked unhealthy until the agent registers them again"
    if store is not None:
        try:
            for r in registered:
                mark_unhealthy(store, r.id, reason)
        except Exception as err:
            marked = f"; its hosts could not be marked unhealthy ({err})"
    _stop(node, spec, grace_s=5.0)
    tail = f"; the log ({node.state.log}) ends:\n  {ended.log_tail}" if ended.log_tail else ""
    raise NodeLost(
        f"{spec.name}: {reason} after {ended.after_s:.0f} s{marked}{tail}",
        hint="a supervisor starts the agent again (systemd Restart=on-failure, a "
        "Kubernetes pod; docs/scale-out.md); while the head is away, starting fails until "
        "it is back",
    )


@agent.command()
@click.option("--name", help="The agent's name (default: the hostname; 'head' for a head).")
@click.option("--head", is_flag=True, help="Stop the head started here with --head.")
@click.option("--force", is_flag=True,
              help="Stop even while an experiment holds a host (it re-runs that trial "
              "elsewhere).")  # fmt: skip
@db_option
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=_DEFAULT_HOME,
              show_default=True)  # fmt: skip
@click.option("--json", "as_json", is_flag=True)
def stop(
    name: str | None, head: bool, force: bool, db_url: str | None, home: Path, as_json: bool
) -> None:
    """Disable this machine's hosts in the inventory and stop its Ray node (only this one).

    Refused while an experiment holds one of its hosts, unless --force.
    """
    state = NodeState.load(home, name or ("head" if head else socket.gethostname()))
    # An agent in the foreground leaves by itself when stop_node sends it SIGTERM: it
    # disables the hosts again (forced) and stops its node, and its supervisor sees exit 0.
    disabled: list[str] = []
    if state.hosts:
        store = open_store(db_url)
        try:
            disabled = disable_hosts(store, state.hosts, force=force)
        finally:
            store.close()
    stopped = stop_node(state)
    state.forget(home)
    if as_json:
        done: AgentStoppedJson = {"name": state.name, "stopped": stopped, "disabled": disabled}
        click.echo(json.dumps(done))
        return
    out = console()
    out.print(
        f"{state.name}: Ray node {'stopped' if stopped else 'was not running'}"
        + (f"; hosts disabled: {', '.join(disabled)}" if disabled else "")
    )
