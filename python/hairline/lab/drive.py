"""Drive a queued experiment to its end: process it here, or follow the processors that do,
and say how it ended. The commands that run experiments (run, aa, demo, bisect, tune,
attribute) share this loop and turn its :class:`Outcome` into words and an exit status;
nothing here prints or exits.

While processing here, an attempt that finds no hosts (or another processor holding the
experiment) is retried every ``RETRY_S``; while following, the experiment's standing is
polled every ``POLL_S``. Either gives up once it has waited ``wait_s`` (0: never) without
moving on (lab/patience.py), releasing what this processor held.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from hairline.kit import interrupts
from hairline.lab.context import Event
from hairline.lab.patience import Patience, WaitNote
from hairline.lab.processor import ProcessorOptions, process_experiment
from hairline.lab.queue import new_owner, release
from hairline.lab.status import Standing, standing
from hairline.store.db import Store
from hairline.store.models import TERMINAL_PHASES

__all__ = ["POLL_S", "RETRY_S", "DriveHooks", "DriveSettings", "Outcome", "drive"]

RETRY_S = 2.0
POLL_S = 1.0


class DriveHooks(Protocol):
    """What the caller shows while the loop runs."""

    def processor_event(self, event: Event) -> None:
        """An event of the processing here (phases, batches, trials)."""

    def waiting(self, note: WaitNote, *, experiment: int | None = None) -> None:
        """A wait worth showing (lab/patience.py decides when)."""

    def followed(self, where: Standing, *, experiment: int) -> None:
        """The followed experiment's progress line changed."""


@dataclass(frozen=True)
class DriveSettings:
    """How to take the experiment to its end."""

    no_process: bool = False  # follow the lab's processors instead of processing here
    lease_s: float = 30.0
    cpus_per_host: int | None = None
    backend: dict[str, Any] = field(default_factory=dict)  # ProcessorOptions' backend fields
    wait_s: float = 0.0  # give up after waiting this long (0: never)
    clock: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class Outcome:
    """How the loop ended: ``ended`` (the experiment reached a terminal phase), ``gave_up``
    (it waited ``wait_s``; it stays queued, held by no processor) or ``interrupted`` (Ctrl-C
    or SIGTERM while processing here; ``attempting`` says whether a batch was under way, so
    the experiment failed with its arms stopped, or it was only waiting and stays queued)."""

    state: Literal["ended", "gave_up", "interrupted"]
    experiment_id: int
    attempting: bool = False
    waited_s: float = 0.0
    reason: str = ""
    limit_s: float = 0.0


def _mark(where: Standing) -> tuple[str, int]:
    """What changes when the experiment moves on: its phase, or a trial ending."""
    return where.phase, where.trials_ended


def drive(store: Store, experiment_id: int, settings: DriveSettings, hooks: DriveHooks) -> Outcome:
    """Process (or follow) ``experiment_id`` until it ends, waits too long or is
    interrupted (KeyboardInterrupt is caught here and becomes the outcome)."""
    patience = Patience(settings.wait_s)
    if settings.no_process:
        return _follow(store, experiment_id, settings, hooks, patience)
    options = ProcessorOptions(
        owner=new_owner("run"), lease_s=settings.lease_s, cpus_per_host=settings.cpus_per_host,
        on_event=hooks.processor_event, **settings.backend,
    )  # fmt: skip
    attempting = False
    try:
        while True:
            interrupts.raise_if_interrupted()
            attempting = True
            outcome = process_experiment(store, experiment_id, options)
            attempting = False
            if outcome not in ("waiting", "none"):
                return Outcome("ended", experiment_id)
            where = standing(store, experiment_id)
            if outcome == "none" and where.phase in TERMINAL_PHASES:
                return Outcome("ended", experiment_id)
            # "none": another processor holds it; its progress line says if it waits.
            waits = outcome == "waiting" or where.waiting
            now = settings.clock()
            note = patience.observe(
                now, mark=_mark(where), reason=where.progress if waits else None
            )
            if note is not None:
                hooks.waiting(note, experiment=experiment_id)
            if patience.expired(now):
                release(store, options.owner, experiment_id)
                return _gave_up(experiment_id, patience, now)
            time.sleep(patience.sleep_s(now, RETRY_S))
    except KeyboardInterrupt:
        return Outcome("interrupted", experiment_id, attempting=attempting)


def _follow(
    store: Store, experiment_id: int, settings: DriveSettings, hooks: DriveHooks, patience: Patience
) -> Outcome:
    """Follow an experiment the lab's processors run (a Ctrl-C here stops only the
    following, so it is not caught)."""
    last = ""
    while True:
        where = standing(store, experiment_id)
        if where.progress != last:
            last = where.progress
            hooks.followed(where, experiment=experiment_id)
        if where.phase in TERMINAL_PHASES:
            return Outcome("ended", experiment_id)
        now = settings.clock()
        reason = where.progress if where.waiting else None
        note = patience.observe(now, mark=_mark(where), reason=reason)
        if note is not None:
            hooks.waiting(note, experiment=experiment_id)
        if patience.expired(now):
            return _gave_up(experiment_id, patience, now)
        time.sleep(patience.sleep_s(now, POLL_S))


def _gave_up(experiment_id: int, patience: Patience, now: float) -> Outcome:
    return Outcome(
        "gave_up", experiment_id, waited_s=patience.waited_s(now),
        reason=patience.reason or "waiting", limit_s=patience.limit_s,
    )  # fmt: skip
