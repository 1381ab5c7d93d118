"""`hairline run --check` says what the file will run, in its own mode's words."""

from __future__ import annotations

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


def test_an_efficiency_file_without_a_rate_is_calibrated_to_its_target() -> None:
    load_all_commands()
    done = CliRunner().invoke(main, ["run", "--check", str(EXAMPLES / "experiment.toml")])
    assert done.exit_code == 0, done.output
    assert "rate calibrated to 60% busy" in done.output
