"""Periodic A/A runs on a fake clock: due once per period, never two at once, missed
periods skipped, the file read anew each time, an invalid file skipped with its reason
kept, two schedulers never enqueueing one period twice."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from hairline.config import ExperimentConfig, parse_every_s
from hairline.errors import ConfigError, HairlineError
from hairline.lab.files import load_experiment_file
from hairline.lab.periodic import (
    PERIODIC_PRIORITY,
    add_schedule,
    enqueue_due,
    list_schedules,
    next_due,
    remove_schedule,
    run_due,
)
from hairline.store.db import Store, open_store
from hairline.store.models import Experiment

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"
HOUR_S = 3600.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def write_example(folder: Path, aa: str | None = '[aa]\nevery = "2h"\n') -> Path:
    """The sample service's experiment file, its service file asking for ``aa``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, folder / name)
    if aa is not None:
        service = folder / "service.toml"
        service.write_text(service.read_text() + "\n" + aa)
    return folder / "experiment.toml"


def finish(store: Store, experiment_id: int) -> None:
    with store.transaction() as session:
        session.execute(
            update(Experiment).where(Experiment.id == experiment_id).values(phase="done")
        )


def test_every_takes_minutes_hours_or_days_of_at_least_a_minute() -> None:
    assert parse_every_s("30m") == 1800
    assert parse_every_s("2h") == 2 * HOUR_S
    assert parse_every_s("1d") == 86400
    assert parse_every_s("1.5h") == 5400
    for bad in ("2", "2 hours", "90s", "-1h", "h"):
        with pytest.raises(ConfigError, match="not a period"):
            parse_every_s(bad)
    with pytest.raises(ConfigError, match="shorter than the shortest period"):
        parse_every_s("0.5m")


def test_a_bad_period_is_reported_at_its_file_line_and_field(tmp_path: Path) -> None:
    path = write_example(tmp_path, aa='[aa]\nevery = "90s"\n')
    with pytest.raises(ConfigError) as err:
        load_experiment_file(path)
    lines = (tmp_path / "service.toml").read_text().splitlines()
    line = lines.index('every = "90s"') + 1
    assert f"service.toml:{line}: service.aa.every: '90s' is not a period" in err.value.message
    assert "m (minutes), h (hours) or d (days)" in err.value.message


def test_next_due_skips_missed_periods_instead_of_making_them_up() -> None:
    assert next_due(100.0, 10.0, now=50.0) == 100.0  # not due yet: unchanged
    assert next_due(100.0, 10.0, now=100.0) == 110.0
    assert next_due(100.0, 10.0, now=135.0) == 140.0  # 3 periods missed, one run


def test_a_schedule_enqueues_one_low_priority_aa_per_period(store: Store, tmp_path: Path) -> None:
    clock = FakeClock()
    added = add_schedule(store, write_example(tmp_path), clock=clock)
    assert (added.service, added.team, added.every_s) == ("sample-service", "demo", 2 * HOUR_S)

    first = enqueue_due(store, clock=clock)  # the first run is due at once
    assert len(first) == 1
    with store.transaction() as session:
        row = session.get(Experiment, first[0])
        assert row is not None
        assert (row.kind, row.origin, row.submitted_by) == ("aa", "schedule", "scheduler")
        assert row.priority == PERIODIC_PRIORITY
    assert enqueue_due(store, clock=clock) == []  # not again within the period

    finish(store, first[0])
    clock.now += 2 * HOUR_S - 1
    assert enqueue_due(store, clock=clock) == []
    clock.now += 1
    assert len(enqueue_due(store, clock=clock)) == 1


def test_no_new_run_while_the_last_is_active_and_missed_periods_are_skipped(
    store: Store, tmp_path: Path
) -> None:
    clock = FakeClock()
    start = clock.now
    add_schedule(store, write_example(tmp_path), clock=clock)
    (first,) = enqueue_due(store, clock=clock)

    clock.now += 5 * HOUR_S  # two periods later, the first run still queued
    assert enqueue_due(store, clock=clock) == []
    finish(store, first)
    assert len(enqueue_due(store, clock=clock)) == 1  # one run, not a burst of three
    (schedule,) = list_schedules(store)
    assert schedule.next_at == start + 6 * HOUR_S  # the next boundary of the period


def test_the_file_is_read_anew_and_an_invalid_one_is_skipped_with_its_reason(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    path = write_example(tmp_path)
    add_schedule(store, path, clock=clock)
    (first,) = enqueue_due(store, clock=clock)
    finish(store, first)

    service = tmp_path / "service.toml"
    service.write_text(service.read_text().replace('every = "2h"', 'every = "30m"'))
    clock.now += 2 * HOUR_S
    assert len(enqueue_due(store, clock=clock)) == 1
    (schedule,) = list_schedules(store)
    assert schedule.every_s == 1800  # the file's new period, from this run on
    assert schedule.next_at == clock.now + 1800
    finish(store, schedule.last_experiment_id or 0)

    (tmp_path / "experiment.toml").write_text('service = "service.toml"\n[load]\nrate = 5\n')
    clock.now += 1800
    with caplog.at_level("WARNING", logger="hairline.lab.periodic"):
        due = run_due(store, clock=clock)
    assert due.enqueued == []
    (skip,) = due.skipped
    assert "experiment.toml" in skip.reason and "trace: missing" in skip.reason
    assert "skipped" in caplog.text
    (schedule,) = list_schedules(store)  # kept, with the reason, and past this period
    assert schedule.error is not None and "trace: missing" in schedule.error
    assert schedule.next_at == clock.now + 1800
    assert run_due(store, clock=clock).skipped == []  # one warning per period, not per poll

    write_example(tmp_path)  # fixed: the next period runs and the error is gone
    clock.now += 1800
    assert len(enqueue_due(store, clock=clock)) == 1
    assert list_schedules(store)[0].error is None


def test_a_file_whose_service_dropped_aa_every_is_skipped(store: Store, tmp_path: Path) -> None:
    clock = FakeClock()
    add_schedule(store, write_example(tmp_path), clock=clock)
    write_example(tmp_path, aa=None)
    (skip,) = run_due(store, clock=clock).skipped
    assert "has no [aa] every" in skip.reason


def test_adding_needs_aa_every_and_removing_needs_a_schedule(store: Store, tmp_path: Path) -> None:
    path = write_example(tmp_path / "plain", aa=None)
    with pytest.raises(ConfigError, match=r"has no \[aa\] every") as err:
        add_schedule(store, path)
    assert err.value.hint is not None and 'every = "2h"' in err.value.hint
    with pytest.raises(HairlineError, match="has no A/A schedule"):
        remove_schedule(store, path)

    scheduled = write_example(tmp_path / "aa")
    add_schedule(store, scheduled)
    add_schedule(store, scheduled)  # again: one schedule, its period read anew
    assert len(list_schedules(store)) == 1
    remove_schedule(store, scheduled)
    assert list_schedules(store) == []
    assert enqueue_due(store) == []


def test_two_schedulers_never_enqueue_one_period_twice(store: Store, tmp_path: Path) -> None:
    clock = FakeClock()
    add_schedule(store, write_example(tmp_path), clock=clock)
    other = open_store(store.url, home=store.home)
    raced: list[int] = []

    def load_while_another_scheduler_runs(path: Path) -> ExperimentConfig:
        raced.extend(enqueue_due(other, clock=clock))  # it takes the period meanwhile
        return load_experiment_file(path)

    try:
        mine = run_due(store, clock=clock, load=load_while_another_scheduler_runs)
    finally:
        other.close()
    assert len(raced) == 1 and mine.enqueued == [] and mine.skipped == []
    with store.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Experiment)) == 1
