"""The progress lines or JSON events that show a wait (lab/patience.py decides when)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import click
from rich.console import Console

from hairline.cli._options import esc
from hairline.lab.context import Event
from hairline.lab.patience import Patience, WaitNote, duration_text

__all__ = ["Patience", "ProgressOut", "WaitNote", "duration_text"]


class ProgressOut:
    """Where progress goes: rich lines on ``out`` (``--progress text``), or one JSON
    object per line on stderr (``--progress json``), which stays machine-readable while
    stdout carries a report."""

    def __init__(self, out: Console, mode: str, *, clock: Callable[[], float] = time.time):
        self.out = out
        self.json = mode == "json"
        self.clock = clock

    def emit(self, event: str, /, **fields: object) -> None:
        """One JSON event (nothing in text mode)."""
        if self.json:
            record = {"event": event, "t": round(self.clock(), 3), **fields}
            click.echo(json.dumps(record, default=str), err=True)

    def processor_event(self, event: Event) -> None:
        """A processor's event as JSON; its waits are :meth:`waiting`'s, with their time."""
        if event.kind == "waiting":
            return
        self.emit(
            event.kind, experiment=event.experiment_id, message=event.message,
            **({"trial": event.trial} if event.trial is not None else {}),
            **({"trials": event.trials} if event.trials is not None else {}),
        )  # fmt: skip

    def waiting(self, note: WaitNote, *, experiment: int | None = None) -> None:
        if self.json:
            self.emit("waiting", experiment=experiment, reason=note.reason,
                      waited_s=round(note.waited_s, 1), wait_s=note.limit_s)  # fmt: skip
            return
        # The reason is the experiment's progress line, which says "waiting ..." itself.
        where = f"#{experiment}: " if experiment is not None else ""
        self.out.print(f"[yellow]{where}{esc(note.text())}[/]")
