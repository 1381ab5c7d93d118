"""The runs of a lab as rows for host-fact analyses: one arm on one host in one batch, the
metric's mean over it and the facts of its host (``runs.facts``, with the host's columns for
the facts the run did not record), and their values normalised per experiment.

hosts/factors.py (which facts explain a metric's variance, which are noisy) and tune's test
and control clusters read them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import and_, select

from hairline.collect.summary import CPU_PER_REQUEST
from hairline.store.db import Store
from hairline.store.models import Experiment, Host, Run, Service, Trial

__all__ = ["DEFAULT_METRIC", "FACTORS", "UNKNOWN", "RunValue", "load_runs", "normalised"]

DEFAULT_METRIC = CPU_PER_REQUEST.name
# The facts a host can differ in that may change how fast the same code runs (ServiceLab
# section 4.1: server type, CPU architecture, kernel release, turbo, region; hostname,
# cores and memory are the machine's identity or size, not its class).
FACTORS = ("server_type", "cpu_arch", "cpu_model", "kernel", "region", "turbo", "governor", "smt")
# Names facts have in a run's JSON (hosts.facts.HostFacts) that differ from the factor's.
_ALIASES = {"cpu_arch": ("arch",)}
# The host columns a missing fact falls back to.
_HOST_COLUMNS = ("region", "server_type", "cpu_arch", "cpu_model", "kernel")
UNKNOWN = "unknown"
_RUN_COLUMNS = (Run.experiment_id, Run.trial, Run.batch, Run.arm, Run.facts)


@dataclass(frozen=True)
class RunValue:
    """One run: an arm on a host in one batch, its metric's mean, its host's facts."""

    experiment: int
    kind: str  # "ab" | "aa"
    service: str
    trial: int
    batch: int
    arm: str
    host: str  # the host's name
    value: float
    facts: Mapping[str, str]


def _fact(name: str, run_facts: Mapping[str, Any], host: Mapping[str, Any]) -> str:
    for key in (name, *_ALIASES.get(name, ())):
        value = run_facts.get(key)
        if value is not None and str(value) != "":
            return str(value)
    value = host.get(name)
    return UNKNOWN if value is None or str(value) == "" else str(value)


def _run_means(path: Path, metric: str) -> dict[tuple[int, int, str], float]:
    """The metric's mean per (trial, batch, arm) of one trial's observations file.

    Read with pyarrow's column and row filters rather than ``read_observations``: a
    trial's file is mostly per-request latency rows, and a lab has thousands of them.
    """
    table = pq.read_table(
        path,
        columns=["trial", "batch", "arm", "metric", "value"],
        filters=[("metric", "=", metric)],
    )
    if table.num_rows == 0:
        return {}
    means = table.group_by(["trial", "batch", "arm"]).aggregate([("value", "mean")])
    columns = (means.column(c).to_pylist() for c in ("trial", "batch", "arm", "value_mean"))
    return {(int(t), int(b), str(a)): float(v) for t, b, a, v in zip(*columns, strict=True)}


def load_runs(
    store: Store,
    *,
    metric: str = DEFAULT_METRIC,
    service: str | None = None,
    kinds: Collection[str] | None = None,
) -> tuple[list[RunValue], list[str]]:
    """Every run of a done trial with the metric's mean over it, and notes on what could
    not be read. ``service`` and ``kinds`` ("ab", "aa") narrow the experiments."""
    where = [Trial.state == "done"]
    if service is not None:
        where.append(Service.name == service)
    if kinds is not None:
        where.append(Experiment.kind.in_(sorted(kinds)))
    with store.transaction() as session:
        trials = session.execute(
            select(Experiment.id, Experiment.kind, Service.name, Trial.index, Trial.observations)
            .join(Service, Service.id == Experiment.service_id)
            .join(Trial, Trial.experiment_id == Experiment.id)
            .where(*where)
            .order_by(Experiment.id, Trial.index)
        ).all()
        runs = session.execute(
            select(*_RUN_COLUMNS, Host.name, *(getattr(Host, c) for c in _HOST_COLUMNS))
            .join(Host, Host.id == Run.host_id)
            .join(Experiment, Experiment.id == Run.experiment_id)
            .join(Service, Service.id == Experiment.service_id)
            .join(Trial, and_(Trial.experiment_id == Run.experiment_id, Trial.index == Run.trial))
            .where(*where)
            .order_by(Run.id)
        ).all()
    # A batch run again (spoiled, or its host lost) has several runs; the last one is the
    # one whose observations were kept.
    placed: dict[tuple[int, int, int, str], tuple[str, dict[str, str]]] = {}
    for eid, trial, batch, arm, facts_json, host_name, *columns in runs:
        try:
            run_facts = json.loads(facts_json) if facts_json else {}
        except ValueError:
            run_facts = {}
        host = dict(zip(_HOST_COLUMNS, columns, strict=True))
        facts = {name: _fact(name, run_facts, host) for name in FACTORS}
        placed[(eid, trial, batch, arm)] = (host_name, facts)
    out: list[RunValue] = []
    unreadable: list[str] = []
    unplaced = 0
    for eid, kind, name, index, path in trials:
        if not path:
            continue
        try:
            means = _run_means(Path(path), metric)
        except (OSError, pa.ArrowException) as err:
            unreadable.append(f"{path} ({err})")
            continue
        for (trial, batch, arm), value in means.items():
            where_ran = placed.get((eid, trial, batch, arm))
            if where_ran is None or trial != index:
                unplaced += 1
                continue
            host_name, facts = where_ran
            out.append(RunValue(eid, kind, name, trial, batch, arm, host_name, value, facts))
    notes = []
    if unreadable:
        notes.append(
            f"{len(unreadable)} trial observation files could not be read and were left out "
            f"(first: {unreadable[0]})"
        )
    if unplaced:
        notes.append(f"{unplaced} runs have observations but no record of their host; left out")
    return out, notes


def _group(run: RunValue) -> tuple[int, str]:
    # An A/A's arms run the same build; an A/B's differ by the change.
    return (run.experiment, "" if run.kind == "aa" else run.arm)


def normalised(runs: Sequence[RunValue]) -> tuple[list[RunValue], list[float], list[str]]:
    """The runs that can be normalised, each value divided by the mean of its experiment
    (and arm, in an A/B), and notes on what was left out.

    A group of one run says nothing (its value becomes exactly 1), nor does one whose mean
    is 0 or not finite (a metric that is always 0, such as an error rate).
    """
    groups: dict[tuple[int, str], list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault(_group(run), []).append(i)
    kept: list[RunValue] = []
    values: list[float] = []
    single = zero = 0
    for members in groups.values():
        if len(members) < 2:
            single += 1
            continue
        mean = float(np.mean([runs[i].value for i in members]))
        if not math.isfinite(mean) or mean == 0:
            zero += 1
            continue
        for i in members:
            kept.append(runs[i])
            values.append(runs[i].value / mean)
    notes = []
    if single:
        notes.append(f"{single} experiment arms with a single run left out (nothing to compare)")
    if zero:
        notes.append(f"{zero} experiment arms whose mean is 0 or not finite left out")
    return kept, values, notes
