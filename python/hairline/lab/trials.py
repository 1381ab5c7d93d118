"""The running phase: the replay rate (calibrated once), then trial after trial.

Each trial runs its batches (:func:`~hairline.lab.runner.run_trial`), is written to one
Parquet file and only then marked done; a trial whose batches were spoiled in every attempt
is left out with its reason; under ``trials = "auto"`` a look after each trial stops once
the verdicts are settled (:func:`~hairline.lab.results.settled_at_look`). Before any of it,
whatever a dead processor left of this experiment is stopped: its arm cgroups and network
namespaces by name, its process groups by the runs it recorded.

With the ``ray`` backend the batches and the calibration run in a driver process
(:mod:`hairline.lab.remote`) with the arms on the allocated test machines; a host lost
mid-trial or a head gone puts the trial back to pending and raises
:class:`~hairline.arms.remote.HostLost` or :class:`~hairline.lab.remote.HeadUnreachable`
for the processor to act on (replace the host, or wait for a head).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from pathlib import Path

from sqlalchemy import func, select, update

from hairline import engine
from hairline.arms.cgroup import sweep
from hairline.arms.local import ArmSpec
from hairline.arms.netns import sweep_namespaces
from hairline.arms.remote import HostLost
from hairline.arms.sandbox import ArmSandbox
from hairline.config import start_command
from hairline.config.isolation import IsolationConfig
from hairline.errors import HairlineError
from hairline.hosts.inventory import Allocation, ensure_local_hosts
from hairline.kit import interrupts
from hairline.kit.procs import group_alive, kill_group
from hairline.lab.calibrate import calibrate
from hairline.lab.capacity import capacity_settings
from hairline.lab.capacity_pid import capacity_batch
from hairline.lab.context import Context
from hairline.lab.queue import transition
from hairline.lab.remote import HeadUnreachable, RemoteDriver, RemoteRun, engine_shares_a_host
from hairline.lab.results import aa_experiments, settled_at_look
from hairline.lab.runner import ArmDef, Hooks, RunPlan, TrialLeftOut, run_trial
from hairline.lab.schedule import Batch
from hairline.stats.sequential import FIRST_LOOK
from hairline.store.db import Store, pairs
from hairline.store.models import Arm, Experiment, Run, Trial
from hairline.store.observations import write_observations

__all__ = ["cgroup_prefix", "run_trials_of"]


def cgroup_prefix(store: Store, experiment_id: int) -> str:
    """The name every arm cgroup of an experiment starts with: the store (two labs on one
    machine may both have an experiment 1) and the experiment."""
    store_tag = hashlib.sha256(store.url.encode()).hexdigest()[:8]
    return f"hl{store_tag}-e{experiment_id}-"


def _stop_leftovers(ctx: Context) -> None:
    """Stop arms that a processor which lost this experiment left running, and put its
    interrupted trial back in the queue of trials."""
    # Everything in the dead processor's arm cgroups, daemons that left their process
    # group included; the process groups below are the fallback where there were none.
    for name in sweep(cgroup_prefix(ctx.store, ctx.id)):
        ctx.emit("trial", f"stopped what was left in cgroup {name}")
    # Then their network namespaces, veths and nftables tables (isolated arms).
    for name in sweep_namespaces(cgroup_prefix(ctx.store, ctx.id)):
        ctx.emit("trial", f"removed network namespace {name} left behind")
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


def _remote(ctx: Context, allocation: Allocation) -> RemoteRun | None:
    """How this experiment's batches reach their hosts when they are Ray nodes."""
    if ctx.options.backend == "local":
        return None
    if ctx.config.service.isolation is not None:
        raise HairlineError(
            f"[service.isolation] of {ctx.config.service.name}: isolated arms run on the "
            f"local backend only, not on {ctx.options.backend}",
            hint="run with --backend local, or remove [service.isolation] from the service "
            "file (docs/safety.md)",
        )
    if not ctx.options.ray_address:
        raise HairlineError(
            f"the {ctx.options.backend} backend needs the Ray head's address",
            hint="pass --ray-address HOST:PORT (or set RAY_ADDRESS)",
        )
    with ctx.store.transaction() as session:
        builds = {
            name: (artifact, key)
            for name, artifact, key in session.execute(
                select(Arm.name, Arm.artifact, Arm.build_key).where(Arm.experiment_id == ctx.id)
            )
            if artifact and key
        }
    return RemoteRun(
        ray_address=ctx.options.ray_address,
        host_names=allocation.names,
        addresses=tuple(a or "127.0.0.1" for a in allocation.addresses),
        config=ctx.config,
        arm_names=tuple(ctx.arm_names),
        artifacts=builds,
        sandboxed=submitted(ctx),
    )


def submitted(ctx: Context) -> bool:
    """Whether the experiment came through the API: code the lab has not seen, whose build
    (lab/build/sandbox.py) and arms (arms/sandbox.py) run sandboxed."""
    return ctx.row.origin == "api"


def arm_sandbox(arm_dir: Path, root: Path, artifact: str, engine_binary: str) -> ArmSandbox:
    """A submitted arm's sandbox: its arm folder writable; the submission's folder, the
    built artifact (when there is one) and the lab's engine (``{engine}``, which a start
    command may run) read-only."""
    readable = (root, Path(engine_binary), *([Path(artifact)] if artifact else []))
    return ArmSandbox(writable=(arm_dir,), readable=readable)


def _plan(ctx: Context, allocation: Allocation) -> RunPlan:
    config = ctx.config
    service = config.service
    with ctx.store.transaction() as session:
        artifacts = pairs(
            session.execute(select(Arm.name, Arm.artifact).where(Arm.experiment_id == ctx.id))
        )
    engine_binary = str(engine.find_engine())
    workdir = ctx.row.artifacts_dir / "runs"
    sandboxed = submitted(ctx)

    def arm_def(name: str) -> ArmDef:
        arm = config.arms[name]
        artifact = artifacts.get(name) or ""

        def spec(port: int, cpus: tuple[int, ...], host: str = "127.0.0.1") -> ArmSpec:
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
                    # An isolated arm's namespace address; else loopback.
                    "host": host,
                },
            )
            return ArmSpec(
                name=name,
                command=words,
                health_path=service.health,
                cwd=Path(service.root),
                env={**service.env, **arm.env},
                sandbox=(
                    arm_sandbox(arm_dir, Path(service.root), artifact, engine_binary)
                    if sandboxed
                    else None
                ),
            )

        return ArmDef(
            name=name,
            spec=spec,
            warm_path=service.warm,
            metrics_path=service.metrics_path,
            # A submission's arms reach nothing but what its file allows: with no
            # [service.isolation], a namespace that allows nothing.
            isolation=service.isolation or (IsolationConfig() if sandboxed else None),
        )

    if ctx.options.backend == "local":
        layout = ensure_local_hosts(ctx.store, cpus_per_host=ctx.options.cpus_per_host)
        engine_cpus, shares = layout.engine_cpus or None, False
    else:
        # The engine runs where the processor runs, on the CPUs it was given (pin the
        # processor to a machine's housekeeping CPUs with taskset).
        engine_cpus = tuple(sorted(os.sched_getaffinity(0)))
        shares = engine_shares_a_host(allocation.addresses, allocation.cpus, engine_cpus)
    # Until calibration has run, a placeholder rate; _run replaces it before any trial.
    rate = config.load.rate_per_s or 0.0
    measure = None
    if config.mode_name == "capacity":
        settings = capacity_settings(config)
        measure, rate = capacity_batch(config), settings.start_rate_per_s
    return RunPlan(
        arms=tuple(arm_def(n) for n in ctx.arm_names),
        hosts=allocation.cpus,
        trace=Path(config.trace),
        rate_per_s=rate,
        duration_s=config.load.duration_s,
        warmup_rate_per_s=config.load.warmup_rate_per_s or rate,
        warmup_duration_s=config.load.warmup_duration_s,
        arrival=config.load.arrival,
        trials=config.design.planned_trials,
        # Hardware mode compares the hosts themselves: no arm moves to another's host.
        design=config.design.schedule,
        workdir=workdir,
        health_timeout_s=service.health_timeout_s,
        warm_timeout_s=service.warm_timeout_s,
        counters=tuple(service.counters),
        engine_cpus=engine_cpus,
        engine_shares_a_host=shares,
        cgroup_prefix=cgroup_prefix(ctx.store, ctx.id),
        max_batch_attempts=config.design.max_batch_attempts,
        max_error_rate=service.max_error_rate,
        measure=measure,
        # Sampled on this machine only: a Ray arm's processes are on its node (not yet).
        profile=service.profile if ctx.options.backend == "local" else None,
    )


def _rate(ctx: Context, plan: RunPlan, remote: RemoteDriver | None) -> RunPlan:
    """The plan at the experiment's replay rate: the file's, or the stored calibration's,
    or a calibration run now and stored, so a processor taking over uses the same rate."""
    if plan.measure is not None:
        return plan  # capacity mode searches for its rates: nothing to calibrate
    load_config = ctx.config.load
    with ctx.store.transaction() as session:
        row = session.get(Experiment, ctx.id)
        stored = row.rate_per_s if row is not None else None
    rate = load_config.rate_per_s or stored
    if rate is None:
        target = load_config.target_utilization
        ctx.emit(
            "phase",
            f"calibrating the rate to {target:.0%} busy"
            if target is not None
            else "calibrating the rate: the most precise per minute the lab serves",
        )
        start_rate_per_s = load_config.warmup_rate_per_s or 100.0
        decide_on = tuple(ctx.config.design.decide_on)
        if remote is None:
            result = calibrate(
                plan,
                plan.arms[0],
                target_utilization=target,
                decide_on=decide_on,
                start_rate_per_s=start_rate_per_s,
                progress=lambda line: ctx.emit("phase", line),
            )
        else:
            result = remote.calibrate(
                plan, target_utilization=target, decide_on=decide_on,
                start_rate_per_s=start_rate_per_s, progress=lambda line: ctx.emit("phase", line),
                check=ctx.keeper.check,
            )  # fmt: skip
        rate = result.rate_per_s
        ctx.emit(
            "phase",
            f"calibrated: {rate:g} requests/s in {result.seconds:g} s"
            + (f" ({result.reason})" if result.reason else ""),
        )
        calibration = json.dumps(result.as_dict())
    else:
        calibration = None
    if stored is None:
        with ctx.store.transaction() as session:
            transition(session, ctx.options.owner, ctx.id, clock=ctx.options.clock)
            values: dict[str, object] = {"rate_per_s": rate}
            if calibration is not None:
                values["calibration"] = calibration
            session.execute(update(Experiment).where(Experiment.id == ctx.id).values(**values))
    return dataclasses.replace(
        plan, rate_per_s=rate, warmup_rate_per_s=load_config.warmup_rate_per_s or rate
    )


def run_trials_of(ctx: Context, allocation: Allocation) -> None:
    """Run the experiment's pending trials on ``allocation``. With the ray backend, a host
    lost or the head gone ends this early (the trial back to pending) by raising
    :class:`HostLost` or :class:`HeadUnreachable`."""
    _stop_leftovers(ctx)
    remote_run = _remote(ctx, allocation)
    plan = _plan(ctx, allocation)
    if remote_run is None:
        _run_trials(ctx, allocation, _rate(ctx, plan, None), None)
        return
    with RemoteDriver(remote_run, plan.workdir) as remote:
        _run_trials(ctx, allocation, _rate(ctx, plan, remote), remote)


def _run_trials(
    ctx: Context, allocation: Allocation, plan: RunPlan, remote: RemoteDriver | None
) -> None:
    batches = plan.batches()
    owner = ctx.options.owner
    clock = ctx.options.clock
    total = ctx.config.design.planned_trials
    with ctx.store.transaction() as session:
        pending = [
            t.index
            for t in session.scalars(
                select(Trial).where(Trial.experiment_id == ctx.id, Trial.state == "pending")
            )
        ]
    run_ids: dict[tuple[int, int, str], int] = {}

    def started(batch: Batch, arm: str, host: int, pgid: int, port: int) -> None:
        with ctx.store.transaction() as session:
            transition(session, owner, ctx.id, clock=clock)
            run = Run(
                experiment_id=ctx.id, trial=batch.trial, batch=batch.batch, arm=arm,
                host_id=allocation.host_ids[host], host_index=host, processor=owner,
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
            f"trial {batch.trial + 1}/{total} batch {batch.batch + 1}: {what}",
            trial=batch.trial,
            trials=total,
        )

    for index in sorted(pending):
        interrupts.raise_if_interrupted()
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
        hooks = Hooks(
            progress=progress, arm_started=started, arms_stopped=stopped, check=ctx.keeper.check
        )
        trial_batches = [b for b in batches if b.trial == index]
        try:
            if remote is None:
                table = run_trial(plan, trial_batches, hooks)
            else:
                table = remote.trial(plan, trial_batches, hooks, check=ctx.keeper.check)
        except (HostLost, HeadUnreachable):
            # Not this trial's fault: it runs again, from its start, on hosts that answer.
            with ctx.store.transaction() as session:
                transition(session, owner, ctx.id, clock=clock)
                session.execute(
                    update(Trial)
                    .where(Trial.experiment_id == ctx.id, Trial.index == index)
                    .values(state="pending", started_at=None)
                )
            raise
        except TrialLeftOut as err:
            _end_trial(ctx, index, state="excluded", note=err.message)
            ctx.emit("trial", f"trial {index + 1} left out: {err.message}", trial=index)
            continue
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
        if ctx.config.design.sequential and _settled(ctx):
            break
    _after_trials(ctx)


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
