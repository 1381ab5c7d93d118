"""The ``hairline`` command: one group, every subcommand thin.

Each subcommand turns its options into typed values and calls into the library; user errors
(:class:`hairline.errors.HairlineError`) are printed without a traceback and exit 2.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from hairline import __version__
from hairline.errors import HairlineError

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
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
