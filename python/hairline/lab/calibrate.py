"""Calibrated load: the replay rate at which the deciding metric is most precise per minute,
or, when the file names a ``target_utilization``, at which the baseline is that busy.

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

With no ``target_utilization`` either (the default) the ramp aims high
(``SEARCH_UTILIZATION``) to find the highest rate the lab serves with every gate holding,
then runs short paired A/A steps at a few candidate rates from about 30% busy to just below
that rate, and keeps the one at which the deciding metric varied least (lab/rate_choice.py
scores and explains the choice). A candidate at which a step fails a gate or leaves a host
past ``MAX_HOST_BUSY`` is left out, so no arm is driven past what it serves beside the
engine.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hairline import engine
from hairline.collect.cpustat import busy_share, read_cpu_times
from hairline.collect.summary import CPU_PER_REQUEST, LATENCY_P50, LATENCY_P99
from hairline.errors import CalibrationFailed, HairlineError
from hairline.lab.rate_choice import (
    AA_STEP_S,
    AA_STEPS,
    CandidateRate,
    calibration_metric,
    choose_rate,
    paired_noise,
)
from hairline.lab.runner import Arm, ArmDef, RunPlan

__all__ = [
    "Calibration",
    "CalibrationStep",
    "calibrate",
    "calibration_failure",
    "calibration_from_dict",
    "candidate_rates",
    "chosen_rate",
    "next_rate",
    "servable_rate",
]

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
# A host of the arm's alone this much busier than the arm made it runs something else.
_NEIGHBOUR_SHARE = 0.3
NEIGHBOUR = "not the arm's: another process uses them"
# Calibrating for sensitivity, the ramp aims this busy: high enough that a gate or a host's
# limit, not the target, ends it on a small machine.
SEARCH_UTILIZATION = 0.85
# The candidates: from about this busy up to this share of the highest servable rate (room
# for a candidate build that costs more than the baseline).
LOW_UTILIZATION, HEADROOM = 0.3, 0.9


@dataclass(frozen=True)
class CalibrationStep:
    rate_per_s: float
    utilization: float
    cpu_ns_per_request: float
    passed: bool
    note: str = ""


@dataclass(frozen=True)
class Calibration:
    """The rate found and how: ``target_utilization`` None when it was chosen for
    sensitivity, ``candidates`` its rates' A/A steps scored on ``metric``, ``reason`` the
    choice in words; ``seconds`` the calibration's wall time."""

    rate_per_s: float
    target_utilization: float | None
    steps: tuple[CalibrationStep, ...]
    metric: str = ""
    candidates: tuple[CandidateRate, ...] = ()
    aa_step_s: float = 0.0
    reason: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def calibration_from_dict(data: Mapping[str, Any]) -> Calibration:
    """:meth:`Calibration.as_dict` read back; a calibration stored before the sensitivity
    fields existed reads with them empty."""
    target = data.get("target_utilization")
    return Calibration(
        rate_per_s=float(data["rate_per_s"]),
        target_utilization=None if target is None else float(target),
        steps=tuple(CalibrationStep(**step) for step in data["steps"]),
        metric=str(data.get("metric", "")),
        candidates=tuple(
            CandidateRate(**{**c, "host_differences": tuple(c.get("host_differences", ()))})
            for c in data.get("candidates", ())
        ),
        aa_step_s=float(data.get("aa_step_s", 0.0)),
        reason=str(data.get("reason", "")),
        seconds=float(data.get("seconds", 0.0)),
    )


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


def servable_rate(steps: Sequence[CalibrationStep]) -> float | None:
    """The highest rate that passed below every failing one: the most this lab serves with
    its gates holding, as far as the ramp saw. Pure."""
    failing = min((s.rate_per_s for s in steps if not s.passed), default=math.inf)
    passing = [s.rate_per_s for s in steps if s.passed and s.rate_per_s < failing]
    return max(passing, default=None)


def candidate_rates(steps: Sequence[CalibrationStep], levels: int = 3) -> tuple[float, ...]:
    """``levels`` rates, evenly spaced in ratio, from about ``LOW_UTILIZATION`` busy to
    ``HEADROOM`` of the servable rate (the low end at most half the high one, so the
    candidates differ even where the engine, not the arm, is the limit); () when nothing
    passed. Pure."""
    top = servable_rate(steps)
    if top is None:
        return ()
    high = top * HEADROOM
    passing = [s for s in steps if s.passed and s.utilization > 0 and s.rate_per_s <= top]
    near = min(passing, key=lambda s: abs(s.utilization - LOW_UTILIZATION), default=None)
    low = near.rate_per_s * LOW_UTILIZATION / near.utilization if near else high / 2
    low = min(low, high / 2)
    if levels == 1:
        return (round(high),)
    ratio = (high / low) ** (1 / (levels - 1))
    return tuple(float(round(low * ratio**i)) for i in range(levels))


def calibrate(
    plan: RunPlan,
    arm: ArmDef,
    *,
    target_utilization: float | None,
    decide_on: Sequence[str] = (CPU_PER_REQUEST.name,),
    start_rate_per_s: float = 100.0,
    step_s: float = 2.0,
    max_steps: int = 7,
    aa_step_s: float = AA_STEP_S,
    aa_steps: int = AA_STEPS,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Ramp the baseline ``arm`` to ``target_utilization``, or with None choose the rate at
    which the first measurable metric of ``decide_on`` is most precise per minute
    (``aa_steps`` steps of ``aa_step_s`` at each candidate); see the module's doc.

    The baseline runs on every host at once, as in an A/A batch, and the engine replays to
    all of them in lockstep: the engine then does the work it will do in the trials (on a
    small machine it shares a host's CPU, and at a high rate it is the limit), and each
    copy of the arm shares its machine as the arms will. Utilisation is their mean."""
    started = time.monotonic()
    metric, metric_note = calibration_metric(decide_on)
    target = target_utilization if target_utilization is not None else SEARCH_UTILIZATION
    steps: list[CalibrationStep] = []
    candidates: list[CandidateRate] = []
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
            coalesce_us=plan.engine_coalesce_us,
        )
        rate: float | None = start_rate_per_s
        while rate is not None and len(steps) < max_steps:
            steps.append(_step(plan, copies, rate, step_s, metric)[0])
            s = steps[-1]
            if progress:
                progress(
                    f"calibrating: {s.rate_per_s:.0f}/s -> {s.utilization:.0%} busy"
                    + ("" if s.passed else f" ({s.note})")
                )
            rate = next_rate(steps, target)
        if target_utilization is None:
            for candidate in candidate_rates(steps):
                candidates.append(_candidate(plan, copies, candidate, aa_step_s, aa_steps, metric))
                c = candidates[-1]
                if progress:
                    progress(
                        f"calibrating: {c.rate_per_s:.0f}/s, {c.steps} A/A steps -> "
                        + (f"{metric} sd {c.sd_per_trial:.2%}" if c.sd_per_trial is not None
                           else c.note)
                    )  # fmt: skip
    if target_utilization is not None:
        final = chosen_rate(steps, target_utilization)
        reason = ""
    else:
        choice = choose_rate(candidates, metric=metric, step_s=aa_step_s)
        final = choice.rate_per_s if choice else None
        reason = (choice.reason if choice else "") + (f"; {metric_note}" if metric_note else "")
    if final is None:
        message, hint = calibration_failure(arm.name, start_rate_per_s, steps, candidates)
        raise CalibrationFailed(message, hint=hint)
    return Calibration(
        rate_per_s=round(final, 1),
        target_utilization=target_utilization,
        steps=tuple(steps),
        metric=metric if target_utilization is None else "",
        candidates=tuple(candidates),
        aa_step_s=aa_step_s if target_utilization is None else 0.0,
        reason=reason,
        seconds=round(time.monotonic() - started, 1),
    )


def calibration_failure(
    arm: str,
    start_rate_per_s: float,
    steps: Sequence[CalibrationStep],
    candidates: Sequence[CandidateRate],
) -> tuple[str, str]:
    """Which calibration failed, what it measured on the way, and what to change: the
    message and hint of its :class:`CalibrationFailed`. Pure."""
    measured = [(s.rate_per_s, s.note) for s in steps]
    measured += [(c.rate_per_s, c.note) for c in candidates]
    tried = "; ".join(
        f"{rate:,.0f}/s: {note}" if note else f"{rate:,.0f}/s passed" for rate, note in measured
    )
    if not any(s.passed for s in steps):
        what = f"no rate from {start_rate_per_s:g}/s down kept {arm}'s load valid"
    else:
        what = f"no candidate rate kept {arm}'s load valid through its A/A steps"
    hint = (
        "set [load] rate_per_s (or a lower target_utilization) in the experiment file, or "
        "look at the arm's log in the experiment's folder"
    )
    if any(NEIGHBOUR in note for _, note in measured):
        what += ": another process kept the lab's CPUs busy"
        hint = (
            "stop what else runs on this machine's lab CPUs, or give the lab CPUs nothing "
            "else runs on (a lower rate would not help)"
        )
    return f"calibration: {what} ({tried or 'no step ran'})", hint


def _candidate(
    plan: RunPlan,
    copies: Mapping[str, Arm],
    rate: float,
    step_s: float,
    count: int,
    metric: str,
) -> CandidateRate:
    """``count`` steps at ``rate``, stopping at the first that fails; the copies' host
    differences in ``metric`` give its noise (lab/rate_choice.py)."""
    differences: list[float] = []
    busy: list[float] = []
    for _ in range(count):
        step, values = _step(plan, copies, rate, step_s, metric)
        if not step.passed:
            return CandidateRate(
                rate, step.utilization, len(busy) + 1, None, False, step.note, tuple(differences)
            )
        busy.append(step.utilization)
        first, second = values[0], values[1] if len(values) > 1 else values[0]
        differences.append(math.log(first / second) if first > 0 and second > 0 else math.nan)
    noise = paired_noise(differences)
    note = "" if noise is not None else f"{metric} not measured in every step"
    return CandidateRate(
        rate, sum(busy) / len(busy), count, noise, noise is not None, note, tuple(differences)
    )


def _step(
    plan: RunPlan, copies: Mapping[str, Arm], rate: float, step_s: float, metric: str
) -> tuple[CalibrationStep, tuple[float, ...]]:
    """One step at ``rate``; and each copy's ``metric`` in it, in host order."""
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
            coalesce_us=plan.engine_coalesce_us,
        )
    except HairlineError as err:
        return CalibrationStep(rate, 0.0, 0.0, passed=False, note=err.message), ()
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
    for host, cpus in enumerate(plan.hosts[: len(copies)]):
        busy = busy_share(cpu_before, cpu_after, cpus)
        if busy is not None and busy > MAX_HOST_BUSY:
            shared = set(cpus) & set(plan.harness_cpus)
            note = (
                f"host {host}'s CPUs{' with the engine' if shared else ''} {busy:.0%} busy "
                f"(limit {MAX_HOST_BUSY:.0%})"
            )
            # What the arms on these CPUs did not use there was the engine's (where it shares
            # the host) or another process's: on a host of the arms' alone, say so. In a
            # duet every arm's host is the same CPUs, so all of them count.
            ours = sum(
                used[c] for c, h in zip(copies, plan.hosts, strict=False) if set(h) & set(cpus)
            )
            other = busy - ours / (len(cpus) * step_s * 1e9)
            if not shared and other > _NEIGHBOUR_SHARE:
                note += f", {other:.0%} of it {NEIGHBOUR}"
            notes.append(note)
    # Sends the engine could not make in time arrive late, in bursts: the arms then served
    # fewer requests than the step asked for, and their utilisation is not the rate's.
    if served < _MIN_SERVED * rate * step_s:
        notes.append(f"served {served / step_s:.0f}/s of {rate:.0f}/s")
    if not served:
        return CalibrationStep(rate, utilization, 0.0, passed=False, note="no answers"), ()
    per_request = sum(used.values()) / len(copies) / served
    values = tuple(
        {
            CPU_PER_REQUEST.name: used[n] / max(result.targets[n].requests, 1),
            LATENCY_P50.name: result.targets[n].latency_us.p50,
            LATENCY_P99.name: result.targets[n].latency_us.p99,
        }[metric]
        for n in copies
    )
    return CalibrationStep(rate, utilization, per_request, not notes, "; ".join(notes)), values
