"""The progress lines or JSON events that show a wait (lab/patience.py decides when).

With ``--progress json`` each event is one JSON object on a line of stderr, typed below
(docs/schema/progress-event.json is generated from :data:`ProgressEventJson`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Literal, NotRequired

import click
from pydantic import Field
from rich.console import Console
from typing_extensions import TypedDict

from hairline.cli._options import esc
from hairline.kit.jsonout import documented
from hairline.lab.context import Event
from hairline.lab.patience import Patience, WaitNote, duration_text

__all__ = ["Patience", "ProgressEventJson", "ProgressOut", "WaitNote", "duration_text"]


@documented
class QueuedJson(TypedDict):
    """The experiment was queued."""

    event: Literal["queued"]
    t: float
    """Unix seconds, to the millisecond."""
    experiment: int
    kind: str
    """"ab" or "aa"."""
    service: str


@documented
class ProcessorJson(TypedDict):
    """Something the processor did: a phase, a build's line, a trial, a batch, the end."""

    event: Literal["phase", "build", "trial", "batch", "done", "failed", "cancelled"]
    t: float
    experiment: int
    message: str
    trial: NotRequired[int]
    """The trial, from 0, when one ended or was left out."""
    trials: NotRequired[int]
    """The trials planned, when one ended."""


@documented
class FollowedJson(TypedDict):
    """Where an experiment another processor moves stands (``--no-process``)."""

    event: Literal["progress"]
    t: float
    experiment: int
    phase: str
    progress: str


@documented
class WaitingJson(TypedDict):
    """The experiment waits (for hosts, for a Ray head), and how long it has."""

    event: Literal["waiting"]
    t: float
    experiment: int | None
    reason: str
    waited_s: float
    wait_s: float
    """How long it may wait with no trial ending (``--wait-s``); 0: forever."""


@documented
class GaveUpJson(TypedDict):
    """The command stopped waiting (exit status 3); the experiments stay queued."""

    event: Literal["gave_up"]
    t: float
    experiment: NotRequired[int]
    """``run``, ``aa``: the experiment left queued."""
    experiments: NotRequired[list[int]]
    """``lab process``: the experiments left waiting."""
    reason: str | None
    waited_s: float
    wait_s: float
    command: NotRequired[str]
    """The command that finishes it."""
    exit_status: int


@documented
class ProcessorStartedJson(TypedDict):
    """``lab process`` started a processor."""

    event: Literal["processor"]
    t: float
    owner: str
    db: str
    """The database, without a password."""


@documented
class OutcomeJson(TypedDict):
    """``lab process`` moved an experiment as far as it goes now."""

    event: Literal["outcome"]
    t: float
    experiment: int
    outcome: str


@documented
class StoppingJson(TypedDict):
    """``lab process`` was asked to stop."""

    event: Literal["stopping"]
    t: float


ProgressEventJson = Annotated[
    QueuedJson
    | ProcessorJson
    | FollowedJson
    | WaitingJson
    | GaveUpJson
    | ProcessorStartedJson
    | OutcomeJson
    | StoppingJson,
    Field(discriminator="event"),
]
"""One line of ``--progress json`` (``run``, ``aa``, ``demo``, ``bisect``, ``lab process``)."""


class ProgressOut:
    """Where progress goes: rich lines on ``out`` (``--progress text``), or one JSON
    object per line on stderr (``--progress json``), which stays machine-readable while
    stdout carries a report."""

    def __init__(self, out: Console, mode: str, *, clock: Callable[[], float] = time.time):
        self.out = out
        self.json = mode == "json"
        self.clock = clock

    def now(self) -> float:
        """An event's ``t``."""
        return round(self.clock(), 3)

    def emit(self, record: ProgressEventJson) -> None:
        """One JSON event (nothing in text mode)."""
        if self.json:
            click.echo(json.dumps(record, default=str), err=True)

    def processor_event(self, event: Event) -> None:
        """A processor's event as JSON; its waits are :meth:`waiting`'s, with their time."""
        kind = event.kind
        if kind == "waiting":
            return
        record: ProcessorJson = {
            "event": kind,
            "t": self.now(),
            "experiment": event.experiment_id,
            "message": event.message,
        }
        if event.trial is not None:
            record["trial"] = event.trial
        if event.trials is not None:
            record["trials"] = event.trials
        self.emit(record)

    def waiting(self, note: WaitNote, *, experiment: int | None = None) -> None:
        if self.json:
            self.emit({"event": "waiting", "t": self.now(), "experiment": experiment,
                       "reason": note.reason, "waited_s": round(note.waited_s, 1),
                       "wait_s": note.limit_s})  # fmt: skip
            return
        # The reason is the experiment's progress line, which says "waiting ..." itself.
        where = f"#{experiment}: " if experiment is not None else ""
        self.out.print(f"[yellow]{where}{esc(note.text())}[/]")
