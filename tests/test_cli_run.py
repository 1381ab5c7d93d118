"""`hairline run` when its experiment must wait: every host held by another experiment
(another processor runs it), on SQLite. It shows the wait and how long, gives up after
`--wait-s`, gives the lease back and leaves the experiment queued for `hairline lab
process`, exit 3; `--progress json` says the same as JSON lines on stderr."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from hairline.cli import EXIT_WAITING, main
from hairline.hosts.inventory import Allocation, allocate, ensure_local_hosts
from hairline.lab.queue import claim
from hairline.store.db import Store, open_store
from hairline.store.models import Experiment, Host
from schema_check import check_schema

EXAMPLE = Path(__file__).parent / ".." / "examples" / "sample-service"


@dataclass
class HeldLab:
    """A lab whose every host an experiment of another processor holds."""

    home: Path
    experiment: Path
    store: Store
    holder: int

    def args(self, *extra: str) -> list[str]:
        return [str(self.experiment), "--home", str(self.home), *extra]


@pytest.fixture
def held_lab(tmp_path: Path) -> Iterator[HeldLab]:
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    home = tmp_path / "home"
    queued = CliRunner().invoke(
        main, ["run", str(tmp_path / "experiment.toml"), "--home", str(home), "--no-process",
               "--no-wait"],
    )  # fmt: skip
    assert queued.exit_code == 0, queued.output
    store = open_store(home=home)
    layout = ensure_local_hosts(store)
    # Another processor has claimed experiment 1 and holds every host for an hour.
    assert claim(store, "elsewhere", lease_s=3600, experiment_id=1) == 1
    got = allocate(store, 1, "demo", len(layout.hosts), lease_s=3600)
    assert isinstance(got, Allocation)
    try:
        yield HeldLab(home, tmp_path / "experiment.toml", store, holder=1)
    finally:
        store.close()


def row(store: Store, experiment_id: int) -> Experiment:
    with store.transaction() as session:
        found = session.get(Experiment, experiment_id)
        assert found is not None
        session.expunge(found)
        return found


def test_run_gives_up_after_wait_s_and_leaves_the_experiment_queued(held_lab: HeldLab) -> None:
    result = CliRunner().invoke(main, ["run", *held_lab.args("--wait-s", "2")])
    assert result.exit_code == EXIT_WAITING == 3, result.output
    text = " ".join(result.output.split())
    # The wait is shown with its reason and the time so far, then the give-up says which
    # experiment stays queued and what finishes it.
    assert re.search(r"#2: waiting for hosts: .* \(0 s so far, gives up at 2 s\)", text), text
    assert re.search(r"gave up after waiting [23] s \(waiting for hosts:", text), text
    assert "experiment 2 stays queued, held by no processor" in text
    assert f"`hairline lab process --home {held_lab.home}` finishes it" in text
    assert "`hairline report 2`" in text and "`hairline cancel 2`" in text
    waiting = row(held_lab.store, 2)
    assert waiting.phase == "allocating" and waiting.lease_owner is None
    assert waiting.progress.startswith("waiting for hosts")
    # Nothing of the other experiment was disturbed, and a processor can take this one.
    with held_lab.store.transaction() as session:
        held = {h.experiment_id for h in session.query(Host).filter(Host.enabled)}
    assert held == {held_lab.holder}
    assert claim(held_lab.store, "lab-1", lease_s=5, experiment_id=2) == 2


def test_run_progress_json_is_one_event_per_line_on_stderr(held_lab: HeldLab) -> None:
    result = CliRunner().invoke(
        main, ["run", *held_lab.args("--wait-s", "1", "--progress", "json", "--json", "-")]
    )
    assert result.exit_code == EXIT_WAITING, result.output
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "queued" and kinds[-1] == "gave_up", kinds
    for event in events:
        check_schema("progress-event", event)
    assert "waiting" in kinds and "phase" in kinds
    first_wait = next(e for e in events if e["event"] == "waiting")
    assert first_wait["experiment"] == 2 and first_wait["wait_s"] == 1.0
    assert first_wait["reason"].startswith("waiting for hosts")
    gave_up = events[-1]
    assert gave_up["waited_s"] >= 1.0 and gave_up["exit_status"] == 3
    assert gave_up["command"] == f"hairline lab process --home {held_lab.home}"
    # No report was asked of an experiment that did not run: stdout stays empty.
    assert result.stdout == ""


def test_run_waits_600_s_by_default_and_0_means_forever() -> None:
    runner = CliRunner()
    for command in (["run"], ["aa"]):
        shown = " ".join(runner.invoke(main, [*command, "--help"]).output.split())
        assert "--wait-s SECONDS" in shown and "Default: 600." in shown
        assert "0 waits forever" in shown and "3 gave up waiting" in shown
    shown = " ".join(runner.invoke(main, ["lab", "process", "--help"]).output.split())
    assert "Default: forever." in shown
    bad = runner.invoke(main, ["run", "x.toml", "--wait-s", "-1"])
    assert bad.exit_code == 2 and "--wait-s" in bad.output
