"""``hairline agent start|stop``: a test machine joins the lab as a Ray node, or leaves it.

The database URL comes from ``--db``, ``$HAIRLINE_DB`` or the private file
``$HAIRLINE_DB_FILE`` names (better on a shared machine: a command line is visible to
every user); Ray's token from ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import click

from hairline.cli._base import console, main
from hairline.errors import ConfigError, HairlineError
from hairline.hosts.agent import (
    AgentSpec,
    NodeState,
    local_ip_towards,
    parse_cpu_list,
    server_type,
    start_node,
    stop_node,
)
from hairline.hosts.facts import probe_facts
from hairline.hosts.registry import disable_hosts, register_host
from hairline.store.db import open_store

_DEFAULT_HOME = Path.home() / ".hairline-agent"
_DB_HELP = "Database URL (default $HAIRLINE_DB, or the URL in the file $HAIRLINE_DB_FILE)."


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
@click.option("--db", "db_url", metavar="URL", help=_DB_HELP)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=_DEFAULT_HOME,
              show_default=True, help="The agent's state, logs and artifact cache.")  # fmt: skip
@click.option("--ray-temp-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Ray's session folder (default: /tmp/hl-ray-UID/NAME; short).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print what was started as JSON.")
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
    as_json: bool,
) -> None:
    """Start this machine's Ray node and register its hosts (or, with --head, a head).

    A host that was marked unhealthy (its node died mid-trial) is healthy again once its
    agent registers it here.
    """
    out = console()
    if head == (head_address is not None):
        raise ConfigError(
            "give exactly one of --address HOST:PORT (join a head) and --head (start one)",
            hint="e.g. hairline agent start --address 10.0.0.1:6379",
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
        state = start_node(spec, facts)
        registered = []
        if store is not None:
            try:
                for host, cpus in zip(spec.hosts, spec.host_cpus, strict=True):
                    registered.append(
                        register_host(
                            store,
                            name=host,
                            address=spec.node_ip,
                            cpus=cpus,
                            facts=probe_facts(cpus),
                            region=region,
                            server_type=spec.server_type,
                        )
                    )
            except HairlineError:
                stop_node(state)
                raise
    finally:
        if store is not None:
            store.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "name": spec.name,
                    "head": head,
                    "address": state.head_address,
                    "node_ip": spec.node_ip,
                    "pid": state.pid,
                    "log": state.log,
                    "housekeeping_cpus": list(housekeeping),
                    "hosts": [
                        {"name": r.name, "id": r.id, "cpus": list(c), "revived": r.revived}
                        for r, c in zip(registered, spec.host_cpus, strict=False)
                    ],
                    "warning": warning,
                },
                indent=2,
            )
        )
        return
    if warning:
        out.print(f"[yellow]warning[/]: {warning}")
    what = "head" if head else "worker node"
    out.print(
        f"Ray {what} {spec.name} started on {spec.node_ip} (daemons on CPUs "
        f"{list(housekeeping)}; log {state.log})"
    )
    if head:
        out.print(f"join test machines with: hairline agent start --address {state.head_address}")
    for r, cpus in zip(registered, spec.host_cpus, strict=False):
        again = " (healthy again)" if r.revived else ""
        out.print(f"host {r.name}: CPUs {list(cpus)}, region {region}{again}")


@agent.command()
@click.option("--name", help="The agent's name (default: the hostname; 'head' for a head).")
@click.option("--head", is_flag=True, help="Stop the head started here with --head.")
@click.option("--force", is_flag=True,
              help="Stop even while an experiment holds a host (it re-runs that trial "
              "elsewhere).")  # fmt: skip
@click.option("--db", "db_url", metavar="URL", help=_DB_HELP)
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
        click.echo(json.dumps({"name": state.name, "stopped": stopped, "disabled": disabled}))
        return
    out = console()
    out.print(
        f"{state.name}: Ray node {'stopped' if stopped else 'was not running'}"
        + (f"; hosts disabled: {', '.join(disabled)}" if disabled else "")
    )
