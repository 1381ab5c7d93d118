"""What a reader must know beside the verdict: hosts that differ, hardware mode, the
engine's load gates that failed, what else ran at the same time, and what changed hands
(another processor, a lost host's replacement).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hairline.hosts.similar import mismatches
from hairline.lab.concurrency import Overlap
from hairline.lab.validity import GATE_FAILURES
from hairline.report.context.model import HostReport

__all__ = [
    "Seat",
    "batch_text",
    "handover_notes",
    "host_notes",
    "late_ticks_steal_explains",
    "load_notes",
    "overlap_notes",
    "trials_text",
]


@dataclass(frozen=True)
class Seat:
    """Where one arm of one batch ran: the trial, the host index the observations use, the
    host there, the processor that ran it, and the host's note if it is now unhealthy."""

    trial: int
    host: int
    name: str
    processor: str
    lost: str | None = None


def _trials(indices: Sequence[int]) -> str:
    low, high = min(indices) + 1, max(indices) + 1
    return f"trial {low}" if low == high else f"trials {low}-{high}"


def handover_notes(seats: Sequence[Seat]) -> tuple[str, ...]:
    """What changed hands while the experiment ran, in the order it ran (``seats`` in run
    order): another processor taking it over, and a host index whose host was replaced
    (a host lost mid-trial is marked unhealthy and its trial runs again elsewhere)."""
    notes: list[str] = []
    processors = list(dict.fromkeys(s.processor for s in seats))
    if len(processors) > 1:
        ran = ", ".join(
            f"{p} ({_trials([s.trial for s in seats if s.processor == p])})" for p in processors
        )
        notes.append(
            f"run by {len(processors)} processors in turn: {ran}; each took over when the one "
            "before let go (it died or lost the database, and its lease lapsed; or it gave "
            "the experiment back while it waited); a trial left unfinished is run again from "
            "its start"
        )
    for index in sorted({s.host for s in seats}):
        mine = [s for s in seats if s.host == index]
        names = list(dict.fromkeys(s.name for s in mine))
        if len(names) < 2:
            continue
        lost = [
            f"{n} was lost ({reason}; now marked unhealthy)"
            for n in names[:-1]
            if (reason := next((s.lost for s in mine if s.name == n and s.lost), None))
        ]
        hands = ", then ".join(
            f"{n} ({_trials([s.trial for s in mine if s.name == n])})" for n in names
        )
        gone = f"; {'; '.join(lost)}" if lost else ""
        notes.append(
            f"host {index} changed hands: {hands}{gone}; a trial a lost host interrupted is run "
            "again from its start"
        )
    return tuple(notes)


def host_notes(
    hosts: tuple[HostReport, ...], *, arm_classes: Mapping[str, Mapping[str, str]] | None = None
) -> tuple[str, ...]:
    """What a reader must know about the hosts: in hardware mode, that the arms are host
    classes and the verdict compares the hardware; and any fact on which the hosts differ
    beyond that (ServiceLab section 4.1: results compare only between nearly identical
    machines). Local CPU sets of one machine match by construction."""
    notes = []
    compared: set[str] = set()
    if arm_classes:
        compared = {k for facts in arm_classes.values() for k in facts}
        classes = "; ".join(
            f"{arm}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in facts.items())
            for arm, facts in arm_classes.items()
        )
        notes.append(
            f"hardware mode: one build on every arm; the arms are host classes ({classes}), "
            "each on its own host in every batch, so the verdict compares the hardware"
        )
    differ = mismatches([h.facts for h in hosts], expected=compared)
    if differ:
        listed = "; ".join(
            f"{fact.replace('_', ' ')} "
            + ", ".join(f"{v} (host {h.host})" for h, v in zip(hosts, values, strict=True))
            for fact, values in differ.items()
        )
        notes.append(
            f"WARNING: the experiment's hosts differ in {listed}: a difference between arms "
            "may come from the hosts (the fully balanced design's swap cancels a fixed one)"
        )
    return tuple(notes)


def load_notes(
    summaries: Mapping[str, Mapping[str, Any]],
    *,
    engine_steal_ms: Mapping[str, float] | None = None,
) -> tuple[str, ...]:
    """One note per validity gate of the engine that failed in any batch.

    ``summaries`` maps a batch's name (``t0b1``) to the engine's summary JSON of its
    measurement; ``engine_steal_ms`` the hypervisor's steal on the engine's CPU in that
    batch, where it was recorded. The measurements are kept either way; the note says how
    far the load was from what was asked, so a reader can judge the verdict.

    Late sends are the pacer waking more than 1 ms after a send fell due. A real-time
    engine thread (engine/src/load/priority.rs) is late only when its CPU did not run at all:
    the hypervisor ran something else (steal) or the engine's own loop was busy. Each
    stolen millisecond can make late at most the sends due in it, so where the batch's
    steal covers its late sends, the note says the machine took the time, not the
    generator. On this project's VM a 300/s batch of 1.5 s had 1-12 late pacer ticks with
    10-100 ms stolen (2026-11-28).
    """
    failed: dict[str, list[tuple[float, str, str]]] = {}
    for batch, summary in summaries.items():
        for gate in summary.get("gates") or ():
            if not gate.get("passed", True):
                value = float(gate.get("value") or 0.0)
                failed.setdefault(str(gate.get("name")), []).append(
                    (value, batch, str(gate.get("detail", "")))
                )
    notes = []
    for name, hits in sorted(failed.items()):
        value, batch, detail = max(hits)
        what = GATE_FAILURES.get(name, "failed")
        if name == "late_sends":
            what = _late_sends_cause(
                [batch for _, batch, _ in hits], summaries, engine_steal_ms or {}
            )
        notes.append(
            f"load gate {name} failed in {len(hits)} of {len(summaries)} batches: {what} "
            f"(worst {batch_text(batch)}: {detail}); the measurements are kept"
        )
    return tuple(notes)


def late_ticks_steal_explains(summary: Mapping[str, Any], steal_ms: float) -> float:
    """The most pacer ticks ``steal_ms`` of stolen CPU can have made late: the sends due
    while the engine's CPU did not run. Pure."""
    duration_s = float(summary.get("duration_s") or 0.0)
    scheduled = float(summary.get("scheduled") or 0.0)
    if duration_s <= 0.0:
        return 0.0
    return steal_ms / 1000.0 * scheduled / duration_s


def _late_sends_cause(
    batches: Sequence[str],
    summaries: Mapping[str, Mapping[str, Any]],
    engine_steal_ms: Mapping[str, float],
) -> str:
    """What the late sends of ``batches`` were: the machine's (steal explains every batch's
    late ticks), the generator's, or unknown (no steal recorded)."""
    known = [b for b in batches if b in engine_steal_ms]
    if not known:
        return "sends left the engine more than 1 ms after they fell due"
    explained = [
        b
        for b in known
        if float(summaries[b].get("behind") or 0)
        <= late_ticks_steal_explains(summaries[b], engine_steal_ms[b])
    ]
    stolen = ", ".join(f"{engine_steal_ms[b]:.0f} ms" for b in known)
    if len(explained) == len(batches):
        return (
            "sends left the engine more than 1 ms late while the hypervisor ran other work "
            f"on the engine's CPU (steal {stolen} in those batches, enough to delay every "
            "late one): the machine, not the generator"
        )
    return (
        "the load generator fell behind its own schedule, more than the hypervisor's steal "
        f"on its CPU explains (steal {stolen} in those batches)"
    )


_BATCH_NAME = re.compile(r"t(\d+)b(\d+)(?:a(\d+))?")


def batch_text(name: str) -> str:
    """A batch's run name (``t0b1``, ``t0b1a2`` as the runner names its files: trial and
    batch indexes from 0, attempts counted from 1) as a reader counts: ``trial 1 batch 2``
    (``attempt 2``), every number from 1 as everywhere they are shown; another name as it
    is."""
    found = _BATCH_NAME.fullmatch(name)
    if found is None:
        return name
    trial, batch, attempt = found.groups()
    text = f"trial {int(trial) + 1} batch {int(batch) + 1}"
    return text + (f" attempt {int(attempt)}" if attempt is not None else "")


def trials_text(trials: Sequence[int]) -> str:
    """``trial 2``, ``trials 3-5``, ``trials 1, 3-5``: numbers from 1, runs joined."""
    spans: list[list[int]] = []
    for t in sorted(set(trials)):
        if spans and t == spans[-1][1] + 1:
            spans[-1][1] = t
        else:
            spans.append([t, t])
    listed = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
    return f"trial {listed}" if len(trials) == 1 else f"trials {listed}"


def _overlap_text(o: Overlap) -> str:
    # reason: "same host w2", "same downstream 127.0.0.1:5432", ...
    basis, _, where = o.reason.partition(" ")[2].partition(" ")
    if o.kind == "experiment":
        how = {
            "host": f"ran on {where}",
            "machine": f"ran on another CPU set of machine {where}",
            "downstream": f"also used downstream {where}",
        }.get(basis, f"ran beside it ({o.reason})")
        text = f"{o.what} {how}"
    else:
        text = f"{o.kind} of {o.what}" + (f" on host {where}" if basis == "host" else "")
    if o.trials:
        text += f" during {trials_text(o.trials)}"
    return text + (f" ({o.note})" if o.note else "")


def overlap_notes(overlaps: Sequence[Overlap]) -> tuple[str, ...]:
    """One warning per experiment or event that ran beside this one on its hosts or
    downstreams (ServiceLab section 6.2.4: the top cause of false positives)."""
    return tuple(f"WARNING: {_overlap_text(o)}; a difference may come from it" for o in overlaps)
