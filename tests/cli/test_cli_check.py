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


def fixed_rate_copy(tmp_path: Path, design: str) -> Path:
    """The sample service's experiment at a fixed rate, with ``design`` as its [design]."""
    for name in ("service.toml", "trace.jsonl"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    path = tmp_path / "experiment.toml"
    path.write_text(
        'service = "service.toml"\ntrace = "trace.jsonl"\nteam = "demo"\n\n'
        "[arms.A]\n[arms.B]\n\n[load]\nrate_per_s = 300\nduration_s = 2\n\n[design]\n" + design
    )
    return path


def test_decide_on_with_fixed_trials_at_a_fixed_rate_is_warned_with_file_line_and_fix(
    tmp_path: Path,
) -> None:
    """docs/routing.md's file set decide_on with trials = 3: it did nothing, unsaid."""
    path = fixed_rate_copy(tmp_path, 'trials = 3\ndecide_on = ["cpu_ns_per_request"]\n')
    load_all_commands()
    done = CliRunner().invoke(main, ["run", "--check", str(path)])
    assert done.exit_code == 0, done.output  # a warning, not an error: the file runs
    assert f"warning: {path}:14: design.decide_on: decide_on acts only with trials = " in (
        " ".join(done.output.split())
    )
    assert 'set trials = "auto"' in done.output and "ok (" in done.output


def test_decide_on_where_it_acts_is_not_warned(tmp_path: Path) -> None:
    auto = fixed_rate_copy(tmp_path, 'trials = "auto"\ndecide_on = ["latency_us"]\n')
    load_all_commands()
    for path in (auto, EXAMPLES / "capacity.toml", EXAMPLES.parent / "routing" / "experiment.toml"):
        done = CliRunner().invoke(main, ["run", "--check", str(path)])
        assert done.exit_code == 0 and "warning" not in done.output, done.output
