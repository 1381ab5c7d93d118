"""Calibrated load: the replay rate at which the baseline keeps its CPUs busy by a target.

CPU per request at low load is not what production pays: an idle server's cost per
request is dominated by wake-ups and idle exits, which depend on timing (nginx serving small
files: 49 to 94 µs per request from trial to trial at 5% busy, 44 to 46 µs at 20%). So
when the experiment file names no ``[load] rate_per_s``, the lab finds one before the
trials: a short ramp on the baseline arm (a copy on every host, as in an A/A batch, so the
engine does its trial's work), each step a few seconds of the trace at one rate, measuring
the copies' cgroup CPU over their CPUs' time (utilisation). The next rate
scales the last by target / measured utilisation (cost per request falls as load rises, so
this converges from below in a few steps); a step the engine cannot drive (rate or dropped
gate failed), that the arm answers with errors, or that leaves a host's CPUs busier than
``MAX_HOST_BUSY`` in all (the arm, and the engine where it shares the host: on a 2-vCPU
machine the engine replays on host 0's CPU, and an arm measured 60% busy on its own
beside an engine that took the rest of the CPU dropped 30,154 requests at 16,500/s of
nginx) caps the search below it. The chosen rate
is the passing step closest to the target, scaled to it, and never above the highest
rate that passed below a failed one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from hairline import engine
from hairline.collect.cpustat import busy_share, read_cpu_times
from hairline.errors import CalibrationFailed, HairlineError
from hairline.lab.runner import Arm, ArmDef, RunPlan

__all__ = ["Calibration", "CalibrationStep", "calibrate", "next_rate"]

# Within this fraction of the target utilisation a step is close enough to stop.
_CLOSE = 0.05
# How far one step may move the rate: the first steps are far from the target.
_MAX_GROWTH, _MAX_SHRINK = 4.0, 0.5
# The answer may go this far past the highest rate seen to pass, no further.
_MAX_EXTRAPOLATION = 1.05
# A step whose arm served less than this share of the asked rate did not get the rate.
_MIN_SERVED = 0.95
# The busiest host's CPUs, everything on them counted, may be this busy at a step: past it
# an arm that shares its CPU with the engine queues requests the other arm serves at once,
# and their costs are no longer alike (the demo's host 0 runs at about 75%).
MAX_HOST_BUSY = 0.9


@dataclass(frozen=True)
class CalibrationStep:
    rate_per_s: float
    utilization: float
    cpu_ns_per_request: float
    passed: bool
    note: str = ""


@dataclass(frozen=True)
class Calibration:
    rate_per_s: float
    target_utilization: float
    steps: tuple[CalibrationStep, ...]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def next_rate(steps: Sequence[CalibrationStep], target: float) -> float | None:
    """The rate to try next, or None when the last passing step is close enough. Pure."""
    passing = [s for s in steps if s.passed and s.utilization > 0]
    failing = [s.rate_per_s for s in steps if not s.passed]
    ceiling = min(failing) if failing else float("inf")
    if not passing:
        # Even the first rate spoiled the load: halve until something passes.
        return ceiling * _MAX_SHRINK
    last = passing[-1] if steps[-1].passed else max(passing, key=lambda s: s.rate_per_s)
    if steps[-1].passed and abs(last.utilization / target - 1) <= _CLOSE:
        return None
    factor = min(max(target / last.utilization, _MAX_SHRINK), _MAX_GROWTH)
    rate = last.rate_per_s * factor
    if rate >= ceiling:
        # Between the best passing rate and the lowest failing one.
        rate = (last.rate_per_s * ceiling) ** 0.5
        if ceiling / last.rate_per_s < 1.05:
            return None
    return rate


def chosen_rate(steps: Sequence[CalibrationStep], target: float) -> float | None:
    """The rate to run the trials at: the passing step closest to the target, scaled to it,
    and below any failing step."""
    passing = [s for s in steps if s.passed and s.utilization > 0]
    if not passing:
        return None
    best = min(passing, key=lambda s: abs(s.utilization - target))
    highest = max(s.rate_per_s for s in passing)
    rate = min(
        best.rate_per_s * max(target / best.utilization, _MAX_SHRINK),
        highest * _MAX_EXTRAPOLATION,
    )
    failing = [s.rate_per_s for s in steps if not s.passed]
    if failing:
        # Where the load broke is only known to lie between the best passing rate and the
        # lowest failing one: stay at a rate that was seen to pass.
        below = [s.rate_per_s for s in passing if s.rate_per_s < min(failing)]
        rate = min(rate, max(below, default=best.rate_per_s))
    return rate


def calibrate(
    plan: RunPlan,
    arm: ArmDef,
    *,
    target_utilization: float,
    start_rate_per_s: float = 100.0,
    step_s: float = 2.0,
    max_steps: int = 7,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Ramp the baseline ``arm`` to ``target_utilization``; see the module's doc.

    The baseline runs on every host at once, as in an A/A batch, and the engine replays to
    all of them in lockstep: the engine then does the work it will do in the trials (on a
    small machine it shares a host's CPU, and at a high rate it is the limit), and each
    copy of the arm shares its machine as the arms will. Utilisation is their mean."""
    steps: list[CalibrationStep] = []
    plan.workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        copies: dict[str, Arm] = {}
        for host in range(len(plan.hosts)):
            name = f"{arm.name}.{host}"
            copies[name] = stack.enter_context(
                plan.new_arm(
                    arm, host, log_name=f"calibration-{name}", label=f"calibrate-{arm.name}-{host}"
                )
            )
            copies[name].start(health_timeout_s=plan.health_timeout_s)
        engine.warm_up(
            targets={n: a.url for n, a in copies.items()},
            trace=plan.trace,
            rate_per_s=start_rate_per_s,
            duration_s=plan.warmup_duration_s,
            warm_urls={n: a.url + arm.warm_path for n, a in copies.items()}
            if arm.warm_path
            else {},
            warm_timeout_s=plan.warm_timeout_s,
            cpus=plan.harness_cpus,
            spin_us=plan.engine_spin_us,
        )
        rate: float | None = start_rate_per_s
        while rate is not None and len(steps) < max_steps:
            steps.append(_step(plan, copies, rate, step_s))
            s = steps[-1]
            if progress:
                progress(
                    f"calibrating: {s.rate_per_s:.0f}/s -> {s.utilization:.0%} busy"
                    + ("" if s.passed else f" ({s.note})")
                )
            rate = next_rate(steps, target_utilization)
    final = chosen_rate(steps, target_utilization)
    if final is None:
        raise CalibrationFailed(
            f"calibration: no rate from {start_rate_per_s:g}/s down kept {arm.name}'s load "
            f"valid ({steps[-1].note if steps else 'no step ran'})",
            hint="set [load] rate_per_s in the experiment file, or look at the arm's log",
        )
    return Calibration(
        rate_per_s=round(final, 1),
        target_utilization=target_utilization,
        steps=tuple(steps),
    )


def _step(plan: RunPlan, copies: Mapping[str, Arm], rate: float, step_s: float) -> CalibrationStep:
    before = {n: a.cpu_ns() for n, a in copies.items()}
    cpu_before = read_cpu_times()
    try:
        result = engine.measure(
            targets={n: a.url for n, a in copies.items()},
            trace=plan.trace,
            rate_per_s=rate,
            duration_s=step_s,
            cpus=plan.harness_cpus,
            spin_us=plan.engine_spin_us,
        )
    except HairlineError as err:
        return CalibrationStep(rate, 0.0, 0.0, passed=False, note=err.message)
    used = {n: a.cpu_ns() - before[n] for n, a in copies.items()}
    cpu_after = read_cpu_times()
    # Over the time the arms were loaded, not the engine's start and stop around them.
    utilization = sum(
        used[n] / (len(a.cpus or (0,)) * step_s * 1e9) for n, a in copies.items()
    ) / len(copies)
    notes = [f"{g.name} gate failed" for g in result.gates
             if not g.passed and g.name in ("rate", "dropped")]  # fmt: skip
    served = min(result.targets[n].requests for n in copies)
    errors = max(result.targets[n].errors / max(result.targets[n].requests, 1) for n in copies)
    if errors > plan.max_error_rate:
        notes.append(f"{errors:.1%} errors")
    for host, cpus in enumerate(plan.hosts):
        busy = busy_share(cpu_before, cpu_after, cpus)
        if busy is not None and busy > MAX_HOST_BUSY:
            shared = " with the engine" if set(cpus) & set(plan.harness_cpus) else ""
            notes.append(f"host {host}'s CPUs{shared} {busy:.0%} busy (limit {MAX_HOST_BUSY:.0%})")
    # Sends the engine could not make in time arrive late, in bursts: the arms then served
    # fewer requests than the step asked for, and their utilisation is not the rate's.
    if served < _MIN_SERVED * rate * step_s:
        notes.append(f"served {served / step_s:.0f}/s of {rate:.0f}/s")
    if not served:
        return CalibrationStep(rate, utilization, 0.0, passed=False, note="no answers")
    per_request = sum(used.values()) / len(copies) / served
    return CalibrationStep(rate, utilization, per_request, not notes, "; ".join(notes))
