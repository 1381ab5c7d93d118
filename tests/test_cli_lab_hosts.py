"""`hairline lab quota [--region]`, `hairline lab hosts` and `hairline run --priority`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from hairline.cli import main
from hairline.hosts.inventory import ensure_local_hosts
from hairline.store.db import open_store
from hairline.store.models import Experiment
from schema_check import check_schema

EXAMPLE = Path(__file__).parent.parent / "examples" / "sample-service"


def test_quotas_overall_and_per_region_are_set_and_listed(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "home")]
    runner = CliRunner()
    first = runner.invoke(main, ["lab", "quota", "search", "8", *home])
    assert first.exit_code == 0, first.output
    regional = runner.invoke(main, ["lab", "quota", "search", "2", "--region", "eu", *home])
    assert regional.exit_code == 0, regional.output
    assert "at most 2 hosts at once in region eu" in regional.output
    # A read command writes nothing: before any local run, no host is listed.
    empty = runner.invoke(main, ["lab", "hosts", "--json", *home])
    assert empty.exit_code == 0, empty.output
    assert json.loads(empty.output)["hosts"] == []
    assert "no hosts yet" in runner.invoke(main, ["lab", "hosts", *home]).output
    # A local run registers this machine's CPU sets (as lab/processor.py does).
    store = open_store(home=tmp_path / "home")
    try:
        ensure_local_hosts(store)
    finally:
        store.close()
    listed = runner.invoke(main, ["lab", "hosts", "--json", *home])
    assert listed.exit_code == 0, listed.output
    data = json.loads(listed.output)
    check_schema("hosts", data)
    assert data["quotas"] == {"search": 8}
    assert data["region_quotas"] == {"search": {"eu": 2}}
    local = data["hosts"][0]
    assert local["backend"] == "local" and local["region"] == "local" and local["healthy"]
    text = runner.invoke(main, ["lab", "hosts", *home])
    assert "quotas: search 8 overall, 2 in eu" in text.output


def test_a_negative_quota_is_refused_by_name(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["lab", "quota", "search", "-1", "--home", str(tmp_path)])
    assert result.exit_code == 2 and "MAX_HOSTS" in result.output


def test_run_priority_overrides_the_files(tmp_path: Path) -> None:
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    home = tmp_path / "home"
    result = CliRunner().invoke(
        main,
        ["run", str(tmp_path / "experiment.toml"), "--home", str(home), "--no-process",
         "--no-wait", "--priority", "7"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    store = open_store(home=home)
    try:
        with store.transaction() as session:
            assert [e.priority for e in session.query(Experiment)] == [7]
    finally:
        store.close()
