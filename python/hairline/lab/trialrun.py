"""Running an experiment's pending trials: one after another on one host pair, or side
by side on several (lab/hostpairs.py), each trial on one pair.

Each trial runs its batches (:func:`~hairline.lab.runner.run_trial`, or the ray backend's
driver), is written to one Parquet file and only then marked done; a trial whose batches
were spoiled in every attempt is left out with its reason; under ``trials = "auto"`` a
look after each trial (one look at a time, whichever pair finished it) stops handing out
trials once the verdicts are settled (:func:`~hairline.lab.results.settled_at_look`).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Sequence

import pyarrow.compute as pc
from sqlalchemy import func, select, update

from hairline.arms.remote import HostLost
from hairline.errors import HairlineError
from hairline.kit import interrupts
from hairline.lab.context import Context
from hairline.lab.hostpairs import Lane, TrialQueue, run_lanes
from hairline.lab.queue import transition
from hairline.lab.remote import HeadUnreachable, RemoteDriver
from hairline.lab.results import aa_experiments, settled_at_look
from hairline.lab.runner import Hooks, RunPlan, TrialLeftOut, run_trial
from hairline.lab.schedule import Batch
from hairline.stats.sequential import FIRST_LOOK
from hairline.store.models import Run, Trial
from hairline.store.observations import write_observations

__all__ = ["run_pending_trials"]


def run_pending_trials(
    ctx: Context, lanes: Sequence[tuple[Lane, RunPlan, RemoteDriver | None]]
) -> None:
    """The pending trials, on one lane in this thread, or on several side by side."""
    with ctx.store.transaction() as session:
        pending = [
            t.index
            for t in session.scalars(
                select(Trial).where(Trial.experiment_id == ctx.id, Trial.state == "pending")
            )
        ]
    queue = TrialQueue(pending)
    by_pair = {lane.pair: (lane, plan, remote) for lane, plan, remote in lanes}
    abort = threading.Event()
    look = threading.Lock()

    def check() -> None:
        ctx.keeper.check()
        if len(lanes) == 1:
            return  # one pair: exactly the checks of before host pairs
        # A signal reaches the main thread only: the pairs' threads look for it here.
        interrupts.raise_if_interrupted()
        if abort.is_set():
            raise KeyboardInterrupt("another host pair's thread was interrupted")

    def work(lane: Lane, index: int) -> bool:
        _, plan, remote = by_pair[lane.pair]
        if not _one_trial(ctx, lane, plan, remote, index, check=check):
            return True
        if not ctx.config.design.sequential:
            return True
        with look:  # one look at a time, each seeing every trial done so far
            return queue.closed or not _settled(ctx)

    if len(lanes) == 1:
        lane = lanes[0][0]
        while (index := queue.take(lane.pair)) is not None:
            interrupts.raise_if_interrupted()
            if not work(lane, index):
                break
    else:
        run_lanes([lane for lane, _, _ in lanes], queue, work, abort=abort)
    _after_trials(ctx)


def _one_trial(
    ctx: Context,
    lane: Lane,
    plan: RunPlan,
    remote: RemoteDriver | None,
    index: int,
    *,
    check: Callable[[], None],
) -> bool:
    """Run trial ``index`` on ``lane``'s hosts, write its observations and mark it done
    (True), or left out (False). Its runs and rows name its hosts by their position in
    the experiment's whole allocation (``lane.offset`` on), so the host pair is known."""
    owner, clock = ctx.options.owner, ctx.options.clock
    total = ctx.config.design.planned_trials
    allocation = lane.allocation
    run_ids: dict[tuple[int, int, str], int] = {}
    where = f" on host pair {lane.pair + 1}" if lane.pairs > 1 else ""

    def started(batch: Batch, arm: str, host: int, pgid: int, port: int) -> None:
        with ctx.store.transaction() as session:
            transition(session, owner, ctx.id, clock=clock)
            run = Run(
                experiment_id=ctx.id, trial=batch.trial, batch=batch.batch, arm=arm,
                host_id=allocation.host_ids[host], host_index=lane.offset + host,
                processor=owner,
                # A process group of another machine is nothing this one may signal.
                pgid=pgid if remote is None else None, port=port,
                facts=json.dumps(allocation.facts[host]),
                started_at=clock(),
            )  # fmt: skip
            session.add(run)
            session.flush()
            run_ids[(batch.trial, batch.batch, arm)] = run.id

    def stopped(batch: Batch) -> None:
        """The batch attempt's arms are down: its runs end now, not with the trial."""
        ids = [i for (t, b, _), i in run_ids.items() if (t, b) == (batch.trial, batch.batch)]
        with ctx.store.transaction() as session:
            session.execute(
                update(Run)
                .where(Run.id.in_(ids), Run.stopped_at.is_(None))
                .values(stopped_at=clock())
            )

    def progress(batch: Batch, what: str) -> None:
        ctx.emit(
            "batch",
            f"trial {batch.trial + 1}/{total} batch {batch.batch + 1}{where}: {what}",
            trial=batch.trial,
            trials=total,
        )

    check()
    with ctx.store.transaction() as session:
        transition(
            session, owner, ctx.id, clock=clock,
            progress=f"running trial {index + 1} of {total}",
        )  # fmt: skip
        session.execute(
            update(Trial)
            .where(Trial.experiment_id == ctx.id, Trial.index == index)
            .values(
                state="running", attempts=Trial.attempts + 1, processor=owner,
                started_at=clock(),
            )
        )  # fmt: skip
    hooks = Hooks(progress=progress, arm_started=started, arms_stopped=stopped, check=check)
    trial_batches = [b for b in plan.batches() if b.trial == index]
    try:
        if remote is None:
            table = run_trial(plan, trial_batches, hooks)
        else:
            table = remote.trial(plan, trial_batches, hooks, check=check)
    except (HostLost, HeadUnreachable) as err:
        # Not this trial's fault: it runs again, from its start, on hosts that answer.
        with ctx.store.transaction() as session:
            transition(session, owner, ctx.id, clock=clock)
            session.execute(
                update(Trial)
                .where(Trial.experiment_id == ctx.id, Trial.index == index)
                .values(state="pending", started_at=None)
            )
        if isinstance(err, HostLost) and lane.offset:
            raise HostLost(lane.offset + err.index, err.name, err.reason) from err
        raise
    except TrialLeftOut as err:
        _end_trial(ctx, index, state="excluded", note=err.message)
        ctx.emit("trial", f"trial {index + 1} left out{where}: {err.message}", trial=index)
        return False
    finally:
        # Arms are stopped by now (run_trial's context managers); say so in the runs.
        with contextlib.suppress(Exception), ctx.store.transaction() as session:
            session.execute(
                update(Run)
                .where(Run.id.in_(list(run_ids.values())), Run.stopped_at.is_(None))
                .values(stopped_at=clock())
            )
    if lane.offset:
        table = table.set_column(
            table.schema.get_field_index("host"), "host",
            pc.add(table.column("host"), lane.offset),
        )  # fmt: skip
    path = ctx.row.artifacts_dir / f"trial-{index}.parquet"
    write_observations(path, table)
    with ctx.store.transaction() as session:
        transition(session, owner, ctx.id, clock=clock)
        session.execute(
            update(Trial)
            .where(Trial.experiment_id == ctx.id, Trial.index == index)
            .values(state="done", observations=str(path), finished_at=clock())
        )
    ctx.emit("trial", f"trial {index + 1} of {total} done{where}", trial=index, trials=total)
    return True


def _settled(ctx: Context) -> bool:
    """A look of the sequential design after a trial: stop when the verdicts are settled."""
    with ctx.store.transaction() as session:
        done = session.scalar(
            select(func.count())
            .select_from(Trial)
            .where(Trial.experiment_id == ctx.id, Trial.state == "done")
        )
    if not done or done < FIRST_LOOK:
        return False
    history_ids = [i for i in aa_experiments(ctx.store, ctx.config.service.name) if i != ctx.id]
    settled, labels = settled_at_look(ctx.store, ctx.id, ctx.config, history_ids=history_ids)
    seen = ", ".join(f"{metric}: {label}" for metric, label in labels.items())
    ctx.emit("trial", f"look at {done} trials: {seen}" + ("; settled" if settled else ""))
    return settled


def _end_trial(ctx: Context, index: int, *, state: str, note: str) -> None:
    with ctx.store.transaction() as session:
        transition(session, ctx.options.owner, ctx.id, clock=ctx.options.clock)
        session.execute(
            update(Trial)
            .where(Trial.experiment_id == ctx.id, Trial.index == index)
            .values(state=state, note=note, finished_at=ctx.options.clock())
        )


def _after_trials(ctx: Context) -> None:
    """Trials not needed are marked so; an experiment with no trial to analyse fails with
    the reasons its trials were left out."""
    with ctx.store.transaction() as session:
        transition(session, ctx.options.owner, ctx.id, clock=ctx.options.clock)
        session.execute(
            update(Trial)
            .where(Trial.experiment_id == ctx.id, Trial.state == "pending")
            .values(state="skipped", note="not needed: the sequential design had settled")
        )
        done = session.scalar(
            select(func.count())
            .select_from(Trial)
            .where(Trial.experiment_id == ctx.id, Trial.state == "done")
        )
        notes = list(
            session.scalars(
                select(Trial.note).where(Trial.experiment_id == ctx.id, Trial.state == "excluded")
            )
        )
    if not done:
        # Capacity mode sets no rate: its searches failed, and the fix is in the SLO and the
        # search's bounds, not in a rate.
        fix = (
            "check [mode] slo_p99_ms against what the service can do, and the search's "
            "[mode] start_rate_per_s and max_rate_per_s (docs/capacity.md)"
            if ctx.config.mode_name == "capacity"
            else "lower [load] rate_per_s or raise [service] max_error_rate"
        )
        raise HairlineError(
            "every trial was left out: " + "; ".join(n or "" for n in notes[:3]),
            hint="the batches' load was never valid: see the arms' logs in the experiment's "
            f"runs folder; {fix}",
        )
