"""`hairline lab schedule add|list|remove|run`: periodic A/A runs from the command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from hairline.cli import main
from hairline.store.db import open_store
from hairline.store.models import Experiment
from schema_check import check_schema

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"


def sample_files(folder: Path, *, aa: str = '[aa]\nevery = "2h"\n') -> Path:
    folder.mkdir(parents=True)
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, folder / name)
    service = folder / "service.toml"
    service.write_text(service.read_text() + "\n" + aa)
    return folder / "experiment.toml"


def test_a_schedule_is_added_run_listed_and_removed(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "home")]
    path = sample_files(tmp_path / "svc")
    runner = CliRunner()

    added = runner.invoke(main, ["lab", "schedule", "add", str(path), *home])
    assert added.exit_code == 0, added.output
    assert "A/A of sample-service every 2h" in added.output

    ran = runner.invoke(main, ["lab", "schedule", "run", "--once", *home])
    assert ran.exit_code == 0, ran.output
    assert "enqueued A/A experiment #1" in ran.output
    store = open_store(None, home=tmp_path / "home")
    try:
        with store.transaction() as session:
            row = session.get(Experiment, 1)
            assert row is not None and (row.kind, row.origin) == ("aa", "schedule")
    finally:
        store.close()

    listed = runner.invoke(main, ["lab", "schedule", "list", "--json", *home])
    assert listed.exit_code == 0, listed.output
    (schedule,) = json.loads(listed.output)
    check_schema("schedules", json.loads(listed.output))
    assert schedule["experiment_file"] == str(path.resolve())
    assert schedule["every_s"] == 7200 and schedule["last_experiment_id"] == 1
    assert schedule["last_phase"] == "queued" and schedule["error"] is None
    table = runner.invoke(main, ["lab", "schedule", "list", *home])
    row = next(line for line in table.output.splitlines() if "sample-service" in line)
    assert "#1 queued" in row and "in 1 h 59 min" in row

    removed = runner.invoke(main, ["lab", "schedule", "remove", str(path), *home])
    assert removed.exit_code == 0, removed.output
    empty = runner.invoke(main, ["lab", "schedule", "list", *home])
    assert "no A/A schedules" in empty.output


def test_a_file_that_became_invalid_is_skipped_and_listed_with_why(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "home")]
    path = sample_files(tmp_path / "svc")
    runner = CliRunner()
    assert runner.invoke(main, ["lab", "schedule", "add", str(path), *home]).exit_code == 0
    (tmp_path / "svc" / "trace.jsonl").write_text("not a trace\n")

    ran = runner.invoke(main, ["lab", "schedule", "run", "--once", *home])
    assert ran.exit_code == 0, ran.output
    assert "skipped" in ran.output and "does not start as a trace" in ran.output
    table = runner.invoke(main, ["lab", "schedule", "list", *home])
    assert "schedule 1 skipped" in table.output and "does not start as a trace" in table.output


def test_adding_a_file_without_aa_every_or_with_a_bad_one_is_refused(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "home")]
    runner = CliRunner()
    plain = sample_files(tmp_path / "plain", aa="")
    refused = runner.invoke(main, ["lab", "schedule", "add", str(plain), *home])
    assert refused.exit_code == 2
    assert "has no [aa] every" in refused.output and 'every = "2h"' in refused.output

    weekly = sample_files(tmp_path / "weekly", aa='[aa]\nevery = "1w"\n')
    bad = runner.invoke(main, ["lab", "schedule", "add", str(weekly), *home])
    assert bad.exit_code == 2
    assert "service.aa.every: '1w' is not a period" in bad.output

    missing = runner.invoke(main, ["lab", "schedule", "remove", str(plain), *home])
    assert missing.exit_code == 2 and "has no A/A schedule" in missing.output
