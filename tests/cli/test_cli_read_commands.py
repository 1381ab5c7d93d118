"""Commands that only list or show a lab change nothing: pointed at no lab they say which
database they looked for and create none; pointed at a lab they leave it as it was. And
every command that takes ``--db`` says in its ``--help`` where else the URL can come from
($HAIRLINE_DB, $HAIRLINE_DB_FILE)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hairline.cli import main
from hairline.store.db import open_store
from hairline.store.models import Service

READ_COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["history", "api"],
    ["lab", "hosts"],
    ["lab", "hosts", "--json"],
    ["lab", "factors"],
    ["lab", "schedule", "list"],
    ["lab", "event", "list"],
    ["token", "list"],
    ["service", "commands"],
    ["tuning", "list"],
    ["tuning", "show", "1"],
    ["gate", "1"],
]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_a_read_command_without_a_lab_names_the_database_and_creates_none(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("HAIRLINE_DB", "HAIRLINE_DB_FILE"):
        monkeypatch.delenv(name, raising=False)
    done = CliRunner().invoke(main, [*args, "--home", str(tmp_path / "lab")])
    assert done.exit_code == 2, done.output
    assert f"no lab database at sqlite:///{tmp_path / 'lab' / 'hairline.db'}" in done.stderr
    assert "HAIRLINE_DB_FILE" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_a_read_command_leaves_the_lab_as_it_was(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lab hosts` once registered the calling machine's CPU sets in the lab it listed."""
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "lab"
    store = open_store(home=home)
    with store.transaction() as session:
        session.add(Service(name="api", created_at=1.0))
    store.close()
    before = _files(tmp_path)
    done = CliRunner().invoke(main, [*args, "--home", str(home)])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    assert _files(tmp_path) == before


def _db_commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(main)
    found: list[tuple[str, click.Command]] = []

    def walk(group: click.Group, path: tuple[str, ...]) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if isinstance(command, click.Group):
                walk(command, (*path, name))
            elif command is not None and any("--db" in p.opts for p in command.params):
                found.append((" ".join((*path, name)), command))

    walk(main, ())
    return found


def test_every_help_that_takes_db_names_hairline_db_file() -> None:
    commands = _db_commands()
    assert len(commands) >= 25 and "lab hosts" in dict(commands) and "run" in dict(commands)
    missing = [
        name
        for name, _ in commands
        if "$HAIRLINE_DB_FILE" not in CliRunner().invoke(main, [*name.split(), "--help"]).stdout
    ]
    assert missing == []
