"""`hairline run --check` says what the file will run, in its own mode's words."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from hairline.cli import main
from hairline.cli._base import load_all_commands

EXAMPLES = Path(__file__).parents[2] / "examples" / "sample-service"


def test_a_capacity_file_is_not_said_to_be_calibrated_to_a_busy_share() -> None:
    load_all_commands()
    done = CliRunner().invoke(main, ["run", "--check", str(EXAMPLES / "capacity.toml")])
    assert done.exit_code == 0, done.output
    assert "capacity mode: each arm's highest rate under its SLO" in done.output
    assert "calibrated" not in done.output


def test_an_efficiency_file_without_a_rate_is_calibrated_for_precision_or_to_its_target() -> None:
    load_all_commands()
    done = CliRunner().invoke(main, ["run", "--check", str(EXAMPLES / "experiment.toml")])
    assert done.exit_code == 0, done.output
    assert "rate calibrated: the most precise per minute the lab serves" in done.output
    done = CliRunner().invoke(main, ["run", "--check", str(EXAMPLES / "functions.toml")])
    assert done.exit_code == 0, done.output
    assert "rate calibrated to 60% busy" in done.output


def test_the_ok_line_is_one_line_however_long_the_path(tmp_path: Path) -> None:
    """Scripts grep this line; CI's checkout path once pushed it past the console width."""
    deep = tmp_path / ("a-long-folder-name-" * 6) / ("another-one-" * 6)
    deep.mkdir(parents=True)
    copy = deep / "capacity.toml"
    shutil.copy(EXAMPLES / "capacity.toml", copy)
    for name in ("service.toml", "trace.jsonl"):
        shutil.copy(EXAMPLES / name, deep / name)
    load_all_commands()
    done = CliRunner().invoke(main, ["run", "--check", str(copy)])
    assert done.exit_code == 0, done.output
    assert done.output.count("\n") == 1, done.output
    assert "capacity mode: each arm's highest rate under its SLO, searched)" in done.output
