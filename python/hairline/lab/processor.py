"""Processors: claim an experiment from the queue and move it through its lifecycle.

    queued -> building -> allocating -> running -> analyzing -> done
                 \\____________\\____________\\____________\\_____-> failed

(ServiceLab section 4.) Each step is a transaction conditional on holding the experiment's
lease, which a :class:`~hairline.lab.queue.LeaseKeeper` renews meanwhile. Trials are the
unit of durability: a trial's observations are written to one Parquet file, atomically,
and only then is the trial marked done; a trial left ``running`` by a processor that died
is run again from its start by the next one, after that processor has stopped whatever
arms the dead one left behind. So no trial is lost or counted twice.
"""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from sqlalchemy import delete, select, update

from hairline import engine
from hairline.arms.local import ArmSpec
from hairline.config import ArmConfig, ExperimentConfig, start_command
from hairline.errors import HairlineError
from hairline.hosts.inventory import (
    Allocation,
    HostsUnavailable,
    Waiting,
    allocate,
    ensure_local_hosts,
    release_hosts,
)
from hairline.lab.analysis import Analysis, AnalysisOptions, analyze
from hairline.lab.build import BuildResult, BuildSpec, Source, build
from hairline.lab.queue import (
    Clock,
    ExperimentRow,
    LeaseKeeper,
    LeaseLost,
    claim,
    load,
    release,
    transition,
)
from hairline.lab.runner import ArmDef, RunPlan, run_trial
from hairline.lab.schedule import Batch
from hairline.procs import group_alive, kill_group
from hairline.stats.data import Comparison
from hairline.store.db import Store, pairs
from hairline.store.models import Arm, Build, Experiment, Run, Trial, VerdictRow
from hairline.store.observations import (
    Observations,
    observations_from_table,
    read_observations,
    write_observations,
)

__all__ = ["Event", "Outcome", "ProcessorOptions", "process_experiment", "process_next"]


@dataclass(frozen=True)
class Event:
    """Something a processor did, for progress displays: ``kind`` is one of phase,
    build, trial, batch, waiting, done, failed."""

    experiment_id: int
    kind: str
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


Outcome = str  # "done" | "failed" | "waiting" | "lost" | "none"


def process_next(store: Store, options: ProcessorOptions) -> tuple[int | None, Outcome]:
    """Claim the next claimable experiment and work on it until it ends or must wait."""
    experiment_id = claim(store, options.owner, lease_s=options.lease_s, clock=options.clock)
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


@dataclass
class _Context:
    store: Store
    options: ProcessorOptions
    keeper: LeaseKeeper
    row: ExperimentRow
    config: ExperimentConfig
    arm_names: list[str] = field(default_factory=list)

    @property
    def id(self) -> int:
        return self.row.id

    def emit(self, kind: str, message: str, **extra: int | None) -> None:
        if self.options.on_event:
            self.options.on_event(Event(self.id, kind, message, **extra))

    def move(self, **values: object) -> None:
        self.keeper.check()
        with self.store.transaction() as session:
            transition(session, self.options.owner, self.id, clock=self.options.clock, **values)


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
        ctx = _Context(store, options, keeper, row, config, arm_names)
        try:
            return _advance(ctx)
        except LeaseLost:
            ctx.emit("failed", "lease lost; another processor took the experiment over")
            return "lost"
        except (HairlineError, KeyboardInterrupt) as err:
            reason = (
                "interrupted (SIGINT); arms stopped"
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


def _fail(ctx: _Context, reason: str) -> None:
    with contextlib.suppress(LeaseLost):
        ctx.move(phase="failed", failure=reason, finished_at=ctx.options.clock(), progress="failed")
    release_hosts(ctx.store, ctx.id)
    ctx.emit("failed", reason)


def _advance(ctx: _Context) -> Outcome:
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
    allocation: Allocation | None = None
    if phase in ("allocating", "running"):
        ensure_local_hosts(ctx.store, cpus_per_host=ctx.options.cpus_per_host)
        try:
            got = allocate(
                ctx.store, ctx.id, ctx.row.team, len(ctx.arm_names),
                lease_s=ctx.options.lease_s, clock=ctx.options.clock,
            )  # fmt: skip
        except HostsUnavailable:
            raise
        if isinstance(got, Waiting):
            ctx.move(progress=f"waiting for hosts: {got.reason}")
            ctx.emit("waiting", got.reason)
            return "waiting"
        allocation = got
        if phase == "allocating":
            ctx.move(phase="running", progress="running")
            ctx.emit("phase", f"running on {', '.join(allocation.names)}")
            phase = "running"
    if phase == "running":
        assert allocation is not None
        _run(ctx, allocation)
        release_hosts(ctx.store, ctx.id)
        ctx.move(phase="analyzing", progress="analyzing")
        ctx.emit("phase", "analyzing")
        phase = "analyzing"
    if phase == "analyzing":
        _analyze(ctx)
        ctx.move(phase="done", finished_at=ctx.options.clock(), progress="done")
        release_hosts(ctx.store, ctx.id)
        ctx.emit("done", "done")
        return "done"
    return phase


# -- build ------------------------------------------------------------------------------


def _source(arm: ArmConfig) -> Source | None:
    if arm.git is not None:
        return Source(repo=Path(arm.repo or "."), rev=arm.git)
    if arm.path is not None:
        return Source(path=Path(arm.path))
    return None


def _build(ctx: _Context) -> None:
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
        )
        ctx.keeper.check()
        ctx.emit("build", f"building {name} ({source.describe()})")

        def output(line: str, arm_name: str = name) -> None:
            ctx.emit("build", f"{arm_name}: {line.rstrip()}")

        result = build(spec, cache, timeout_s=service.build.timeout_s, on_output=output)
        results[name] = result
        ctx.emit(
            "build",
            f"{name}: {'cached' if result.cached else 'built'} {result.key[:12]} "
            f"({result.duration_s:.1f} s)",
        )
    with ctx.store.transaction() as session:
        transition(session, ctx.options.owner, ctx.id, clock=ctx.options.clock)
        for name, result in results.items():
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


# -- run --------------------------------------------------------------------------------


def _stop_leftovers(ctx: _Context) -> None:
    """Stop arms that a processor which lost this experiment left running, and put its
    interrupted trial back in the queue of trials."""
    with ctx.store.transaction() as session:
        transition(session, ctx.options.owner, ctx.id, clock=ctx.options.clock)
        left = session.scalars(
            select(Run).where(Run.experiment_id == ctx.id, Run.stopped_at.is_(None))
        ).all()
        for run in left:
            if run.pgid is not None and group_alive(run.pgid):
                kill_group(run.pgid)
                ctx.emit("trial", f"stopped arm {run.arm} (process group {run.pgid}) left by "
                         f"{run.processor}")  # fmt: skip
            run.stopped_at = ctx.options.clock()
        interrupted = session.scalars(
            select(Trial).where(Trial.experiment_id == ctx.id, Trial.state == "running")
        ).all()
        for trial in interrupted:
            trial.state = "pending"
            ctx.emit("trial", f"trial {trial.index + 1} was interrupted; running it again")


def _plan(ctx: _Context, allocation: Allocation) -> RunPlan:
    config = ctx.config
    service = config.service
    with ctx.store.transaction() as session:
        artifacts = pairs(
            session.execute(select(Arm.name, Arm.artifact).where(Arm.experiment_id == ctx.id))
        )
    engine_binary = str(engine.find_engine())
    workdir = ctx.row.artifacts_dir / "runs"

    def arm_def(name: str) -> ArmDef:
        arm = config.arms[name]
        artifact = artifacts.get(name) or ""

        def spec(port: int, cpus: tuple[int, ...]) -> ArmSpec:
            arm_dir = workdir / f"{name}-{port}"
            arm_dir.mkdir(parents=True, exist_ok=True)
            words = start_command(
                service,
                arm,
                {
                    "port": str(port),
                    "artifact": artifact,
                    "cpus": ",".join(map(str, cpus)),
                    "engine": engine_binary,
                    "workdir": str(arm_dir),
                    "arm": name,
                },
            )
            return ArmSpec(
                name=name,
                command=words,
                health_path=service.health,
                cwd=Path(service.root),
                env={**service.env, **arm.env},
            )

        return ArmDef(
            name=name, spec=spec, warm_path=service.warm, metrics_path=service.metrics_path
        )

    layout = ensure_local_hosts(ctx.store, cpus_per_host=ctx.options.cpus_per_host)
    return RunPlan(
        arms=tuple(arm_def(n) for n in ctx.arm_names),
        hosts=allocation.cpus,
        trace=Path(config.trace),
        rate_per_s=config.load.rate_per_s,
        duration_s=config.load.duration_s,
        warmup_rate_per_s=config.load.warmup_rate_per_s or config.load.rate_per_s,
        warmup_duration_s=config.load.warmup_duration_s,
        trials=config.design.trials,
        design=config.design.name,
        workdir=workdir,
        health_timeout_s=service.health_timeout_s,
        warm_timeout_s=service.warm_timeout_s,
        counters=tuple(service.counters),
        engine_cpus=layout.engine_cpus or None,
    )


def _run(ctx: _Context, allocation: Allocation) -> None:
    _stop_leftovers(ctx)
    plan = _plan(ctx, allocation)
    batches = plan.batches()
    owner = ctx.options.owner
    clock = ctx.options.clock
    total = ctx.config.design.trials
    with ctx.store.transaction() as session:
        pending = [
            t.index
            for t in session.scalars(
                select(Trial).where(Trial.experiment_id == ctx.id, Trial.state != "done")
            )
        ]
    run_ids: dict[tuple[int, int, str], int] = {}

    def started(batch: Batch, arm: str, host: int, pgid: int, port: int) -> None:
        with ctx.store.transaction() as session:
            transition(session, owner, ctx.id, clock=clock)
            run = Run(
                experiment_id=ctx.id, trial=batch.trial, batch=batch.batch, arm=arm,
                host_id=allocation.host_ids[host], host_index=host, processor=owner,
                pgid=pgid, port=port, facts=json.dumps(allocation.facts[host]),
                started_at=clock(),
            )  # fmt: skip
            session.add(run)
            session.flush()
            run_ids[(batch.trial, batch.batch, arm)] = run.id

    def progress(batch: Batch, what: str) -> None:
        ctx.emit(
            "batch",
            f"trial {batch.trial + 1}/{total} batch {batch.batch + 1}: {what}",
            trial=batch.trial,
            trials=total,
        )

    for index in sorted(pending):
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
        try:
            table = run_trial(
                plan,
                [b for b in batches if b.trial == index],
                progress=progress,
                on_arm_started=started,
                check=ctx.keeper.check,
            )
        finally:
            # Arms are stopped by now (run_trial's context managers); say so in the runs.
            with contextlib.suppress(Exception), ctx.store.transaction() as session:
                session.execute(
                    update(Run)
                    .where(Run.id.in_(list(run_ids.values())), Run.stopped_at.is_(None))
                    .values(stopped_at=clock())
                )
        path = ctx.row.artifacts_dir / f"trial-{index}.parquet"
        write_observations(path, table)
        with ctx.store.transaction() as session:
            transition(session, owner, ctx.id, clock=clock)
            session.execute(
                update(Trial)
                .where(Trial.experiment_id == ctx.id, Trial.index == index)
                .values(state="done", observations=str(path), finished_at=clock())
            )
        ctx.emit("trial", f"trial {index + 1} of {total} done", trial=index, trials=total)


# -- analysis ---------------------------------------------------------------------------


def experiment_observations(store: Store, experiment_id: int) -> pa.Table | None:
    """The done trials' observations of one experiment, in trial order."""
    with store.transaction() as session:
        paths = list(
            session.scalars(
                select(Trial.observations)
                .where(Trial.experiment_id == experiment_id, Trial.state == "done")
                .order_by(Trial.index)
            )
        )
    tables = [read_observations(Path(p)).table for p in paths if p]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def aa_experiments(store: Store, service: str) -> list[int]:
    """The finished A/A experiments of ``service``: its history."""
    from hairline.store.models import Service

    with store.transaction() as session:
        return list(
            session.scalars(
                select(Experiment.id)
                .join(Service, Service.id == Experiment.service_id)
                .where(Service.name == service, Experiment.kind == "aa", Experiment.phase == "done")
                .order_by(Experiment.id)
            )
        )


def aa_history(
    store: Store, service: str, *, exclude: int | None = None, ids: list[int] | None = None
) -> Observations | None:
    """A/A experiments of ``service`` (``ids``, default all finished ones) as one history
    with an experiment column."""
    if ids is None:
        ids = aa_experiments(store, service)
    tables = []
    for eid in ids:
        if eid == exclude:
            continue
        table = experiment_observations(store, eid)
        if table is not None:
            tables.append(table.append_column("experiment", pa.array([eid] * len(table))))
    if not tables:
        return None
    combined = pa.concat_tables(tables, promote_options="permissive")
    return observations_from_table(combined, source=f"A/A history of {service}")


def analysis_options(config: ExperimentConfig) -> AnalysisOptions:
    return AnalysisOptions(
        model=config.analysis.model,
        alpha=config.analysis.alpha,
        policies=config.policies(),
        correction=config.analysis.correction,
        seed=config.analysis.seed,
    )


def analyze_experiment(
    store: Store,
    experiment_id: int,
    config: ExperimentConfig,
    *,
    history_ids: list[int] | None = None,
) -> Analysis:
    """Analyse an experiment's finished trials against its service's A/A history
    (``history_ids``, default: every finished A/A experiment of the service)."""
    table = experiment_observations(store, experiment_id)
    if table is None:
        raise HairlineError(f"experiment {experiment_id} has no finished trials to analyse")
    observations = observations_from_table(table, source=f"experiment {experiment_id}")
    history = aa_history(store, config.service.name, exclude=experiment_id, ids=history_ids)
    return analyze(
        observations, analysis_options(config), history=history, baseline=config.baseline_arm
    )


def _analyze(ctx: _Context) -> None:
    table = experiment_observations(ctx.store, ctx.id)
    if table is not None:
        write_observations(ctx.row.artifacts_dir / "observations.parquet", table)
    # The history used is recorded, so that a later report analyses the same way.
    history_ids = [i for i in aa_experiments(ctx.store, ctx.config.service.name) if i != ctx.id]
    (ctx.row.artifacts_dir / "analysis.json").write_text(
        json.dumps({"history_experiments": history_ids})
    )
    result = analyze_experiment(ctx.store, ctx.id, ctx.config, history_ids=history_ids)
    with ctx.store.transaction() as session:
        transition(session, ctx.options.owner, ctx.id, clock=ctx.options.clock)
        session.execute(delete(VerdictRow).where(VerdictRow.experiment_id == ctx.id))
        policies = ctx.config.policies()
        for r in result.results:
            c: Comparison = r.comparison
            policy = policies.get(r.metric)
            session.add(
                VerdictRow(
                    experiment_id=ctx.id,
                    metric=r.metric,
                    candidate=r.candidate,
                    label=r.verdict.label,
                    model=r.model,
                    model_reason=r.model_reason,
                    relative_effect=_num(c.effect_rel),
                    absolute_effect=_num(c.effect_abs),
                    ci_low=_num(c.ci_rel[0]),
                    ci_high=_num(c.ci_rel[1]),
                    p_value=_num(c.p_value),
                    threshold=str(policy.threshold) if policy else "default",
                    direction=policy.direction if policy else "higher-is-worse",
                )
            )


def _num(value: float | None) -> float | None:
    import math

    if value is None or not math.isfinite(value):
        return None
    return float(value)
