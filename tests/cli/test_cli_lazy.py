"""Commands are imported when looked up: the table of command modules is complete and
true, and a light command does not pay for the lab's imports."""

from __future__ import annotations

import subprocess
import sys

import click

from hairline.cli import main
from hairline.cli._base import COMMAND_MODULES, load_all_commands


def test_every_command_is_in_the_table_and_defined_where_it_says() -> None:
    load_all_commands()
    assert set(main.commands) == set(COMMAND_MODULES)
    for name, command in main.commands.items():
        defined_in = (command.callback.__module__ if command.callback else "").rsplit(".", 1)[-1]
        assert defined_in in COMMAND_MODULES[name], (name, defined_in)


def test_help_lists_every_command_without_importing_them_first() -> None:
    listed = main.list_commands(click.Context(main))
    assert listed == sorted(COMMAND_MODULES)


def test_route_fleet_starts_without_scipy_or_the_lab() -> None:
    # The lab starts `hairline route fleet` once per arm and batch.
    code = (
        "import sys\n"
        "from hairline.cli import main\n"
        "try:\n    main(['route', 'fleet', '--help'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in ('scipy', 'hairline.lab.processor') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
