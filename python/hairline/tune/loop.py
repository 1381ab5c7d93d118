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

from sqlalchemy import select

from hairline.config import ExperimentConfig
from hairline.errors import HairlineError
from hairline.store.db import Store
from hairline.store.models import Experiment, VerdictRow
from hairline.tune import runs
from hairline.tune.apply import CONTROL_ARM, batch_experiments, candidate_arm_name
from hairline.tune.clusters import Clusters, aa_between, choose_clusters, pinned
from hairline.tune.config import TuningSpec
from hairline.tune.outcome import Found, read_outcome, settle
from hairline.tune.runs import EvaluationRow
from hairline.tune.searchers import Observation, Told, propose
from hairline.tune.space import Configuration

__all__ = ["Lab", "TuningStopped", "history", "run_tuning"]

Clock = Callable[[], float]
_BEAT_S = 5.0


@dataclass(frozen=True)
class Lab:
    """How the loop reaches the lab: ``enqueue`` queues an experiment of a kind ("ab",
    "aa") and gives its id, ``finish`` takes one to its end (processing it here, or waiting
    for the processors), ``on_event`` gets progress lines; ``backend`` is the hosts'
    (test and control clusters need "ray")."""

    enqueue: Callable[[ExperimentConfig, str], int]
    finish: Callable[[int], None]
    on_event: Callable[[str], None] = lambda line: None
    backend: str = "local"


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
        _reopen_interrupted(store, spec, run_id, clock)
        done = sum(r.status in ("done", "infeasible") for r in runs.evaluations(store, run_id))
        lab.on_event(f"resuming tuning run {run_id}: {done} of {spec.evaluations} evaluated")
    with _heartbeat(store, run_id, clock):
        try:
            clusters = _clusters(store, spec, lab, run_id, folder / f"tune-{run_id}", clock)
            if clusters is None and spec.clusters is not None:
                return run_id
            _drive(store, spec, lab, run_id, folder / f"tune-{run_id}", clusters, clock)
        except BaseException as err:
            if isinstance(err, TuningStopped):
                reason = err.message
            elif isinstance(err, KeyboardInterrupt | SystemExit):
                reason = "interrupted"
            else:
                reason = f"{type(err).__name__}: {err}"
            # The experiments this driver was taking to their end are no longer watched:
            # their evaluations say so rather than "running" (--resume takes them up).
            runs.interrupt_running(store, run_id, runs.interrupted_reason(run_id), clock=clock)
            runs.set_state(store, run_id, "failed", reason, clock=clock)
            raise
    runs.set_state(store, run_id, "done", clock=clock)
    return run_id


def _reopen_interrupted(store: Store, spec: TuningSpec, run_id: int, clock: Clock) -> None:
    """Evaluations left running or interrupted by the last driver: those whose experiment
    ended failed or cancelled while no driver watched are judged as any ended experiment
    (queued again unless the candidate was at fault); the others are waited for again."""
    for row in runs.evaluations(store, run_id):
        if row.status not in ("running", "interrupted") or row.experiment_id is None:
            continue
        if standing_phase(store, row.experiment_id) in ("failed", "cancelled"):
            _record(store, spec, run_id, row, read_outcome(store, spec, row.experiment_id, row.arm),
                    clock)  # fmt: skip
        elif row.status == "interrupted":  # its experiment goes on: wait for it again
            runs.record(store, run_id, row.position, "running", clock=clock, reason="",
                        finished_at=None)  # fmt: skip


def _record(
    store: Store, spec: TuningSpec, run_id: int, row: EvaluationRow, found: Found, clock: Clock
) -> Found:
    """Write what an evaluation's experiment found (an arm failure counted, see
    outcome.settle); what the evaluation became."""
    settled, failures = settle(found, row.candidate_failures, spec.infeasible_after_failures)
    runs.record(store, run_id, row.position, settled.status, clock=clock,
                candidate_failures=failures, **settled.columns())  # fmt: skip
    return settled


def _clusters(
    store: Store, spec: TuningSpec, lab: Lab, run_id: int, folder: Path, clock: Clock
) -> Clusters | None:
    """The run's test and control clusters (HHVM section 5.1), chosen and cleared by an A/A
    between them once; None without ``[clusters]``, or when that A/A flagged a difference
    (the run is then refused)."""
    if spec.clusters is None:
        return None
    run = runs.load_run(store, run_id)
    if run.clusters:
        return Clusters(
            tuple(run.clusters["test"]),
            tuple(run.clusters["control"]),
            dict(run.clusters.get("distances", {})),
        )
    clusters = choose_clusters(
        store, spec.experiment.service.name, spec.clusters.size, seed=spec.seed,
        backend=lab.backend,
    )  # fmt: skip
    lab.on_event(
        f"clusters: test {', '.join(clusters.test)}; control {', '.join(clusters.control)}; "
        "an A/A between them first"
    )
    both_default, _ = batch_experiments(spec, [(0, spec.default)], folder / "aa")[0]
    # One A/A per pair (in parallel where processors allow): a bad pair would bias every
    # candidate that lands on it.
    aa_ids = [
        lab.enqueue(
            aa_between(both_default, clusters, control_arm=CONTROL_ARM,
                       test_arm=candidate_arm_name(0), pair=pair),
            "aa",
        )
        for pair in range(len(clusters.pairs))
    ]  # fmt: skip
    for aa_id in aa_ids:
        lab.finish(aa_id)
    flagged = "; ".join(
        f"experiment {aa_id}: {found}"
        for aa_id in aa_ids
        if (found := _aa_flags(store, aa_id, spec.metric))
    )
    aa_id = aa_ids[0]
    chosen = {
        "test": list(clusters.test),
        "control": list(clusters.control),
        "distances": clusters.distances,
    }
    if flagged:
        reason = (
            f"the A/A between the clusters found {flagged}: tuning on them would measure the "
            "hosts, not the configurations"
        )
        runs.set_state(
            store, run_id, "refused", reason, clusters=chosen, aa_experiment_id=aa_id, clock=clock
        )
        lab.on_event(f"refused: {reason}")
        return None
    runs.set_state(store, run_id, "running", clusters=chosen, aa_experiment_id=aa_id, clock=clock)
    lab.on_event(f"clusters cleared by A/A experiments {', '.join(map(str, aa_ids))}")
    return clusters


def standing_phase(store: Store, experiment_id: int) -> str:
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        return "missing" if row is None else row.phase


def _aa_flags(store: Store, experiment_id: int, metric: str) -> str:
    """What an ended A/A flagged on the tuning's objective ("" when nothing), or why it
    cannot clear the clusters. Only the objective counts: with every metric judged at
    alpha 0.05, an A/A of seven metrics would refuse sound clusters one time in three."""
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        if row is None or row.phase != "done":
            phase = "missing" if row is None else f"{row.phase}: {row.failure or ''}"
            return f"no verdict (it ended {phase})"
        verdicts = session.scalars(
            select(VerdictRow).where(
                VerdictRow.experiment_id == experiment_id, VerdictRow.metric == metric
            )
        ).all()
        flagged = [v for v in verdicts if v.label in ("regression", "improvement")]
        return ", ".join(f"{v.metric} {v.label}" for v in flagged)


def _drive(
    store: Store,
    spec: TuningSpec,
    lab: Lab,
    run_id: int,
    folder: Path,
    clusters: Clusters | None,
    clock: Clock,
) -> None:
    while True:
        rows = runs.evaluations(store, run_id)
        open_rows = [r for r in rows if r.status in ("proposed", "running", "failed")]
        if open_rows:
            _evaluate(store, spec, lab, run_id, open_rows, folder, clusters, clock)
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
    clusters: Clusters | None,
    clock: Clock,
) -> None:
    """Queue what is proposed (or failed before: tried again), then take every queued
    experiment to its end and record what it found."""
    fresh = [r for r in rows if r.status in ("proposed", "failed")]
    if fresh:
        candidates = [(r.position, r.config) for r in fresh]
        for slot, (config, positions) in enumerate(batch_experiments(spec, candidates, folder)):
            arms = [candidate_arm_name(p) for p in positions]
            if clusters is not None:  # candidate i of the batch on pair i (in parallel)
                config = pinned(config, clusters, control_arm=CONTROL_ARM, test_arm=arms[0],
                                pair=slot % len(clusters.pairs))  # fmt: skip
            experiment_id = lab.enqueue(config, "ab")
            runs.set_experiment(store, run_id, positions, experiment_id, arms)
            lab.on_event(
                f"experiment {experiment_id} queued for evaluation "
                f"{', '.join(str(p + 1) for p in positions)}"
            )
    pending = [r for r in runs.evaluations(store, run_id) if r.status == "running"]
    for held in dict.fromkeys(r.experiment_id for r in pending if r.experiment_id is not None):
        lab.finish(held)
        for row in (r for r in pending if r.experiment_id == held):
            found = _record(store, spec, run_id, row, read_outcome(store, spec, held, row.arm),
                            clock)  # fmt: skip
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
