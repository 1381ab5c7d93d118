"""The tuning loop (HHVM section 5): the searcher proposes a batch of configurations, each is
judged by an A/B experiment against the default configuration through the ordinary lab, and
each experiment's effect and standard error go back to the searcher, until the budget is
spent.

Nothing lives only in memory. The searchers are pure functions of the evaluations so far;
a batch's candidates are written before their experiments are queued, and each experiment's
id before it runs; so a run whose driver died is resumed (``hairline tune --resume``) where
it stopped, with the same proposals it would have made.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hairline.config import ExperimentConfig
from hairline.errors import HairlineError
from hairline.store.db import Store
from hairline.tune import runs
from hairline.tune.apply import batch_experiments, candidate_arm_name
from hairline.tune.config import TuningSpec
from hairline.tune.outcome import read_outcome
from hairline.tune.runs import EvaluationRow
from hairline.tune.searchers import Observation, Told, propose
from hairline.tune.space import Configuration

__all__ = ["Lab", "TuningStopped", "history", "run_tuning"]

Clock = Callable[[], float]
_BEAT_S = 5.0


@dataclass(frozen=True)
class Lab:
    """How the loop reaches the lab: ``enqueue`` queues an experiment (its id), ``finish``
    takes one to its end (processing it here, or waiting for the processors), ``prepare``
    may rewrite an experiment before it is queued (test and control clusters pin its
    hosts), ``on_event`` gets progress lines."""

    enqueue: Callable[[ExperimentConfig], int]
    finish: Callable[[int], None]
    on_event: Callable[[str], None] = lambda line: None
    prepare: Callable[[ExperimentConfig, int], ExperimentConfig] = lambda config, slot: config


class TuningStopped(HairlineError):
    """The run stopped on an experiment that failed for a reason not its candidate's; its
    state is kept and ``--resume`` goes on from it."""


def history(spec: TuningSpec, rows: Sequence[EvaluationRow]) -> list[Told]:
    """What the searcher is told: the default (the control, 0 by definition), then every
    finished evaluation in order; an infeasible one as an observation without a value."""
    told = [Told(dict(spec.default), Observation(0.0, 0.0))]
    for row in rows:
        if row.status == "done" and row.value is not None:
            told.append(Told(row.config, Observation(row.value, max(row.se or 0.0, 0.0))))
        elif row.status == "infeasible":
            told.append(Told(row.config, Observation(None, 0.0)))
    return told


def _describe(config: Configuration) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


@contextmanager
def _heartbeat(store: Store, run_id: int, clock: Clock) -> Iterator[None]:
    """Say every few seconds that this driver is alive (experiments take minutes)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(_BEAT_S):
            try:
                runs.beat(store, run_id, clock=clock)
            except Exception:  # a database hiccup must not kill the driver; it retries
                continue

    thread = threading.Thread(target=beat, name=f"tune-{run_id}-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_tuning(
    store: Store,
    spec: TuningSpec,
    lab: Lab,
    *,
    run_id: int | None = None,
    folder: Path,
    clock: Clock = time.time,
) -> int:
    """Start (or, with ``run_id``, resume) a tuning run and drive it to its end; its id.

    Raises :class:`TuningStopped` when an experiment fails for a reason that is not its
    candidate's (hosts, the control arm): the run is kept as ``failed``, resumable."""
    if run_id is None:
        run_id = runs.create_run(store, spec, clock=clock)
        lab.on_event(
            f"tuning run {run_id} of {spec.experiment.service.name}: "
            f"{spec.searcher}, {spec.evaluations} evaluations, batches of "
            f"{spec.batch_size}"
        )
    else:
        runs.take_over(store, run_id, spec, clock=clock)
        done = sum(r.status in ("done", "infeasible") for r in runs.evaluations(store, run_id))
        lab.on_event(f"resuming tuning run {run_id}: {done} of {spec.evaluations} evaluated")
    with _heartbeat(store, run_id, clock):
        try:
            _drive(store, spec, lab, run_id, folder / f"tune-{run_id}", clock)
        except TuningStopped as err:
            runs.set_state(store, run_id, "failed", err.message, clock=clock)
            raise
        except BaseException as err:
            reason = "interrupted" if isinstance(err, KeyboardInterrupt) else str(err)
            runs.set_state(store, run_id, "failed", reason, clock=clock)
            raise
    runs.set_state(store, run_id, "done", clock=clock)
    return run_id


def _drive(
    store: Store, spec: TuningSpec, lab: Lab, run_id: int, folder: Path, clock: Clock
) -> None:
    while True:
        rows = runs.evaluations(store, run_id)
        open_rows = [r for r in rows if r.status in ("proposed", "running", "failed")]
        if open_rows:
            _evaluate(store, spec, lab, run_id, open_rows, folder, clock)
            continue
        spent = sum(r.status in ("done", "infeasible") for r in rows)
        if spent >= spec.evaluations:
            lab.on_event(f"done: {spent} evaluations")
            return
        batch = 1 + max((r.batch for r in rows), default=0)
        wanted = min(spec.batch_size, spec.evaluations - spent)
        configs = propose(
            spec.searcher,
            spec.space,
            history(spec, rows),
            wanted,
            seed=spec.seed,
            options=spec.options,
        )
        if not configs:
            lab.on_event(
                f"done: the {spec.searcher} searcher has nothing left to propose "
                f"after {spent} evaluations"
            )
            return
        positions = runs.add_proposed(store, run_id, batch, configs, clock=clock)
        for position, config in zip(positions, configs, strict=True):
            lab.on_event(
                f"batch {batch}: evaluation {position + 1}/{spec.evaluations} "
                f"proposed: {_describe(config)}"
            )


def _evaluate(
    store: Store,
    spec: TuningSpec,
    lab: Lab,
    run_id: int,
    rows: Sequence[EvaluationRow],
    folder: Path,
    clock: Clock,
) -> None:
    """Queue what is proposed (or failed before: tried again), then take every queued
    experiment to its end and record what it found."""
    fresh = [r for r in rows if r.status in ("proposed", "failed")]
    if fresh:
        candidates = [(r.position, r.config) for r in fresh]
        for slot, (config, positions) in enumerate(batch_experiments(spec, candidates, folder)):
            prepared = lab.prepare(config, slot)
            experiment_id = lab.enqueue(prepared)
            arms = [candidate_arm_name(p) for p in positions]
            runs.set_experiment(store, run_id, positions, experiment_id, arms)
            lab.on_event(
                f"experiment {experiment_id} queued for evaluation "
                f"{', '.join(str(p + 1) for p in positions)}"
            )
    pending = [r for r in runs.evaluations(store, run_id) if r.status == "running"]
    for held in dict.fromkeys(r.experiment_id for r in pending if r.experiment_id is not None):
        lab.finish(held)
        for row in (r for r in pending if r.experiment_id == held):
            found = read_outcome(store, spec, held, row.arm)
            runs.record(store, run_id, row.position, found.status, clock=clock, **found.columns())
            lab.on_event(
                _said(
                    row,
                    found.status,
                    found.effect_rel,
                    found.ci_low,
                    found.ci_high,
                    found.reason,
                    spec.metric,
                )
            )
            if found.status == "failed":
                raise TuningStopped(
                    f"tuning run {run_id}: evaluation {row.position + 1}: {found.reason}",
                    hint=f"`hairline report {held}` shows what happened; fix it, then "
                    f"`hairline tune FILE --resume {run_id}` runs it again",
                )


def _said(
    row: EvaluationRow,
    status: str,
    effect: float | None,
    low: float | None,
    high: float | None,
    reason: str,
    metric: str,
) -> str:
    head = f"evaluation {row.position + 1} ({_describe(row.config)}): "
    if status != "done" or effect is None:
        return head + f"{status}: {reason}"
    interval = f" [{low:+.2%}, {high:+.2%}]" if low is not None and high is not None else ""
    return head + f"{metric} {effect:+.2%}{interval}"
