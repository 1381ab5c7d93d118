"""Is a batch's comparison sound? The reasons a measured batch is spoiled and run again.

A batch is a comparison of arms that ran side by side under one replay. It is spoiled when
what was measured is not what the arms would do under the planned load:

- the engine's ``rate`` or ``dropped`` gate failed: some target did not get the planned
  load (late sends alone are not a reason: every target gets them in lockstep);
- an arm answered more than the service's ``max_error_rate`` with errors: it was overloaded
  or broken, and the CPU of an error is not the CPU of an answer;
- an arm was not running at the end of the measurement (it crashed), or restarted during
  it: its main process ended and another serves (a child it left, or a new process);
- an arm's CPU reading is impossible: nothing used while requests were served, or more
  than its CPUs could give in the measured wall time;
- the hypervisor took more time from one arm's CPUs than from another's, by more than
  ``MAX_STEAL_GAP`` of a CPU: one arm waited on a neighbour the other did not meet.

Pure: the runner gathers the facts, this decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["GATE_FAILURES", "ArmReading", "arm_steal_shares", "batch_problems"]

# Gates whose failure spoils a comparison; the others (late_sends, poisson_fit) hit every
# target alike.
SPOILING_GATES = ("rate", "dropped")
# What a failed engine gate means, in words that cannot be read as a pass: the engine's
# detail alone once read like one ("achieved rate is within 1.45% of the scheduled rate",
# its rate gate failing at a 1% limit). The batch's reason and the report's notes
# (report/context/notes.py) both lead with it.
GATE_FAILURES = {
    "rate": "a target did not get the scheduled rate",
    "dropped": "requests were dropped at the in-flight limit",
    "poisson_fit": "the send times did not follow the Poisson schedule",
}
# cgroup CPU is exact; allow for the reading straddling the measured wall time.
_CPU_SLACK = 1.05
# How much more of its CPUs' wall time the hypervisor may take from one arm than from
# another before the batch is spoiled. A guest's cgroup CPU time leaves stolen time out, so
# CPU per request barely moves with steal; latency does, and it is the *difference* between
# arms that biases a side-by-side comparison: steal that hits every arm alike is noise the
# trials' spread already carries. A limit on steal itself failed CI (2026-11-27): its
# shared host took 10-15% of both CPUs for minutes, every 1 s batch was spoiled, and seven
# end-to-end tests failed, while the two CPUs' shares were within 4% of each other.
# /proc/stat counts 10 ms ticks, a 1% step on a 1 s batch; this project's own VM loses
# 0.4% of each CPU on average, in bursts.
MAX_STEAL_GAP = 0.10


@dataclass(frozen=True)
class ArmReading:
    """What one arm did in a batch's measurement window."""

    requests: int
    errors: int
    cpu_ns: int
    cpus: int  # CPUs of its host
    running: bool
    # Its main process as (pid, start time) when the measurement began and ended
    # (LocalArm.main_process); None where unknown.
    main_before: tuple[int, int] | None = None
    main_after: tuple[int, int] | None = None


def batch_problems(
    readings: Mapping[str, ArmReading],
    *,
    failed_gates: Sequence[tuple[str, str]],
    wall_s: float,
    max_error_rate: float,
    steal_share: Mapping[str, float] | None = None,
) -> list[str]:
    """Why the batch is spoiled (empty when it is sound). ``failed_gates`` are the engine's
    failed gates as (name, detail); ``steal_share`` the share of each arm's CPUs' wall time
    the hypervisor took (``arm_steal_shares``)."""
    problems = [
        f"load gate {name} failed: {GATE_FAILURES[name]} (engine: {detail})"
        for name, detail in failed_gates
        if name in SPOILING_GATES
    ]
    for arm, r in readings.items():
        if not r.running:
            problems.append(f"arm {arm} was not running at the end of the measurement")
        elif r.main_before is not None and r.main_after != r.main_before:
            # Its CPU, memory and counters then mix two processes' lives (a cold start in
            # the window), and the restart is itself news: spoiled, and said.
            now = f"pid {r.main_after[0]} serves now" if r.main_after else "no process serves"
            problems.append(
                f"arm {arm} restarted during the measurement: its main process (pid "
                f"{r.main_before[0]}) ended and {now}"
            )
        if r.requests and r.errors / r.requests > max_error_rate:
            problems.append(
                f"arm {arm} answered {r.errors} of {r.requests} requests with errors "
                f"({r.errors / r.requests:.1%} > max_error_rate {max_error_rate:.1%})"
            )
        if r.requests and r.cpu_ns <= 0:
            problems.append(f"arm {arm} used no CPU while serving {r.requests} requests")
        elif r.cpu_ns > r.cpus * wall_s * 1e9 * _CPU_SLACK:
            problems.append(
                f"arm {arm} used {r.cpu_ns / 1e9:.2f} s of CPU in {wall_s:.2f} s on "
                f"{r.cpus} CPU(s), more than its CPUs can give"
            )
    shares = steal_share or {}
    if len(shares) >= 2:
        most = max(shares, key=lambda a: shares[a])
        least = min(shares, key=lambda a: shares[a])
        if shares[most] - shares[least] > MAX_STEAL_GAP:
            problems.append(
                f"the hypervisor took {shares[most]:.1%} of arm {most}'s CPU time and "
                f"{shares[least]:.1%} of arm {least}'s (a gap over {MAX_STEAL_GAP:.0%}): "
                "a neighbour slowed one arm and not the other"
            )
    return problems


def arm_steal_shares(
    steal_ms: Mapping[int, float], cpus_of: Mapping[str, Sequence[int]], wall_s: float
) -> dict[str, float]:
    """The share of each arm's CPUs' wall time the hypervisor took (arms whose CPUs were
    not all read are left out)."""
    shares: dict[str, float] = {}
    for arm, cpus in cpus_of.items():
        if cpus and wall_s > 0 and all(c in steal_ms for c in cpus):
            shares[arm] = sum(steal_ms[c] for c in cpus) / (len(cpus) * wall_s * 1000)
    return shares
