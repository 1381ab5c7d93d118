"""The drive loop's outcomes on a real (SQLite) store: no engine, no arms."""

from __future__ import annotations

import shutil
from pathlib import Path

from hairline.config import load_experiment
from hairline.lab.context import Event
from hairline.lab.drive import DriveSettings, drive
from hairline.lab.patience import WaitNote
from hairline.lab.queue import enqueue, request_cancel
from hairline.lab.status import Standing
from hairline.store.db import Store, open_store

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"


class Hooks:
    """The drive loop's hooks, recording what it showed."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.notes: list[WaitNote] = []
        self.follows: list[tuple[int, str]] = []

    def processor_event(self, event: Event) -> None:
        self.events.append(event)

    def waiting(self, note: WaitNote, *, experiment: int | None = None) -> None:
        self.notes.append(note)

    def followed(self, where: Standing, *, experiment: int) -> None:
        self.follows.append((experiment, where.phase))


def cancelled_experiment(tmp_path: Path) -> tuple[Store, int]:
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    store = open_store(f"sqlite:///{tmp_path / 'lab.db'}", home=tmp_path / "home")
    experiment_id = enqueue(store, load_experiment(tmp_path / "experiment.toml"))
    request_cancel(store, experiment_id)
    return store, experiment_id


def test_following_an_experiment_that_ended_reports_it_once_and_ends(tmp_path: Path) -> None:
    store, experiment_id = cancelled_experiment(tmp_path)
    hooks = Hooks()

    outcome = drive(store, experiment_id, DriveSettings(no_process=True), hooks)

    assert (outcome.state, outcome.experiment_id) == ("ended", experiment_id)
    assert hooks.follows == [(experiment_id, "cancelled")]
    assert hooks.notes == [] and hooks.events == []
    store.close()


def test_processing_an_experiment_that_ended_does_nothing_and_ends(tmp_path: Path) -> None:
    store, experiment_id = cancelled_experiment(tmp_path)
    hooks = Hooks()

    outcome = drive(store, experiment_id, DriveSettings(), hooks)

    assert outcome.state == "ended" and not outcome.attempting
    assert hooks.notes == []
    store.close()
