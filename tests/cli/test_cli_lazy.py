"""Commands are imported when looked up: the table of command modules is complete and
true, and a light command does not pay for the lab's imports."""

from __future__ import annotations

import ast
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


def _loaded(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` are imported once ``code`` has run in a fresh interpreter."""
    probe = f"import sys\n{code}\nprint(sorted(m for m in {modules!r} if m in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_the_group_and_its_help_import_no_heavy_package() -> None:
    """Every `hairline` process (each test's, each the lab starts) pays what the group
    imports; `hairline --help` and `--version` need nothing more. 1 s."""
    code = "from hairline.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    heavy = ("numpy", "scipy", "sqlalchemy", "pyarrow", "jinja2", "fastapi", "ray", "sklearn")
    assert _loaded(code, heavy) == []


def test_the_lab_commands_start_without_scipy_or_the_web() -> None:
    """`status`, `report`, `run`, `analyze` and `lab process` import the statistics but
    load scipy.special (0.35 s) only when a distribution is evaluated (stats/dist.py), and
    none of them the dashboard's FastAPI, Ray or a browser. 2 s."""
    code = "import hairline.cli.experiments, hairline.cli.run, hairline.cli.analysis\n"
    code += "import hairline.cli.lab, hairline.stats"
    heavy = ("scipy", "fastapi", "ray", "playwright", "sklearn")
    assert _loaded(code, heavy) == []
