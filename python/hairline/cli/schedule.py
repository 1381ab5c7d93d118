"""``hairline lab schedule add|list|remove|run``: periodic A/A runs (docs/lab.md)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from types import FrameType

import click
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from hairline.cli._base import console
from hairline.cli._options import esc, store_options
from hairline.cli._waiting import duration_text
from hairline.cli.lab import lab
from hairline.kit.jsonout import to_jsonable
from hairline.lab.periodic import (
    Schedule,
    add_schedule,
    list_schedules,
    remove_schedule,
    run_due,
)
from hairline.store.db import open_store


@lab.group()
def schedule() -> None:
    """Periodic A/A runs of experiment files whose service says [aa] every = "2h"."""


def _every_text(every_s: float) -> str:
    for unit, size_s in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if every_s >= size_s and every_s % size_s == 0:
            return f"{every_s / size_s:g}{unit}"
    return f"{every_s / 60:g}m"


def _due_text(next_at: float, now: float) -> str:
    return "now" if next_at <= now else f"in {duration_text(next_at - now)}"


@schedule.command("add")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@store_options
def add(file: Path, db_url: str | None, home: Path) -> None:
    """Run FILE as an A/A experiment every [aa] every of its service, the first now.

    The file is read anew at each run. `hairline lab schedule run` (or `hairline serve`)
    enqueues the runs; `hairline lab process` runs them.
    """
    store = open_store(db_url, home=home)
    try:
        added = add_schedule(store, file)
    finally:
        store.close()
    console().print(
        f"A/A of {esc(added.service)} every {_every_text(added.every_s)}: "
        f"{esc(added.experiment_file)} (schedule {added.id})"
    )


@schedule.command("remove")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@store_options
def remove(file: Path, db_url: str | None, home: Path) -> None:
    """Stop FILE's periodic A/A runs (a run already queued stays queued)."""
    store = open_store(db_url, home=home)
    try:
        remove_schedule(store, file)
    finally:
        store.close()
    console().print(f"no more periodic A/A runs of {esc(str(file.resolve()))}")


@schedule.command("list")
@store_options
@click.option("--json", "as_json", is_flag=True, help="One JSON array on stdout.")
def list_(db_url: str | None, home: Path, as_json: bool) -> None:
    """The schedules: every how long, when next, the last run, and why one was skipped."""
    store = open_store(db_url, home=home, read_only=True)
    try:
        schedules = list_schedules(store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(to_jsonable(schedules), indent=2))
        return
    out = console()
    if not schedules:
        out.print("no A/A schedules: `hairline lab schedule add FILE` adds one")
        return
    out.print(_table(schedules, time.time()))
    for s in schedules:
        if s.error is not None:
            out.print(f"[bold yellow]schedule {s.id} skipped[/]: {esc(s.error)}")


def _table(schedules: list[Schedule], now: float) -> Table:
    table = Table("id", "service", "team", "every", "next", "last run", "file", "state")
    for s in schedules:
        last = "-" if s.last_experiment_id is None else f"#{s.last_experiment_id}"
        if s.last_phase is not None:
            last += f" {s.last_phase}"
        state = "skipped" if s.error is not None else ("ok" if s.enabled else "disabled")
        table.add_row(str(s.id), esc(s.service), esc(s.team), _every_text(s.every_s),
                      _due_text(s.next_at, now), last, esc(s.experiment_file),
                      state)  # fmt: skip
    return table


class _Stop(BaseException):
    """SIGTERM or Ctrl-C: stop between rounds."""


@schedule.command("run")
@store_options
@click.option("--once", is_flag=True, help="Enqueue what is due now, then exit.")
@click.option("--poll-s", type=click.FloatRange(1), default=60.0, show_default=True,
              help="How often to look for due A/A runs.")  # fmt: skip
def run(db_url: str | None, home: Path, once: bool, poll_s: float) -> None:
    """Enqueue due periodic A/A runs, every --poll-s (`hairline serve` does this too).

    A file that became invalid is skipped for that period with a warning; the schedule
    stays, and `schedule list` shows why.
    """
    out = console()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise _Stop

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    store = open_store(db_url, home=home)
    try:
        while True:
            try:
                due = run_due(store)
            except SQLAlchemyError as err:
                # The database went away for a moment: try again next round.
                out.print(f"[bold yellow]database error[/]: {esc(str(err).splitlines()[0])}")
            else:
                for experiment_id in due.enqueued:
                    out.print(f"enqueued A/A experiment #{experiment_id}")
                for skip in due.skipped:
                    out.print(
                        f"[bold yellow]skipped[/] {esc(skip.experiment_file)}: {esc(skip.reason)}"
                    )
            if once:
                break
            time.sleep(poll_s)
    except _Stop:
        out.print("scheduler stopped")
    finally:
        store.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
