"""``hairline lab event add|list``: deployments and maintenance that an experiment running at
the same time should warn about (docs/safety.md, "Other events at the same time")."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

import click
from rich.table import Table

from hairline.cli._base import console
from hairline.cli._options import esc, store_options
from hairline.cli.lab import lab
from hairline.lab.events import EVENT_KINDS, TIME_FORMATS, add_event, list_events, parse_time
from hairline.store.db import open_store


@lab.group()
def event() -> None:
    """Deployments and maintenance beside experiments: reports of experiments they
    overlapped warn about them."""


def _local(at_s: float) -> str:
    return datetime.fromtimestamp(at_s).astimezone().isoformat(timespec="seconds")


@event.command("add")
@click.argument("kind", type=click.Choice(EVENT_KINDS))
@click.option("--service", required=True,
              help="The service or downstream (host:port) it touched.")  # fmt: skip
@click.option("--host", help="The host (or machine) it touched, if one.")
@click.option("--at", "at_text", default="now", show_default=True,
              help=f"When it started: {TIME_FORMATS}.")  # fmt: skip
@click.option("--until", "until_text", help="When it ended (default: a point in time).")
@click.option("--note", default="", help="What happened, for the reports that warn.")
@store_options
def add(
    kind: str,
    service: str,
    host: str | None,
    at_text: str,
    until_text: str | None,
    note: str,
    db_url: str | None,
    home: Path,
) -> None:
    """Record a KIND (deploy, maintenance, other) event of --service (and --host)."""
    now_s = time.time()
    started_at = parse_time(at_text, now_s=now_s, flag="--at")
    ended_at = None if until_text is None else parse_time(until_text, now_s=now_s, flag="--until")
    store = open_store(db_url, home=home)
    try:
        added = add_event(store, kind, service=service, host=host, started_at=started_at,
                          ended_at=ended_at, note=note)  # fmt: skip
    finally:
        store.close()
    span = _local(added.started_at) + (
        f" to {_local(added.ended_at)}" if added.ended_at is not None else ""
    )
    where = f" on {esc(added.host)}" if added.host else ""
    console().print(f"event {added.id}: {added.kind} of {esc(added.service)}{where} at {span}")


@event.command("list")
@click.option("--since", "since_text", help=f"Only events going on at or after it: {TIME_FORMATS}.")
@click.option("--limit", type=click.IntRange(1), default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@store_options
def list_(
    since_text: str | None, limit: int, as_json: bool, db_url: str | None, home: Path
) -> None:
    """Recorded events, newest first."""
    since_s = None if since_text is None else parse_time(since_text, now_s=time.time(),
                                                          flag="--since")  # fmt: skip
    store = open_store(db_url, home=home, read_only=True)
    try:
        events = list_events(store, since_s=since_s, limit=limit)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([asdict(e) for e in events], indent=2))
        return
    out = console()
    if not events:
        out.print("no events")
        return
    table = Table(title="events")
    for col in ("id", "kind", "service", "host", "started", "ended", "note", "by"):
        table.add_column(col)
    for e in events:
        table.add_row(
            str(e.id), e.kind, esc(e.service), esc(e.host or ""), _local(e.started_at),
            _local(e.ended_at) if e.ended_at is not None else "(a point)", esc(e.note),
            esc(e.created_by),
        )  # fmt: skip
    out.print(table)
