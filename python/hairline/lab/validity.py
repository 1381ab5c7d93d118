"""Is a batch's comparison sound? The reasons a measured batch is spoiled and run again.

A batch is a comparison of arms that ran side by side under one replay. It is spoiled when
what was measured is not what the arms would do under the planned load:

- the engine's ``rate`` or ``dropped`` gate failed: some target did not get the planned
  load (late sends alone are not a reason: every target gets them in lockstep);
- an arm answered more than the service's ``max_error_rate`` with errors: it was overloaded
  or broken, and the CPU of an error is not the CPU of an answer;
- an arm was not running at the end of the measurement (it crashed);
- an arm's CPU reading is impossible: nothing used while requests were served, or more
  than its CPUs could give in the measured wall time;
- the hypervisor took more than ``MAX_STEAL_SHARE`` of a CPU the batch used (an arm's or
  the engine's) away for other guests: the batch measured the neighbour.

Pure: the runner gathers the facts, this decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ArmReading", "batch_problems"]

# Gates whose failure spoils a comparison; the others (late_sends, poisson_fit) hit every
# target alike.
SPOILING_GATES = ("rate", "dropped")
# cgroup CPU is exact; allow for the reading straddling the measured wall time.
_CPU_SLACK = 1.05
# The share of a used CPU's wall time the hypervisor may take before the batch is spoiled.
# A guest's cgroup CPU time leaves stolen time out, so CPU per request barely moves with
# steal; latency, and how far each arm got in the replay, do. This project's 2-vCPU VMs
# lose 0.4% of each CPU on average (20.7 s over 44 minutes of the test suite), in bursts,
# and /proc/stat counts 10 ms ticks: at 2% a 2 s batch was spoiled by 5 ticks. A tenth of
# a CPU is a neighbour, not a burst.
MAX_STEAL_SHARE = 0.10


@dataclass(frozen=True)
class ArmReading:
    """What one arm did in a batch's measurement window."""

    requests: int
    errors: int
    cpu_ns: int
    cpus: int  # CPUs of its host
    running: bool


def batch_problems(
    readings: Mapping[str, ArmReading],
    *,
    failed_gates: Sequence[tuple[str, str]],
    wall_s: float,
    max_error_rate: float,
    steal_ms: Mapping[int, float] | None = None,
) -> list[str]:
    """Why the batch is spoiled (empty when it is sound). ``failed_gates`` are the engine's
    failed gates as (name, detail); ``steal_ms`` the hypervisor's steal per CPU used."""
    problems = [
        f"load gate {name} failed ({detail})" for name, detail in failed_gates
        if name in SPOILING_GATES
    ]  # fmt: skip
    for arm, r in readings.items():
        if not r.running:
            problems.append(f"arm {arm} was not running at the end of the measurement")
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
    for cpu, ms in sorted((steal_ms or {}).items()):
        if wall_s > 0 and ms > MAX_STEAL_SHARE * wall_s * 1000:
            problems.append(
                f"the hypervisor ran other work on CPU {cpu} for {ms:.0f} ms of the "
                f"{wall_s:.2f} s measured ({ms / (wall_s * 10):.1f}% steal, limit "
                f"{MAX_STEAL_SHARE:.0%}): the machine was shared"
            )
    return problems
