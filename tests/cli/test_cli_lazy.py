"""Commands are imported when looked up: the table of command modules is complete and
true, and a light command does not pay for the lab's imports."""

from __future__ import annotations

import subprocess
import sys

import click

from hairline.cli import main
from hairline.cli._base import COMMAND_MODULES, COMMAND_SUMMARIES, load_all_commands


def test_every_command_is_in_the_table_and_defined_where_it_says() -> None:
    load_all_commands()
    assert set(main.commands) == set(COMMAND_MODULES)
    for name, command in main.commands.items():
        defined_in = (command.callback.__module__ if command.callback else "").rsplit(".", 1)[-1]
        assert defined_in in COMMAND_MODULES[name], (name, defined_in)


def test_help_lists_every_command_without_importing_them_first() -> None:
    listed = main.list_commands(click.Context(main))
    assert listed == sorted(COMMAND_MODULES)


def test_each_summary_help_lists_is_its_commands_first_sentence() -> None:
    load_all_commands()
    assert set(COMMAND_SUMMARIES) == set(COMMAND_MODULES)
    for name, command in main.commands.items():
        assert COMMAND_SUMMARIES[name] == command.get_short_help_str(limit=10_000), name


def test_help_lists_the_commands_without_importing_any() -> None:
    code = """
import sys
from hairline.cli import main
from hairline.cli._base import COMMAND_MODULES
try:
    main(["--help"])
except SystemExit:
    pass
modules = {f"hairline.cli.{m}" for ms in COMMAND_MODULES.values() for m in ms}
print(sorted(modules & set(sys.modules)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "  status       List experiments, or show one." in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


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
