"""``hairline kraken FILE``: a live-traffic load test through load-balancer weights.

The file (docs/kraken.md) names the servers under test, the load balancer, the users'
traffic and the health metrics; ``--local-fleet N`` starts a cluster on loopback to run it
against. Exit status 0: the test finished with a capacity; 2: a user error or an abort (a
metric without samples, the load balancer unreachable); 130 (SIGINT) or 143 (SIGTERM): it was
interrupted, at any point. The original weights are back when it exits, whatever the path;
if it is killed, its watchdog puts them back.

On Ctrl-C the order is: the weights back, then the engine stopped, then the fleet (its
processes are in sessions of their own, so the terminal's SIGINT reaches this process
alone), then the temporary folder removed; a second Ctrl-C meanwhile is remembered and the
teardown finished. Its temporary files live in one folder whose janitor removes it even
after a SIGKILL (kit/janitor.py).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

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
from hairline.kit import interrupts
from hairline.kit.janitor import OwnedFolder
from hairline.kit.jsonout import to_jsonable
from hairline.kraken.file import check_servers, load_kraken_file
from hairline.kraken.fleet import FleetSpec, LocalFleet
from hairline.kraken.report import (
    print_summary,
    progress_line,
    render_html,
    result_json,
)
from hairline.kraken.results import KrakenResult, Step
from hairline.kraken.run import KrakenPlan, plan_of, run_kraken

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
    if local_fleet is not None:
        fleet_servers = [*FleetSpec(servers=local_fleet).names, "rest"]
        check_servers(plan.file, plan.servers, fleet_servers, f"--local-fleet {local_fleet}")

    def on_step(phase: str, step: Step) -> None:
        if progress_mode == "json":
            line = json.dumps({"event": "step", "phase": phase, **to_jsonable(step)})
            print(line, file=sys.stderr if stdout_taken() else sys.stdout, flush=True)
        else:
            out.print(progress_line(phase, step), markup=False, highlight=False, soft_wrap=True)

    try:
        result = _run(plan, local_fleet, out, on_step, watchdog_log)
    except KeyboardInterrupt:
        # Interrupted where no result is made (the fleet starting, the trace being made, a
        # second Ctrl-C while the first was acted on): by now the weights are back (or the
        # watchdog has them), and what was started is stopped, its folder removed.
        with interrupts.deferred():
            _exit_interrupted(out, "no report written; any shifted weights were put back and "
                              "everything started is stopped")  # fmt: skip
    # The reports of an interrupted test are worth finishing: a Ctrl-C now is remembered.
    with interrupts.deferred():
        # With --progress json, stdout holds JSON lines alone: the files written are said on
        # stderr, and the summary table follows only when the results went to a file.
        notes = out if progress_mode == "lines" else Console(stderr=True, highlight=False)
        if json_path is not None:
            write_json_output(notes, json_path, result_json(result))
        if html_path is not None:
            write_output(notes, html_path, render_html(result))
        if progress_mode == "lines" or (json_path is not None and not is_stdout(json_path)):
            print_summary(result, out)
        if interrupts.interrupted_by() is not None:
            restored = "weights restored" if result.restored else "weights NOT restored"
            _exit_interrupted(out, f"{restored}, then the engine and any local fleet stopped")
        sys.exit(EXIT_OK if result.found else EXIT_ERROR)


def _run(
    plan: KrakenPlan,
    local_fleet: int | None,
    out: Console,
    on_step: Callable[[str, Step], None],
    watchdog_log: Path | None,
) -> KrakenResult:
    """The test, its temporary files in one folder a janitor removes even after a SIGKILL,
    and with ``local_fleet`` the fleet, started first and stopped last."""
    with OwnedFolder("hairline-kraken-") as folder:
        if local_fleet is None:
            return run_kraken(plan, on_step=on_step, watchdog_log=watchdog_log, folder=folder)
        spec = FleetSpec(servers=local_fleet)
        with LocalFleet(spec, lb=plan.lb.kind, tmp_dir=folder) as fleet:
            where = (
                f"upstream file {fleet.upstream_file}"
                if fleet.lb == "nginx"
                else f"admin socket {fleet.socket_path}"
            )
            out.print(
                f"local fleet: {', '.join(fleet.servers)} and rest behind "
                f"{fleet.balancer_name} {fleet.frontend_url} ({where})",
                markup=False,
                soft_wrap=True,  # one line whatever the path's length: scripts read it
            )
            return run_kraken(plan, fleet=fleet, on_step=on_step, watchdog_log=watchdog_log,
                              folder=folder)  # fmt: skip


def _exit_interrupted(out: Console, what: str) -> NoReturn:
    signum = interrupts.interrupted_by() or signal.SIGINT
    # Everything is stopped: one more Ctrl-C on the way out must not become click's
    # "Aborted!" (exit 1) in place of this exit.
    for ignored in (signal.SIGINT, signal.SIGTERM):
        signal.signal(ignored, signal.SIG_IGN)
    name = signal.Signals(signum).name
    out.print(f"interrupted ({name}): {what}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(interrupts.exit_status(signum))
