"""Which arm runs on which host in each batch: the lab's side of the four designs.

Perflab section 4 (Table 2) defines the designs by what each host runs: in the
host-balanced and fully balanced designs each host runs both versions in two batches, so
the host effect cancels in the difference; in the request-balanced and fully balanced
designs every request goes to both versions (the lab always replays one request stream to
all arms in lockstep, so both of its designs are request-balanced). ServiceLab section
5.1 runs the fully balanced design: batch 1 has host 1 on A and host 2 on B, batch 2 swaps
them. In hardware mode the arms are the hosts (one build on machines of two classes), so
the ``pinned`` layout keeps every arm on its own host in every batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Batch", "LabDesign", "schedule"]

LabDesign = Literal["fully-balanced", "request-balanced", "pinned"]


@dataclass(frozen=True)
class Batch:
    """One period in which each host runs one arm; ``arm_on_host[h]`` names host h's arm."""

    trial: int
    batch: int
    arm_on_host: tuple[str, ...]


def schedule(arms: tuple[str, ...], *, trials: int, design: LabDesign) -> list[Batch]:
    """The batches of an experiment, in the order they run.

    Each arm gets its own host. The fully balanced design rotates arms over hosts across
    ``len(arms)`` batches per trial (a swap for two arms), so every host runs every arm in
    every trial; the request-balanced design keeps one batch per trial and alternates the
    assignment between trials so that no arm sits on one host for the whole experiment.
    """
    if len(arms) < 2 or len(set(arms)) != len(arms):
        raise ValueError(f"a schedule needs at least two distinct arms, got {arms}")
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    n = len(arms)
    out: list[Batch] = []
    for trial in range(trials):
        if design == "fully-balanced":
            rotations = range(n)
        elif design == "request-balanced":
            rotations = range(trial % n, trial % n + 1)
        elif design == "pinned":
            rotations = range(1)
        else:
            raise ValueError(
                f"unknown design {design!r}: use fully-balanced, request-balanced or pinned"
            )
        for batch, shift in enumerate(rotations):
            out.append(
                Batch(
                    trial=trial,
                    batch=batch,
                    arm_on_host=tuple(arms[(h + shift) % n] for h in range(n)),
                )
            )
    return out
