"""Run an experiment's trials on local hosts and turn what was measured into observations.

Per batch (ServiceLab section 5.1): start every arm on its host's CPU set, wait for health,
warm up with the engine at the warm-up rate (until every arm reports warm), open every
metric collector's window (:mod:`hairline.collect.registry`), replay the trace to all arms
in lockstep for the measurement phase, close the windows and ask each collector for its
values per arm. Arms are stopped on every exit path, including SIGINT.

Each arm runs in its own cgroup; CPU per request is the CPU its cgroup used in the
measurement window over the responses it sent. A batch whose comparison is spoiled
(:mod:`hairline.lab.validity`) is run again, up to ``max_batch_attempts``; then the trial is
left out (:class:`TrialLeftOut`). Each attempt leaves a record (``t<T>b<B>a<K>.batch.json``:
accepted or why not, and what CPU was read from) beside the engine's summary.

Observations follow DESIGN.md's data model. Per-request rows (``latency_us``) carry the
request id and the intended send time ``t``; per-batch rows (the registry's metrics,
counters per request) leave the request empty.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, Protocol

import pyarrow as pa

from hairline import engine
from hairline.arms.cgroup import cgroup_name
from hairline.arms.isolation import dropped_write_rows
from hairline.arms.local import ArmSpec, LocalArm, free_port
from hairline.collect.cpustat import read_cpu_times, steal_ms
from hairline.collect.metric import Measured, Window
from hairline.collect.prometheus import counters_per_request, scrape
from hairline.collect.registry import collectors_for
from hairline.config.isolation import IsolationConfig
from hairline.config.profiling import ProfileConfig
from hairline.errors import HairlineError, TrialLeftOut
from hairline.kit import interrupts
from hairline.kit.jsonout import write_json
from hairline.kit.procs import thread_pinned_to
from hairline.lab.latency import latency_rows
from hairline.lab.sampling import profile_batch
from hairline.lab.schedule import Batch, LabDesign, schedule
from hairline.lab.validity import ArmReading, arm_steal_shares, batch_problems

__all__ = [
    "Arm",
    "ArmDef",
    "ArmFactory",
    "ArmStarted",
    "Attempt",
    "BatchMeasure",
    "Hooks",
    "RunPlan",
    "TrialLeftOut",
    "cgroup_name",
    "local_arm",
    "run_trial",
    "run_trials",
]


@dataclass(frozen=True)
class ArmDef:
    """One arm: how to start it on a port and CPU set, and where it answers. ``spec`` is
    called as ``spec(port, cpus)``, and for an arm with ``isolation`` (its own network
    namespace) as ``spec(port, cpus, host)`` with the namespace's address."""

    name: str
    spec: Callable[..., ArmSpec]
    warm_path: str | None = None
    metrics_path: str | None = None
    isolation: IsolationConfig | None = None


class Arm(Protocol):
    """What a batch needs of one arm: start it, where it answers, its CPU and memory, stop
    it on every path out. :class:`~hairline.arms.local.LocalArm` is one (a cgroup of this
    machine); :class:`~hairline.arms.remote.RemoteArm` is another (the same, on a Ray node).
    """

    @property
    def url(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def pid(self) -> int: ...
    @property
    def cpus(self) -> tuple[int, ...] | None: ...
    @property
    def measured_by(self) -> str: ...
    @property
    def fallback(self) -> str: ...
    @property
    def memory_fallback(self) -> str: ...
    def start(self, *, health_timeout_s: float = 30.0) -> Arm: ...
    def cpu_ns(self) -> int: ...
    def anon_memory_bytes(self) -> int: ...
    def peak_memory_bytes(self) -> int | None: ...
    def running(self) -> bool: ...
    def main_process(self) -> tuple[int, int] | None: ...
    def pids(self) -> list[int]: ...
    def raise_if_host_lost(self) -> None: ...
    def stop(self) -> None: ...
    def __enter__(self) -> Arm: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ArmFactory(Protocol):
    """Makes the (not yet started) arm ``arm`` for host ``host`` of ``plan``; ``log_name``
    names its log in the plan's workdir and ``label`` goes into its cgroup's name."""

    def __call__(
        self, plan: RunPlan, arm: ArmDef, host: int, *, log_name: str, label: str
    ) -> Arm: ...


def local_arm(plan: RunPlan, arm: ArmDef, host: int, *, log_name: str, label: str) -> Arm:
    """The local backend's arm: a cgroup of this machine on the host's CPU set."""
    port = free_port()
    cpus = plan.hosts[host]
    if arm.isolation is None:
        spec: ArmSpec | Callable[[str], ArmSpec] = arm.spec(port, cpus)
    else:

        def spec(address: str) -> ArmSpec:
            return arm.spec(port, cpus, address)  # type: ignore[no-any-return]

    return LocalArm(
        spec,
        port=port,
        cpus=cpus,
        log_path=plan.workdir / f"{log_name}.log",
        cgroup=cgroup_name(plan.cgroup_prefix, label, port),
        isolation=arm.isolation,
        workdir=plan.workdir,
    )


class BatchMeasure(Protocol):
    """A batch's measurement other than the lockstep replay, given its started and warmed-up
    arms (capacity mode: :class:`hairline.lab.capacity.CapacityBatch`); ``tag`` names the
    attempt's files in the plan's workdir."""

    def __call__(
        self,
        plan: RunPlan,
        batch: Batch,
        tag: str,
        arms: Mapping[str, Arm],
        host_of: Mapping[str, int],
        hooks: Hooks,
    ) -> Attempt: ...


@dataclass(frozen=True)
class RunPlan:
    arms: tuple[ArmDef, ...]
    hosts: tuple[tuple[int, ...], ...]
    trace: Path
    rate_per_s: float
    duration_s: float
    warmup_rate_per_s: float
    warmup_duration_s: float
    trials: int
    design: LabDesign
    workdir: Path
    health_timeout_s: float = 30.0
    warm_timeout_s: float = 60.0
    counters: Sequence[str] = field(default=())
    engine_cpus: tuple[int, ...] | None = None
    # Names every arm cgroup of this plan (the lab: store and experiment), so a processor
    # taking over finds what a dead one left.
    cgroup_prefix: str = "hl-"
    max_batch_attempts: int = 3
    max_error_rate: float = 0.01
    # How arms are made: on this machine's CPU sets (default), or on Ray nodes.
    arm_factory: ArmFactory = local_arm
    # The engine's CPUs are also a host's (a Ray node on this machine): no pacing spin.
    engine_shares_a_host: bool = False
    arrival: Literal["constant", "poisson"] = "constant"
    # None: the lockstep replay at rate_per_s; else what each batch measures instead.
    measure: BatchMeasure | None = None
    # [service.profile]: sample each arm's stacks during each batch (lab/sampling.py).
    profile: ProfileConfig | None = None
    # The optional collectors the service file turns on (collect/registry.py's OPTIONAL).
    collect: tuple[str, ...] = ()

    def new_arm(self, arm: ArmDef, host: int, *, log_name: str, label: str) -> Arm:
        return self.arm_factory(self, arm, host, log_name=log_name, label=label)

    @property
    def harness_cpus(self) -> tuple[int, ...]:
        """Where the engine and this process's measuring threads run: the spare CPUs, or,
        when every CPU is a host, host 0's.

        Measured on a 2-CPU VM: the arm sharing a CPU with the engine uses about 15% less
        CPU per request than the other (its CPU never idles between requests). Left to the
        scheduler, the engine lands on either CPU from batch to batch, which turned that
        into ±20% noise between batches; pinned to host 0 it is a fixed host effect that the
        fully balanced design's swap cancels within each trial.
        """
        return self.engine_cpus or self.hosts[0]

    @property
    def engine_spin_us(self) -> int:
        """0 when the engine shares host 0: its pacing spin would take that arm's CPU (on
        a 2-CPU VM at 800 requests/s the sharing arm fell to 75 of 800 requests/s)."""
        return 150 if self.engine_cpus and not self.engine_shares_a_host else 0

    @property
    def engine_coalesce_us(self) -> int:
        """How early the engine may send to share a wake-up (``--coalesce-us``): 150 µs when
        it sleeps on its timer beside an arm and the arrivals are evenly spaced, else 0.

        Measured on a 2-vCPU VM (bench/RESULTS.md, issue #30): each wake-up of the engine
        costs tens of µs of host 0's CPU; at 2 x 8,000/s coalescing within 150 µs (each
        wake-up sends two requests) cut the engine's CPU per request to 0.65x, at 2 x
        5,000/s to 0.76x, with the late share unchanged. Both arms get each request back to
        back as before, so what the arms are compared under is the same for both. Poisson
        arrivals are left alone: coalescing bunches their gaps further from exponential.
        """
        return 150 if self.engine_spin_us == 0 and self.arrival == "constant" else 0

    def batches(self) -> list[Batch]:
        return schedule(tuple(a.name for a in self.arms), trials=self.trials, design=self.design)


Progress = Callable[[Batch, str], None]
# Called when an arm is up: (batch, arm name, host index, process group id, port). The lab
# records it, so that a processor taking over can stop what a dead one left running.
ArmStarted = Callable[[Batch, str, int, int, int], None]


@dataclass(frozen=True)
class Hooks:
    """What the lab is told, and asked, while a trial runs. ``check`` is called before each
    batch and before measuring; it raises to abandon the trial (the lab's lease check)."""

    progress: Progress | None = None
    arm_started: ArmStarted | None = None
    # A batch attempt's arms are all stopped (the lab records when each run ended).
    arms_stopped: Callable[[Batch], None] | None = None
    check: Callable[[], None] | None = None


def run_trials(plan: RunPlan, *, progress: Progress | None = None) -> pa.Table:
    """Run every batch of ``plan`` and return the observations table."""
    batches = plan.batches()
    tables = [
        run_trial(plan, [b for b in batches if b.trial == trial], Hooks(progress=progress))
        for trial in sorted({b.trial for b in batches})
    ]
    return pa.concat_tables(tables, promote_options="permissive")


def run_trial(plan: RunPlan, batches: Sequence[Batch], hooks: Hooks | None = None) -> pa.Table:
    """Run the batches of one trial and return their observations. Arms are stopped on
    every path out."""
    hooks = hooks or Hooks()
    columns: dict[str, list[object]] = {
        name: [] for name in ("trial", "batch", "arm", "host", "request", "endpoint", "metric")
    }
    values: list[float] = []
    times: list[float] = []

    def add(
        batch: Batch, arm: str, host: int, metric: str, value: float, *,
        request: int | None = None, endpoint: str | None = None, t: float = 0.0,
    ) -> None:  # fmt: skip
        columns["trial"].append(batch.trial)
        columns["batch"].append(batch.batch)
        columns["arm"].append(arm)
        columns["host"].append(host)
        columns["request"].append(request)
        columns["endpoint"].append(endpoint)
        columns["metric"].append(metric)
        values.append(value)
        times.append(t)

    with thread_pinned_to(plan.harness_cpus):
        per_request = _run_batches(plan, batches, add, hooks)
    table = pa.table({**columns, "value": values, "t": times})
    return pa.concat_tables([table, *per_request], promote_options="permissive")


@dataclass
class Attempt:
    """One attempt at a batch: its observation rows (arm, host, metric, value), per-request
    table, problems (none: accepted) and the record written beside it."""

    rows: list[tuple[str, int, str, float]]
    per_request: pa.Table
    problems: list[str]
    record: dict[str, object]


def _run_batches(
    plan: RunPlan, batches: Sequence[Batch], add: Callable[..., None], hooks: Hooks
) -> list[pa.Table]:
    per_request: list[pa.Table] = []
    plan.workdir.mkdir(parents=True, exist_ok=True)
    for batch in batches:
        problems: list[str] = []
        for attempt in range(1, plan.max_batch_attempts + 1):
            interrupts.raise_if_interrupted()
            if hooks.check:
                hooks.check()
            try:
                result = _run_batch(plan, batch, attempt, hooks)
            finally:
                if hooks.arms_stopped:
                    hooks.arms_stopped(batch)
            problems = result.problems
            record = {"attempt": attempt, **result.record, "accepted": not problems,
                      "problems": problems}  # fmt: skip
            write_json(plan.workdir / f"{_tag(batch, attempt)}.batch.json", record)
            if not problems:
                break
            if hooks.progress:
                hooks.progress(batch, f"spoiled (attempt {attempt}): {'; '.join(problems)}")
        else:
            raise TrialLeftOut(
                f"batch {batch.batch + 1} was spoiled in all {plan.max_batch_attempts} "
                f"attempts (last: {'; '.join(problems)})"
            )
        for arm, host, metric, value in result.rows:
            add(batch, arm, host, metric, value)
        per_request.append(result.per_request)
    return per_request


def _isolation_report(arm: Arm) -> dict[str, object]:
    """An isolated local arm's refused connections and relay counts ({} otherwise)."""
    return arm.isolation_report() if isinstance(arm, LocalArm) else {}


def _tag(batch: Batch, attempt: int) -> str:
    return f"t{batch.trial}b{batch.batch}a{attempt}"


def _run_batch(plan: RunPlan, batch: Batch, attempt: int, hooks: Hooks) -> Attempt:
    by_name = {a.name: a for a in plan.arms}
    tag = _tag(batch, attempt)
    with contextlib.ExitStack() as stack:
        running: dict[str, Arm] = {}
        for host, arm_name in enumerate(batch.arm_on_host):
            arm = stack.enter_context(
                plan.new_arm(by_name[arm_name], host, log_name=f"{tag}-{arm_name}", label=arm_name)
            )
            if hooks.progress:
                hooks.progress(batch, f"starting {arm_name} on host {host}")
            arm.start(health_timeout_s=plan.health_timeout_s)
            running[arm_name] = arm
            if hooks.arm_started:
                hooks.arm_started(batch, arm_name, host, arm.pid, arm.port)
        host_of = {name: host for host, name in enumerate(batch.arm_on_host)}
        names = list(running)

        def hosts_alive() -> None:
            for arm in running.values():
                arm.raise_if_host_lost()

        try:
            if hooks.progress:
                hooks.progress(batch, "warming up")
            engine.warm_up(
                targets={n: running[n].url for n in names},
                trace=plan.trace,
                rate_per_s=plan.warmup_rate_per_s,
                duration_s=plan.warmup_duration_s,
                warm_urls={
                    n: running[n].url + path
                    for n in names
                    if (path := by_name[n].warm_path) is not None
                },
                warm_timeout_s=plan.warm_timeout_s,
                check=hosts_alive,
                cpus=plan.harness_cpus,
                spin_us=plan.engine_spin_us,
                coalesce_us=plan.engine_coalesce_us,
            )
            interrupts.raise_if_interrupted()
            if hooks.check:
                hooks.check()
            if plan.measure is not None:
                return plan.measure(plan, batch, tag, running, host_of, hooks)

            metrics_urls = {n: running[n].url + p for n in names if (p := by_name[n].metrics_path)}
            counters_before = {n: scrape(u) for n, u in metrics_urls.items()}
            # After the warm-up: a service that daemonises has left its start process by now.
            main_before = {n: running[n].main_process() for n in names}
            cpu_before = {n: running[n].cpu_ns() for n in names}
            if hooks.progress:
                hooks.progress(batch, "measuring")
            steal_before = read_cpu_times()
            started = time.monotonic()
            windows: list[Window] = [c.window(running) for c in collectors_for(plan.collect)]
            # The collectors' windows inside the profile's: they close as soon as the load
            # ends, not after perf's stacks are read back (seconds, with DWARF unwinding).
            with (
                profile_batch(plan.profile, running, workdir=plan.workdir, tag=tag) as profiles,
                contextlib.ExitStack() as collecting,
            ):
                for window in windows:
                    collecting.enter_context(window)
                measured = engine.measure(
                    targets={n: running[n].url for n in names},
                    trace=plan.trace,
                    rate_per_s=plan.rate_per_s,
                    duration_s=plan.duration_s,
                    requests_path=plan.workdir / f"{tag}.requests",
                    summary_path=plan.workdir / f"{tag}.json",
                    cpus=plan.harness_cpus,
                    spin_us=plan.engine_spin_us,
                    coalesce_us=plan.engine_coalesce_us,
                    arrival=plan.arrival,
                    check=hosts_alive,
                )
        except HairlineError as err:
            # An arm that died under load (the engine or a scrape then fails) spoils the
            # batch; a failure with every arm up is a problem of its own and ends the
            # experiment.
            dead = [n for n in names if not running[n].running()]
            if not dead:
                raise
            return Attempt(
                rows=[],
                per_request=pa.table({}),
                problems=[f"arm {n} stopped during the batch ({err.message})" for n in dead],
                record={"trial": batch.trial, "batch": batch.batch, "attempt": attempt,
                        "summary": f"{tag}.json"},
            )  # fmt: skip
        cpu_after = {n: running[n].cpu_ns() for n in names}
        wall_s = time.monotonic() - started
        # Every CPU the batch used: the arms' hosts' and the engine's.
        used_cpus = {c for h in host_of.values() for c in plan.hosts[h]} | set(plan.harness_cpus)
        stolen_ms = steal_ms(steal_before, read_cpu_times(), used_cpus)
        alive = {n: running[n].running() for n in names}
        main_after = {n: running[n].main_process() for n in names}
        # A dead arm has no counters to scrape; its batch is spoiled anyway.
        counters_after = {n: scrape(u) for n, u in metrics_urls.items() if alive[n]}
        measured_by = {n: running[n].measured_by for n in names}
        fallback = {n: running[n].fallback for n in names if running[n].fallback}
        memory_fallback = {n: why for n in names if (why := running[n].memory_fallback)}
    # Read once the arms stopped, so the relays' last counts are in.
    isolation = {n: report for n in names if (report := _isolation_report(running[n]))}

    readings = {
        n: ArmReading(
            requests=measured.targets[n].requests,
            errors=measured.targets[n].errors,
            cpu_ns=cpu_after[n] - cpu_before[n],
            cpus=len(plan.hosts[host_of[n]]),
            running=alive[n],
            main_before=main_before[n],
            main_after=main_after[n],
        )
        for n in names
    }
    problems = batch_problems(
        readings,
        failed_gates=[(g.name, g.detail) for g in measured.gates if not g.passed],
        wall_s=wall_s,
        max_error_rate=plan.max_error_rate,
        steal_share=arm_steal_shares(stolen_ms, {n: plan.hosts[host_of[n]] for n in names}, wall_s),
    )
    rows: list[tuple[str, int, str, float]] = []
    for n in names:
        host, target = host_of[n], measured.targets[n]
        window_of_arm = Measured(
            requests=target.requests,
            errors=target.errors,
            latency_p50_us=target.latency_us.p50,
            latency_p99_us=target.latency_us.p99,
            cpu_ns=readings[n].cpu_ns,
            duration_s=plan.duration_s,
        )
        # Every collector's metrics, in the registry's order.
        for window in windows:
            for metric, value in window.values(n, window_of_arm).items():
                rows.append((n, host, metric, value))
        if n in counters_before and n in counters_after:
            per_request_counts = counters_per_request(
                counters_before[n], counters_after[n], plan.counters,
                requests=target.requests,
                endpoint_requests={e: t.requests for e, t in target.endpoints.items()},
            )  # fmt: skip
            for metric, value in sorted(per_request_counts.items()):
                rows.append((n, host, f"{metric}_per_request", value))
    cpu_per_request = {n: readings[n].cpu_ns / max(measured.targets[n].requests, 1) for n in names}
    rows += [(n, host_of[n], m, v) for n, m, v in profiles.rows(cpu_per_request)]
    # Writes the egress proxies answered, per downstream endpoint: a metric with a threshold
    # (docs/safety.md), beside the report's side-effect notes.
    rows += [(n, host_of[n], m, v) for n, m, v in dropped_write_rows(isolation)]
    record: dict[str, object] = {
        "trial": batch.trial,
        "batch": batch.batch,
        "attempt": attempt,
        "summary": f"{tag}.json",
        "measured_by": measured_by,
        "cgroup_fallback": fallback,
        "memory_fallback": memory_fallback,
        "wall_s": wall_s,
        "steal_ms": {str(c): ms for c, ms in stolen_ms.items()},
        "engine_cpus": sorted(plan.harness_cpus),
        "engine_scheduling": measured.raw.get("scheduling"),
    }
    if profiles.sampled:
        record["profile"] = profiles.record()
    if isolation:
        # Side effects the arms tried: refused connections, writes the egress proxy dropped.
        record["isolation"] = isolation
    return Attempt(
        rows=rows,
        per_request=latency_rows(measured, trial=batch.trial, batch=batch.batch, host_of=host_of),
        problems=problems,
        record=record,
    )
