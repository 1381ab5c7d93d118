"""``hairline route partition PROFILE`` and ``hairline route fleet``: semantic request routing
(docs/routing.md).

``partition`` clusters a profile's endpoints by the code they run and writes the partitions
file; ``fleet`` starts N instances of a service behind HAProxy, routed by that file (and
balanced every interval) or round-robin, prints ``listening on 127.0.0.1:PORT`` and serves
until SIGTERM/SIGINT, when it stops everything it started.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click
from rich.console import Console

from hairline.cli._base import console, main
from hairline.cli._outputs import OutputFile, is_stdout, write_output
from hairline.errors import ConfigError
from hairline.routing.fleet import FleetOptions, RoutingFleet, describe, read_partitions
from hairline.routing.haproxy import POLICIES
from hairline.routing.partition import choose_k, partition, partitioning_json
from hairline.routing.profile import read_profile

__all__ = ["route"]


@main.group()
def route() -> None:
    """Semantic request routing: partitions of endpoints by code, and a fleet routed by them."""


@route.command("partition")
@click.argument("profile", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--k", "k_text", default="auto", show_default=True, metavar="N|auto",
              help="How many partitions; auto reads it from the working-set curve.")  # fmt: skip
@click.option("--k-max", type=click.IntRange(1), default=12, show_default=True,
              help="With --k auto, the largest K tried.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the partitions as JSON.")
@click.option("--output", type=OutputFile(), default=None,
              help="Write the partitions file (for `route fleet --partitions`) here ('-' for "
              "stdout).")  # fmt: skip
def partition_(
    profile: Path, k_text: str, k_max: int, seed: int, as_json: bool, output: Path | None
) -> None:
    """Cluster PROFILE's endpoints (folded stacks or JSON) by the functions they run."""
    read = read_profile(profile)
    curve: tuple[float, ...] = ()
    if k_text == "auto":
        k, curve = choose_k(read, k_max, seed=seed)
    elif k_text.isdigit() and int(k_text) >= 1:
        k = int(k_text)
    else:
        raise ConfigError(f"--k {k_text}: not a number of partitions", hint="pass --k 4 or auto")
    result = partition(read, k, seed=seed)
    data = partitioning_json(result, curve=curve)
    text = json.dumps(data, indent=2) + "\n"
    if as_json and not is_stdout(output):
        click.echo(text, nl=False)
    if output is not None:
        # With --json the partitions alone are on stdout: the line saying where the file
        # went is on stderr.
        write_output(Console(stderr=True) if as_json else console(), output, text)
    if as_json:
        return
    # The summary goes to stderr when the partitions file goes to stdout.
    echo = functools.partial(click.echo, err=is_stdout(output))
    if curve:
        points = "  ".join(f"{i}:{w:.1f}" for i, w in enumerate(curve, start=1))
        echo(f"average working set by K: {points}")
    shares = result.load_shares
    echo(f"{len(result.partitions)} partitions, average working set "
         f"{result.average_working_set:.1f} functions "
         f"(all endpoints together: {len(read.functions)})")  # fmt: skip
    for p in result.partitions:
        echo(f"  {p.name}: {len(p.endpoints)} endpoints, working set {p.working_set}, "
             f"load {shares[p.name]:.0%}: {' '.join(p.endpoints[:6])}"
             + (" ..." if len(p.endpoints) > 6 else ""))  # fmt: skip


@route.command("fleet", context_settings={"ignore_unknown_options": True})
@click.option("--policy", type=click.Choice(POLICIES), required=True)
@click.option("--instances", type=click.IntRange(1, 64), required=True,
              help="How many instances of the service to start.")  # fmt: skip
@click.option("--partitions", "partitions_path", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The partitions file (`route partition --output`); semantic only.")  # fmt: skip
@click.option("--port", type=click.IntRange(1, 65535), required=True,
              help="Where HAProxy listens (127.0.0.1).")  # fmt: skip
@click.option("--balance-interval-s", type=click.FloatRange(min=0, min_open=True),
              default=60.0, show_default=True,
              help="How often the balancer moves hosts between partitions.")  # fmt: skip
@click.option("--health", "health_path", default="/healthz", show_default=True,
              help="The instances' health path, waited on before HAProxy starts.")  # fmt: skip
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def fleet(
    policy: str,
    instances: int,
    partitions_path: Path | None,
    port: int,
    balance_interval_s: float,
    health_path: str,
    command: tuple[str, ...],
) -> None:
    """Serve N instances of `-- COMMAND ARGS...` ({port} = each instance's port) behind
    HAProxy on --port, until SIGTERM or SIGINT."""
    options = FleetOptions(
        policy=policy,
        instances=instances,
        port=port,
        command=command,
        partitioning=read_partitions(partitions_path) if partitions_path else None,
        balance_interval_s=balance_interval_s,
        health_path=health_path,
    )
    with RoutingFleet(options) as running:
        if running.state is not None:
            click.echo(describe(running.state))
        # The lab and scripts wait for this line.
        click.echo(f"listening on 127.0.0.1:{port}")
        sys.stdout.flush()
        try:
            running.serve(on_step=lambda state: click.echo(describe(state)))
        except KeyboardInterrupt:
            click.echo("stopping", err=True)
