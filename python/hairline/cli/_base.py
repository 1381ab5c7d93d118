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
