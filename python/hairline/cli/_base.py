"""The ``hairline`` command group, its error handling and exit codes.

Each subcommand module under ``hairline.cli`` adds its commands to :data:`main`. User errors
(:class:`hairline.errors.HairlineError`) are printed with their hint and no traceback, and
exit 2.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click
from rich.console import Console

from hairline import __version__
from hairline.cli._outputs import is_stdout, stdout_taken
from hairline.errors import HairlineError
from hairline.kit import interrupts

__all__ = [
    "COMMAND_MODULES",
    "COMMAND_SUMMARIES",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "EXIT_WAITING",
    "console",
    "load_all_commands",
    "main",
]

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
# `run`/`aa` (and `lab process --wait-s`) gave up waiting for hosts or a Ray head; the
# experiment is still queued, so a CI job can tell "try later" from "broken".
EXIT_WAITING = 3


# Each command and the modules that define it and its subcommands. A module is imported
# only when its command runs: `hairline route fleet`, which the lab starts once per arm and
# batch, then starts in a fraction of a second instead of importing scipy and the lab.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "aa": ("run",),
    "agent": ("agent",),
    "analyze": ("analysis",),
    "attribute": ("attribute",),
    "bisect": ("bisect",),
    "cancel": ("experiments",),
    "ci": ("ci",),
    "demo": ("demo",),
    "gate": ("web",),
    "history": ("history",),
    "kraken": ("kraken",),
    "lab": ("lab", "schedule", "events"),
    "plan": ("analysis",),
    "record": ("record",),
    "report": ("experiments",),
    "route": ("route",),
    "run": ("run",),
    "schema": ("schema",),
    "sensitivity": ("sensitivity",),
    "serve": ("serve",),
    "service": ("web",),
    "status": ("experiments",),
    "suggest": ("suggest",),
    "token": ("web",),
    "trace": ("traffic",),
    "tune": ("tune",),
    "tuning": ("tune",),
}

# Each command's one-line summary, as `hairline --help` lists it: from this table rather
# than the command's docstring, because reading the docstrings means importing every
# command's module (1.7 s of `hairline --help` on the 2-vCPU VM, 2026-11-29; 0.3 s
# without). tests/cli/test_cli_lazy.py checks that each is its command's first sentence.
COMMAND_SUMMARIES: dict[str, str] = {
    "aa": "Run an A/A experiment (the baseline on every arm) and keep it as history.",
    "agent": "Join this machine to a lab on Ray (its hosts registered in the database), or leave.",
    "analyze": "Verdicts for every metric of an observations file (.parquet or .csv).",
    "attribute": "Run FILE's factorial design through the lab and attribute each latency "
    "quantile to the factors and their interactions (docs/attribution.md).",
    "bisect": "Find the first revision between --good and --bad whose change exceeds the "
    "metric's threshold, by A/B experiments of FILE's baseline arm at pairs of revisions "
    "(its `repo`, or the file's folder).",
    "cancel": "Cancel a queued or running experiment.",
    "ci": "CI helpers: a pull request's one hairline comment, the GitHub Action's run.",
    "demo": "A/B of the bundled sample service with a CPU regression injected into B.",
    "gate": "The release gate of EXPERIMENT_ID: exit 0 pass, 1 fail (a regression nobody "
    "ignored), 2 error (failed or cancelled), 3 still pending (with --wait: timed out).",
    "history": "Change points in a service's history of verdicts (docs/dashboard.md).",
    "kraken": "Shift live traffic to the servers of FILE until a health metric says stop.",
    "lab": "Run the lab: standalone processors, quotas, the host inventory.",
    "plan": "Trials (and hosts, requests) at which the verdict catches a regression, per design.",
    "record": "Record live traffic safely: a proxy that never delays a request.",
    "report": "Report on one experiment (terminal, and --json/--markdown/--html/--junit/--otlp).",
    "route": "Semantic request routing: partitions of endpoints by code, and a fleet routed "
    "by them.",
    "run": "Run an A/B experiment file: build, allocate hosts, run the trials, analyse.",
    "schema": "JSON Schemas of hairline's files and JSON outputs, from their typed models.",
    "sensitivity": "How small a change FILE's experiment can see: its service's noise per "
    "trial, measured with A/A trials, and the minimum detectable effect against trials and "
    "minutes.",
    "serve": "Serve the dashboard and the HTTP API (/api/v1, OpenAPI at /api/v1/docs).",
    "service": "What a service file submitted over the HTTP API may run.",
    "status": "List experiments, or show one.",
    "suggest": "Score a diff (or a list of diffs) by the production cost of the functions it "
    "modifies, and name the endpoints an experiment should replay (ServiceLab 3.1).",
    "token": "API tokens for `hairline serve` (stored hashed; shown once when made).",
    "trace": "Import logs as traces, inspect them, and shape what is replayed (docs/traffic.md).",
    "tune": "Search FILE's parameters for the configuration that does best on its "
    "objective, each candidate judged by an A/B experiment against the default "
    "configuration (docs/tuning.md).",
    "tuning": "Tuning runs: list them, show one or several (docs/tuning.md).",
}


def load_all_commands() -> None:
    """Import every command's module (for what lists or documents them all)."""
    for modules in COMMAND_MODULES.values():
        for module in modules:
            importlib.import_module(f"hairline.cli.{module}")


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for module in COMMAND_MODULES.get(cmd_name, ()):
            importlib.import_module(f"hairline.cli.{module}")
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own listing, but from COMMAND_SUMMARIES: click would look up (import)
        # every command to read its docstring. Each summary is shortened to the width as
        # click shortens a command's help, by a stand-in command that has it as its help.
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [
            (name, click.Command(name, help=COMMAND_SUMMARIES[name]).get_short_help_str(limit))
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        # SIGTERM (a CI runner's timeout, `kill`, a container stopping) takes the same path
        # as Ctrl-C: arms and their cgroups stopped, hosts released, the experiment failed.
        # Python's default would exit at once and leave all of that behind. Both are
        # remembered too, so that one swallowed where it landed is raised again.
        interrupts.install()
        try:
            return super().invoke(ctx)
        except HairlineError as err:
            click.secho(f"error: {err.message}", fg="red", err=True)
            if err.hint:
                click.echo(f"  hint: {err.hint}", err=True)
            sys.exit(EXIT_ERROR)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="hairline")
def main() -> None:
    """Catch tiny performance regressions in services before they reach production."""


def console(*documents: object) -> Console:
    """Where progress and panels go: stdout, or stderr when an output flag of the running
    command (or any of ``documents``) is ``-``, so that stdout carries only the document
    asked for (cli/_outputs.py)."""
    stderr = stdout_taken() is not None or any(is_stdout(d) for d in documents)
    # Piped output (CI logs) gets a wide table rather than rich's 80-column default.
    out = Console(highlight=False, stderr=stderr)
    return out if out.is_terminal else Console(highlight=False, width=160, stderr=stderr)
