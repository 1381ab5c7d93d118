"""`hairline lab event add|list` from the command line."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner

from hairline.cli import main
from schema_check import check_schema


def test_an_event_is_added_and_listed(tmp_path: Path) -> None:
    """False failure: none in practice: 'now' must be within 60 s of the listing."""
    home = ["--home", str(tmp_path / "home")]
    runner = CliRunner()
    added = runner.invoke(main, ["lab", "event", "add", "deploy", "--service", "127.0.0.1:5432",
                                 "--at", "-15m", "--until", "now", "--note", "schema v7",
                                 *home])  # fmt: skip
    assert added.exit_code == 0, added.output
    assert added.output.startswith("event 1: deploy of 127.0.0.1:5432 at ")
    listed = runner.invoke(main, ["lab", "event", "list", "--json", *home])
    assert listed.exit_code == 0, listed.output
    (event,) = json.loads(listed.output)
    check_schema("events", json.loads(listed.output))
    assert (event["kind"], event["note"], event["host"], event["created_by"]) == (
        "deploy", "schema v7", None, "cli")  # fmt: skip
    assert abs(event["ended_at"] - time.time()) < 60
    assert event["ended_at"] - event["started_at"] == 900
    table = runner.invoke(main, ["lab", "event", "list", *home])
    assert "schema v7" in table.output


def test_a_time_that_is_not_one_exits_2_naming_the_flag(tmp_path: Path) -> None:
    done = CliRunner().invoke(main, ["lab", "event", "add", "maintenance", "--service", "s",
                                     "--at", "tomorrow", "--home", str(tmp_path)])  # fmt: skip
    assert done.exit_code == 2
    assert "--at 'tomorrow' is not a time" in done.output
    assert "ISO 8601" in done.output and '"-15m"' in done.output
