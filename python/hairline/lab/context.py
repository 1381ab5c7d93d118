"""What a processor carries while it moves one experiment: options, lease, config, events."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hairline.config import ExperimentConfig
from hairline.lab.queue import Clock, ExperimentRow, LeaseKeeper, transition
from hairline.store.db import Store

__all__ = ["Context", "Event", "EventKind", "ProcessorOptions"]


EventKind = Literal["phase", "build", "trial", "batch", "waiting", "done", "failed", "cancelled"]


@dataclass(frozen=True)
class Event:
    """Something a processor did, for progress displays."""

    experiment_id: int
    kind: EventKind
    message: str
    trial: int | None = None
    trials: int | None = None


@dataclass(frozen=True)
class ProcessorOptions:
    owner: str
    lease_s: float = 30.0
    cpus_per_host: int | None = None
    clock: Clock = time.time
    on_event: Callable[[Event], None] | None = None
    # Where builds are cached; default: the store's home.
    cache_dir: Path | None = None
    # "local": arms on this machine's CPU sets; "ray": on test machines that joined as Ray
    # nodes (hairline agent start), through a driver process connected to ``ray_address``.
    backend: str = "local"
    ray_address: str | None = None


@dataclass
class Context:
    store: Store
    options: ProcessorOptions
    keeper: LeaseKeeper
    row: ExperimentRow
    config: ExperimentConfig
    arm_names: list[str] = field(default_factory=list)

    @property
    def id(self) -> int:
        return self.row.id

    def emit(self, kind: EventKind, message: str, **extra: int | None) -> None:
        if self.options.on_event:
            self.options.on_event(Event(self.id, kind, message, **extra))

    def move(self, *, give_hosts_back: bool = False, **values: object) -> None:
        """Update the experiment's row (and release its hosts), if this processor holds it."""
        self.keeper.check()
        with self.store.transaction() as session:
            transition(session, self.options.owner, self.id, clock=self.options.clock,
                       give_hosts_back=give_hosts_back, **values)  # fmt: skip
