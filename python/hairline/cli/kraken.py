"""``hairline kraken FILE``: a live-traffic load test through load-balancer weights.

The file (docs/kraken.md) names the servers under test, the load balancer, the users'
traffic and the health metrics; ``--local-fleet N`` starts a cluster on loopback to run it
against. Exit status 0: the test finished with a capacity; 2: a user error or an abort (a
metric without samples, the load balancer unreachable, SIGINT/SIGTERM). The original
weights are back when it exits, whatever the path; if it is killed, its watchdog puts them
back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from hairline.cli._base import EXIT_ERROR, EXIT_OK, console, main
from hairline.cli._outputs import (
    OutputFile,
    is_stdout,
    stdout_taken,
    write_json_output,
    write_output,
)
from hairline.kit.jsonout import to_jsonable
from hairline.kraken.file import load_kraken_file
from hairline.kraken.fleet import FleetSpec, LocalFleet
from hairline.kraken.report import (
    print_summary,
    progress_line,
    render_html,
    result_json,
)
from hairline.kraken.results import Step
from hairline.kraken.run import plan_of, run_kraken

__all__ = ["kraken"]


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--local-fleet", "local_fleet", type=click.IntRange(1, 32), default=None, metavar="N",
    help="Start N sample services, a limited cache and the [lb] kind's balancer (HAProxy or "
    "nginx) on loopback and test them (fills in [lb]'s paths and the users' URL).",
)  # fmt: skip
@click.option("--json", "json_path", type=OutputFile(), default=None,
              help="Write the results as JSON here ('-' for stdout).")  # fmt: skip
@click.option("--html", "html_path", type=OutputFile(), default=None,
              help="Write a self-contained HTML report with plots here ('-' for "
              "stdout).")  # fmt: skip
@click.option(
    "--progress", "progress_mode", type=click.Choice(["lines", "json"]), default="lines",
    help="One line per control interval, or one JSON object per line (stderr when "
    "--json is '-').",
)  # fmt: skip
@click.option("--watchdog-log", default=None,
              type=OutputFile(refuse_stdout="the weight watchdog is a process of its own "
                              "that outlives a crash of this one (without the flag it logs "
                              "to stderr)"),
              help="Where the weight watchdog logs what it does (default: stderr).")  # fmt: skip
def kraken(
    file: Path,
    local_fleet: int | None,
    json_path: Path | None,
    html_path: Path | None,
    progress_mode: str,
    watchdog_log: Path | None,
) -> None:
    """Shift live traffic to the servers of FILE until a health metric says stop."""
    out = console()
    test = load_kraken_file(file)
    plan = plan_of(test, local_fleet=local_fleet is not None)

    def on_step(phase: str, step: Step) -> None:
        if progress_mode == "json":
            line = json.dumps({"event": "step", "phase": phase, **to_jsonable(step)})
            print(line, file=sys.stderr if stdout_taken() else sys.stdout, flush=True)
        else:
            out.print(progress_line(phase, step), markup=False, highlight=False, soft_wrap=True)

    if local_fleet is not None:
        with LocalFleet(FleetSpec(servers=local_fleet), lb=plan.lb.kind) as fleet:
            where = (
                f"upstream file {fleet.upstream_file}"
                if fleet.lb == "nginx"
                else f"admin socket {fleet.socket_path}"
            )
            out.print(
                f"local fleet: {', '.join(fleet.servers)} and rest behind "
                f"{fleet.balancer_name} {fleet.frontend_url} ({where})",
                markup=False,
            )
            result = run_kraken(plan, fleet=fleet, on_step=on_step, watchdog_log=watchdog_log)
    else:
        result = run_kraken(plan, on_step=on_step, watchdog_log=watchdog_log)
    # With --progress json, stdout holds JSON lines alone: the files written are said on
    # stderr, and the summary table follows only when the results went to a file.
    notes = out if progress_mode == "lines" else Console(stderr=True, highlight=False)
    if json_path is not None:
        write_json_output(notes, json_path, result_json(result))
    if html_path is not None:
        write_output(notes, html_path, render_html(result))
    if progress_mode == "lines" or (json_path is not None and not is_stdout(json_path)):
        print_summary(result, out)
    sys.exit(EXIT_OK if result.found else EXIT_ERROR)
