"""The running phase: the replay rate (calibrated once), then the trials.

Before any trial, whatever a dead processor left of this experiment is stopped: its arm
cgroups and network namespaces by name, its process groups by the runs it recorded. Then
the run plan (arms, hosts, load) is made for each host pair of the allocation (one,
unless ``[design] host_pairs`` asked for more on the ray backend: lab/hostpairs.py), the
rate calibrated once (on the first pair) or read back, and the pending trials run
(:mod:`hairline.lab.trialrun`).

With the ``ray`` backend the batches and the calibration run in a driver process per
pair (:mod:`hairline.lab.remote`) with the arms on the allocated test machines; a host
lost mid-trial or a head gone puts the trial back to pending and raises
:class:`~hairline.arms.remote.HostLost` (its position in the whole allocation) or
:class:`~hairline.lab.remote.HeadUnreachable` for the processor to act on (replace the
host, or wait for a head).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from pathlib import Path

from sqlalchemy import select, update

from hairline import engine
from hairline.arms.cgroup import sweep
from hairline.arms.local import ArmSpec
from hairline.arms.netns import sweep_namespaces
from hairline.arms.sandbox import ArmSandbox
from hairline.config import start_command
from hairline.config.isolation import IsolationConfig
from hairline.errors import HairlineError
from hairline.hosts.inventory import Allocation, duet_arms, ensure_local_hosts
from hairline.kit.procs import group_alive, kill_group
from hairline.lab.calibrate import calibrate
from hairline.lab.capacity import capacity_settings
from hairline.lab.capacity_pid import capacity_batch
from hairline.lab.context import Context
from hairline.lab.hostpairs import Lane, split_pairs
from hairline.lab.queue import transition
from hairline.lab.remote import RemoteDriver, RemoteRun, engine_shares_a_host
from hairline.lab.runner import ArmDef, RunPlan
from hairline.lab.trialrun import run_pending_trials
from hairline.store.db import Store, pairs
from hairline.store.models import Arm, Experiment, Run, Trial

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
        duet = duet_arms(ctx.config, len(ctx.arm_names))
        layout = ensure_local_hosts(
            ctx.store, cpus_per_host=ctx.options.cpus_per_host, duet_arms=duet
        )
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
        collect=tuple(service.collect),
        engine_cpus=engine_cpus,
        engine_shares_a_host=shares,
        cgroup_prefix=cgroup_prefix(ctx.store, ctx.id),
        max_batch_attempts=config.design.max_batch_attempts,
        max_error_rate=service.max_error_rate,
        measure=measure,
        # A Ray arm is sampled on its node (arms/node_profile.py).
        profile=service.profile,
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
                aa_steps=load_config.calibration_steps,
                progress=lambda line: ctx.emit("phase", line),
            )
        else:
            result = remote.calibrate(
                plan, target_utilization=target, decide_on=decide_on,
                start_rate_per_s=start_rate_per_s, aa_steps=load_config.calibration_steps,
                progress=lambda line: ctx.emit("phase", line), check=ctx.keeper.check,
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
    """Run the experiment's pending trials on ``allocation``: one host pair, or on the ray
    backend several side by side (lab/hostpairs.py), one trial per pair at a time. With
    the ray backend, a host lost or the head gone ends this early (the trial back to
    pending) by raising :class:`HostLost` or :class:`HeadUnreachable`."""
    _stop_leftovers(ctx)
    lanes = split_pairs(allocation, len(ctx.arm_names))
    if len(lanes) == 1:
        remote_run = _remote(ctx, allocation)
        plan = _plan(ctx, allocation)
        if remote_run is None:
            run_pending_trials(ctx, [(lanes[0], _rate(ctx, plan, None), None)])
            return
        with RemoteDriver(remote_run, plan.workdir) as remote:
            run_pending_trials(ctx, [(lanes[0], _rate(ctx, plan, remote), remote)])
        return
    with contextlib.ExitStack() as stack:
        runs: list[tuple[Lane, RunPlan, RemoteDriver | None]] = []
        for lane in lanes:
            remote_run = _remote(ctx, lane.allocation)
            assert remote_run is not None  # several pairs: the ray backend only
            plan = _plan(ctx, lane.allocation)
            # Each pair's actors sweep the cgroups of their own prefix only: a pair's
            # start must not stop the arms of the pair beside it (on one machine too).
            plan = dataclasses.replace(plan, cgroup_prefix=f"{plan.cgroup_prefix}p{lane.pair}-")
            driver = RemoteDriver(remote_run, plan.workdir, name=f"driver-pair{lane.pair}")
            runs.append((lane, plan, stack.enter_context(driver)))
        # One calibration, on the first pair; every pair replays at its rate.
        first = _rate(ctx, runs[0][1], runs[0][2])
        rated = [
            (lane, dataclasses.replace(plan, rate_per_s=first.rate_per_s,
                                       warmup_rate_per_s=first.warmup_rate_per_s), remote)
            for lane, plan, remote in runs
        ]  # fmt: skip
        run_pending_trials(ctx, rated)
