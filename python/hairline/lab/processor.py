"""Processors: claim an experiment from the queue and move it through its lifecycle.

    queued -> building -> allocating -> running -> analyzing -> done
                 \\____________\\____________\\____________\\_____-> failed

(ServiceLab section 4.) Each step is a transaction conditional on holding the experiment's
lease, which a :class:`~hairline.lab.queue.LeaseKeeper` renews meanwhile. Trials are the
unit of durability: a trial's observations are written to one Parquet file, atomically,
and only then is the trial marked done; a trial left ``running`` by a processor that died
is run again from its start by the next one, after that processor has stopped whatever
arms the dead one left behind. So no trial is lost or counted twice.

With ``backend = "ray"`` the hosts are test machines (Ray nodes). A host lost mid-trial is
marked unhealthy (until its agent registers again) and replaced by allocation, and the
trial runs again from its start; a Ray head that stops answering fails the batch, and the
experiment waits ("waiting: Ray head unreachable") until a later attempt finds a head.
"""

from __future__ import annotations

import contextlib
import shutil
import traceback
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from hairline.arms.remote import HostLost
from hairline.config import ArmConfig
from hairline.errors import BuildFailed, HairlineError
from hairline.hosts.inventory import (
    Allocation,
    Waiting,
    duet_arms,
    ensure_local_hosts,
    requirements_for,
)
from hairline.hosts.registry import mark_unhealthy
from hairline.lab.build import BuildResult, BuildSandbox, BuildSpec, Source, build
from hairline.lab.context import Context, Event, ProcessorOptions
from hairline.lab.hostpairs import allocate_pairs, split_pairs
from hairline.lab.queue import (
    Cancelled,
    LeaseKeeper,
    LeaseLost,
    claim,
    load,
    release,
    transition,
)
from hairline.lab.remote import HeadUnreachable
from hairline.lab.results import (
    aa_experiments,
    analyze_experiment,
    experiment_observations,
    save_analysis,
    store_verdict_rows,
)
from hairline.lab.trials import run_trials_of
from hairline.store.db import Store
from hairline.store.models import Arm, Build, Trial
from hairline.store.observations import (
    write_observations,
)

__all__ = ["Event", "Outcome", "ProcessorOptions", "process_experiment", "process_next"]

Outcome = str  # "done" | "failed" | "waiting" | "lost" | "none"


def process_next(
    store: Store, options: ProcessorOptions, *, skip: Collection[int] = ()
) -> tuple[int | None, Outcome]:
    """Claim the next claimable experiment (passing over ``skip``, those that just had to
    wait for hosts) and work on it until it ends or must wait."""
    experiment_id = claim(
        store, options.owner, lease_s=options.lease_s, clock=options.clock, skip=skip
    )
    if experiment_id is None:
        return None, "none"
    return experiment_id, _work(store, experiment_id, options)


def process_experiment(store: Store, experiment_id: int, options: ProcessorOptions) -> Outcome:
    """Claim ``experiment_id`` (if its lease is free) and work on it; "none" if not claimed."""
    got = claim(
        store, options.owner, lease_s=options.lease_s, clock=options.clock,
        experiment_id=experiment_id,
    )  # fmt: skip
    if got is None:
        return "none"
    return _work(store, experiment_id, options)


def _work(store: Store, experiment_id: int, options: ProcessorOptions) -> Outcome:
    with LeaseKeeper(
        store, options.owner, experiment_id, lease_s=options.lease_s, clock=options.clock
    ) as keeper:
        with store.transaction() as session:
            row = load(session, experiment_id)
            arm_names = list(
                session.scalars(
                    select(Arm.name)
                    .where(Arm.experiment_id == experiment_id)
                    .order_by(Arm.position)
                )
            )
        config = row.config.as_aa() if row.kind == "aa" else row.config
        ctx = Context(store, options, keeper, row, config, arm_names)
        try:
            return _advance(ctx)
        except LeaseLost:
            ctx.emit("failed", "lease lost; another processor took the experiment over")
            return "lost"
        except Cancelled:
            _end(ctx, "cancelled", "cancelled (hairline cancel); arms stopped, hosts released")
            return "cancelled"
        except (HairlineError, KeyboardInterrupt) as err:
            reason = (
                "interrupted (SIGINT or SIGTERM); arms stopped"
                if isinstance(err, KeyboardInterrupt)
                else _reason(err)
            )
            _fail(ctx, reason)
            if isinstance(err, KeyboardInterrupt):
                raise
            return "failed"
        except Exception as err:  # a bug: fail the experiment visibly, keep the processor
            _fail(ctx, f"internal error: {err!r}\n{traceback.format_exc(limit=8)}")
            return "failed"
        finally:
            with contextlib.suppress(Exception):
                release(store, options.owner, experiment_id)


def _reason(err: HairlineError) -> str:
    return err.message + (f" (hint: {err.hint})" if err.hint else "")


def _fail(ctx: Context, reason: str) -> None:
    _end(ctx, "failed", reason)


def _end(ctx: Context, phase: Literal["failed", "cancelled"], reason: str) -> None:
    """End the experiment in ``phase`` (failed or cancelled) with ``reason``."""
    with contextlib.suppress(LeaseLost), ctx.store.transaction() as session:
        transition(
            session, ctx.options.owner, ctx.id, clock=ctx.options.clock, phase=phase,
            failure=reason, finished_at=ctx.options.clock(), progress=phase,
            give_hosts_back=True,
        )  # fmt: skip
        # The trial that was running will never finish: say so instead of "running".
        session.execute(
            update(Trial)
            .where(Trial.experiment_id == ctx.id, Trial.state == "running")
            .values(state="abandoned", note=reason, finished_at=ctx.options.clock())
        )
    ctx.emit(phase, reason)


def _advance(ctx: Context) -> Outcome:
    phase = ctx.row.phase
    if phase == "queued":
        ctx.move(phase="building", started_at=ctx.options.clock(), progress="building")
        ctx.emit("phase", "building")
        phase = "building"
    if phase == "building":
        _build(ctx)
        ctx.move(phase="allocating", progress="allocating hosts")
        ctx.emit("phase", "allocating hosts")
        phase = "allocating"
    # Allocate, run; with the ray backend a host lost mid-trial is marked unhealthy and
    # allocation replaces it (same class), and the interrupted trial runs again.
    while phase in ("allocating", "running"):
        if ctx.options.backend == "local":
            ensure_local_hosts(ctx.store, cpus_per_host=ctx.options.cpus_per_host,
                               duet_arms=duet_arms(ctx.config, len(ctx.arm_names)))  # fmt: skip
        # Several host pairs side by side on test machines; this machine's CPU sets
        # make one pair (two would share its CPUs and the engine's).
        most_pairs = ctx.config.design.most_host_pairs if ctx.options.backend != "local" else 1
        got = allocate_pairs(
            ctx.store, ctx.id, ctx.row.team, len(ctx.arm_names), most_pairs,
            lease_s=ctx.options.lease_s, clock=ctx.options.clock, backend=ctx.options.backend,
            requirements=requirements_for(ctx.config, ctx.arm_names, store=ctx.store,
                                          backend=ctx.options.backend),
        )  # fmt: skip
        if isinstance(got, Waiting):
            ctx.move(progress=f"waiting for hosts: {got.reason}")
            ctx.emit("waiting", got.reason)
            return "waiting"
        allocation = got
        if phase == "allocating":
            ctx.move(phase="running", progress="running")
            ctx.emit("phase", f"running on {_pairs_text(allocation, len(ctx.arm_names))}")
            phase = "running"
        try:
            run_trials_of(ctx, allocation)
        except HostLost as err:
            mark_unhealthy(ctx.store, allocation.host_ids[err.index], err.reason)
            ctx.emit("trial", f"host {err.name} was lost ({err.reason}); it is marked "
                     "unhealthy and the trial runs again on another host")  # fmt: skip
            continue
        except HeadUnreachable as err:
            reason = f"Ray head unreachable ({err.reason})"
            ctx.move(progress=f"waiting: {reason}", give_hosts_back=True)
            ctx.emit("waiting", f"{reason}; the interrupted trial runs again once a head is back")
            return "waiting"
        ctx.move(phase="analyzing", progress="analyzing", give_hosts_back=True)
        ctx.emit("phase", "analyzing")
        phase = "analyzing"
    if phase == "analyzing":
        _analyze(ctx)
        ctx.move(phase="done", finished_at=ctx.options.clock(), progress="done",
                 give_hosts_back=True)  # fmt: skip
        ctx.emit("done", "done")
        return "done"
    return phase


def _pairs_text(allocation: Allocation, arms: int) -> str:
    """``h1, h2``, or with several host pairs ``2 host pairs: h1+h2, h3+h4``."""
    lanes = split_pairs(allocation, arms)
    if len(lanes) == 1:
        return ", ".join(allocation.names)
    return f"{len(lanes)} host pairs: " + ", ".join("+".join(x.allocation.names) for x in lanes)


# -- build ------------------------------------------------------------------------------


def _source(arm: ArmConfig) -> Source | None:
    if arm.git is not None:
        return Source(repo=Path(arm.repo or "."), rev=arm.git)
    if arm.path is not None:
        return Source(path=Path(arm.path))
    return None


def _build(ctx: Context) -> None:
    service = ctx.config.service
    cache = ctx.options.cache_dir or (ctx.store.home / "builds")
    results: dict[str, BuildResult] = {}
    for name in ctx.arm_names:
        arm = ctx.config.arms[name]
        source = _source(arm)
        if source is None:
            continue
        if service.build.command is None and service.build.artifact is None:
            continue
        spec = BuildSpec(
            source=source,
            command=service.build.command,
            artifact=service.build.artifact,
            env={**service.env, **arm.env},
            # What came through the API is code the lab has not seen: it builds sandboxed.
            sandbox=BuildSandbox() if ctx.row.origin == "api" else None,
        )
        ctx.keeper.check()
        ctx.emit("build", f"building {name} ({source.describe()})")

        def output(line: str, arm_name: str = name) -> None:
            ctx.emit("build", f"{arm_name}: {line.rstrip()}")

        try:
            result = build(spec, cache, timeout_s=service.build.timeout_s, on_output=output)
        except BuildFailed as err:
            # The arms built before it keep their builds and logs on the record too.
            with ctx.store.transaction() as session:
                for built, done in results.items():
                    _record_build(session, ctx, built, done)
            _keep_failed_log(ctx, name, err.log)
            raise
        results[name] = result
        ctx.emit(
            "build",
            f"{name}: {'cached' if result.cached else 'built'} {result.key[:12]} "
            f"({result.duration_s:.1f} s)",
        )
    with ctx.store.transaction() as session:
        transition(session, ctx.options.owner, ctx.id, clock=ctx.options.clock)
        for name, result in results.items():
            _record_build(session, ctx, name, result)
            if session.get(Build, result.key) is None:
                session.add(
                    Build(
                        key=result.key,
                        tree_hash=result.tree_hash,
                        source=result.source,
                        command=service.build.command,
                        artifact=str(result.artifact),
                        log=str(result.log) if result.log else None,
                        duration_s=result.duration_s,
                        created_at=ctx.options.clock(),
                    )
                )


def _record_build(session: Session, ctx: Context, name: str, result: BuildResult) -> None:
    session.execute(
        update(Arm)
        .where(Arm.experiment_id == ctx.id, Arm.name == name)
        .values(
            build_key=result.key,
            build_cached=result.cached,
            artifact=str(result.artifact),
            build_log=str(result.log) if result.log else None,
            source=result.source
            if ctx.row.kind == "ab" or name == ctx.arm_names[0]
            else f"same as {ctx.arm_names[0]}",
        )
    )


def _keep_failed_log(ctx: Context, arm: str, log: Path | None) -> None:
    """Copy a failed build's log (kept in the build cache's ``failed/``, shared by every
    experiment) into the experiment's own folder and record it as the arm's build log, so
    that the experiment's page links it (web/views_experiments.py serves recorded logs)."""
    if log is None or not log.is_file():
        return
    # Named by the arm's position, not its name: no name from a file becomes a path.
    kept = ctx.row.artifacts_dir / f"build-failed-{ctx.arm_names.index(arm)}.log"
    with contextlib.suppress(OSError):
        shutil.copyfile(log, kept)
        with ctx.store.transaction() as session:
            session.execute(
                update(Arm)
                .where(Arm.experiment_id == ctx.id, Arm.name == arm)
                .values(build_log=str(kept))
            )


# -- run --------------------------------------------------------------------------------


# -- analysis ---------------------------------------------------------------------------


def _analyze(ctx: Context) -> None:
    table = experiment_observations(ctx.store, ctx.id)
    if table is not None:
        write_observations(ctx.row.artifacts_dir / "observations.parquet", table)
    history_ids = [i for i in aa_experiments(ctx.store, ctx.config.service.name) if i != ctx.id]
    result = analyze_experiment(ctx.store, ctx.id, ctx.config, history_ids=history_ids)
    # The one record of this analysis: reports and listings read it back (with the A/A
    # history it used, so that `report --reanalyse` analyses the same way).
    save_analysis(ctx.row.artifacts_dir, result, history_ids)
    with ctx.store.transaction() as session:
        transition(session, ctx.options.owner, ctx.id, clock=ctx.options.clock)
        store_verdict_rows(session, ctx.id, result)
