"""An experiment's report model, read from the lab's database and artifact folder."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from sqlalchemy import func, select

from hairline.collect.summary import CPU_PER_REQUEST
from hairline.config import ExperimentConfig
from hairline.config.suggest import why_notes
from hairline.hosts.inventory import parse_cpus
from hairline.lab import concurrency
from hairline.lab.analysis import Analysis
from hairline.lab.calibrate import Calibration, calibration_from_dict, servable_rate
from hairline.lab.functions import FunctionAnalysis, analyze_functions, neighbours_of
from hairline.lab.queue import require_experiment
from hairline.lab.results import (
    aa_experiments,
    aa_records,
    analyze_experiment,
    experiment_observations,
    load_analysis,
    stored_history,
)
from hairline.profile.flame import Stack, folded_counts, per_request
from hairline.report.context import (
    ArmReport,
    CapacityCurve,
    CurvePoint,
    ExperimentReport,
    HostReport,
    Seat,
    handover_notes,
    host_notes,
    host_pair_notes,
    host_pairs,
    load_notes,
)
from hairline.store.db import Store
from hairline.store.models import Arm, Host, Run, Service, Trial
from hairline.store.observations import Observations, observations_from_table

__all__ = ["load_report"]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _batch_records(runs: Path) -> list[dict[str, Any]]:
    """The runner's record of each batch attempt (``t<T>b<B>a<K>.batch.json``); an
    unreadable one is skipped: the report must not fail over a note."""
    records = [_read_json(p) for p in sorted(runs.glob("t*b*a*.batch.json"))]
    return [r for r in records if r is not None]


def _load_summaries(runs: Path, records: list[dict[str, Any]]) -> dict[str, dict[str, object]]:
    """The engine's summary of each accepted batch attempt's measurement."""
    summaries: dict[str, dict[str, object]] = {}
    for record in records:
        if not record.get("accepted") or "summary" not in record:
            continue  # a capacity batch has no summary of its own
        if summary := _read_json(runs / str(record["summary"])):
            summaries[str(record["summary"]).removesuffix(".json")] = summary
    return summaries


def _engine_steal_ms(records: list[dict[str, Any]]) -> dict[str, float]:
    """The hypervisor's steal on the engine's CPUs in each accepted batch attempt (the most
    of any of them), where the record says which CPUs those were."""
    steal: dict[str, float] = {}
    for record in records:
        cpus, stolen = record.get("engine_cpus"), record.get("steal_ms")
        if not record.get("accepted") or "summary" not in record or not cpus or not stolen:
            continue
        on_engine = [float(stolen[str(c)]) for c in cpus if str(c) in stolen]
        if on_engine:
            steal[str(record["summary"]).removesuffix(".json")] = max(on_engine)
    return steal


def _capacity_curves(runs: Path, records: list[dict[str, Any]]) -> tuple[CapacityCurve, ...]:
    """Each arm's search in each accepted capacity batch (lab/capacity.py's files)."""
    curves: list[CapacityCurve] = []
    for record in records:
        if not record.get("accepted") or "capacity" not in record:
            continue
        data = _read_json(runs / str(record["capacity"]))
        for arm, curve in (data or {}).get("arms", {}).items():
            curves.append(
                CapacityCurve(
                    arm=arm,
                    trial=int(record["trial"]),
                    batch=int(record["batch"]),
                    max_rate_per_s=float(curve["max_rate_per_s"]),
                    slo_p99_ms=float(curve["slo_p99_ms"]),
                    stopped_by=str(curve["stopped_by"]),
                    points=tuple(
                        CurvePoint(
                            rate_per_s=float(p["rate_per_s"]),
                            p99_ms=float(p["p99_ms"]) if p["p99_ms"] is not None else math.nan,
                            served_per_s=float(p["served_per_s"]),
                            duration_s=float(p["duration_s"]),
                            passed=bool(p["passed"]),
                        )
                        for p in curve["probes"]
                    ),
                )
            )
    return tuple(curves)


def calibration_note(calibration: Calibration) -> str:
    """What calibration found and why: for precision, the candidates' noise and what was
    left out; for a target utilisation, whether it was reached at a valid load."""
    took = f"; calibration took {calibration.seconds:g} s" if calibration.seconds else ""
    target = calibration.target_utilization
    if target is None:
        top = servable_rate(calibration.steps)
        failing = [s for s in calibration.steps if not s.passed]
        ramp = f"; the highest rate served with every gate holding was {top:,.0f}/s" if top else ""
        if failing:
            first = min(failing, key=lambda s: s.rate_per_s)
            ramp += f" ({first.rate_per_s:,.0f}/s failed: {first.note})"
        return f"rate calibrated to {calibration.rate_per_s:g} requests/s: " + (
            f"{calibration.reason}{ramp}{took}"
        )
    steps = [s for s in calibration.steps if s.passed]
    reached = max((s.utilization for s in steps), default=0.0)
    text = (
        f"rate calibrated to {calibration.rate_per_s:g} requests/s for {target:.0%} busy "
        f"in {len(calibration.steps)} steps{took}"
    )
    if reached < target * 0.9:
        text += (
            f"; the baseline reached only {reached:.0%} busy at the highest rate the load "
            "stayed valid (the engine, or the service, could go no faster): set a lower "
            "target_utilization, or none to calibrate for precision"
        )
    return text


def _counts(items: dict[str, int]) -> str:
    return ", ".join(f"{what}: {n}" for what, n in sorted(items.items(), key=lambda i: -i[1]))


def side_effect_notes(records: list[dict[str, Any]]) -> list[str]:
    """Per isolated arm, over every batch attempt: connections its namespace refused, per
    destination; the writes the egress proxy answered itself and the requests it forwarded,
    per endpoint; the connections through it and its upstream errors (ServiceLab section
    5.3: a test must not write to production; docs/safety.md)."""
    denied: dict[str, dict[str, int]] = {}
    dropped: dict[str, dict[str, int]] = {}
    forwarded: dict[str, dict[str, int]] = {}
    relayed: dict[str, dict[str, int]] = {}  # arm -> connections, upstream errors

    def add(into: dict[str, dict[str, int]], arm: str, key: str, n: Any) -> None:
        counts = into.setdefault(arm, {})
        counts[key] = counts.get(key, 0) + int(n)

    for record in records:
        for arm, report in (record.get("isolation") or {}).items():
            for where, n in (report.get("denied") or {}).items():
                add(denied, arm, where, n)
            for address, relay in (report.get("downstreams") or {}).items():
                for endpoint, n in (relay.get("dropped") or {}).items():
                    add(dropped, arm, f"{address} {endpoint}", n)
                for endpoint, n in (relay.get("forwarded") or {}).items():
                    add(forwarded, arm, f"{address} {endpoint}", n)
                for what in ("connections", "upstream_errors"):
                    add(relayed, arm, what, relay.get(what) or 0)
    notes = []
    for arm in sorted({*denied, *dropped, *forwarded, *relayed}):
        parts = []
        if arm in denied:
            parts.append(
                f"{sum(denied[arm].values())} connections refused ({_counts(denied[arm])})"
            )
        if arm in dropped:
            parts.append(
                f"{sum(dropped[arm].values())} writes dropped by the egress proxy "
                f"({_counts(dropped[arm])})"
            )
        if arm in forwarded:
            parts.append(
                f"{sum(forwarded[arm].values())} requests forwarded to downstreams "
                f"({_counts(forwarded[arm])})"
            )
        if relayed.get(arm, {}).get("connections"):
            errors = relayed[arm].get("upstream_errors", 0)
            parts.append(
                f"{relayed[arm]['connections']} connections through the egress proxy, "
                f"{errors} upstream error{'' if errors == 1 else 's'}"
                + (" (a downstream refused, unreachable within 2 s or silent for 30 s)"
                   if errors else "")
            )  # fmt: skip
        if parts:
            notes.append(f"side effects of arm {arm}: " + "; ".join(parts))
    return notes


def measurement_notes(
    records: list[dict[str, Any]],
    trial_notes: list[tuple[int, str, str]],
    calibration: Calibration | None,
) -> tuple[str, ...]:
    """Notes on how the measurement went: CPU not read from cgroups (loud: exited threads
    and daemons may be missed), memory not read from them, batches run again and why,
    trials left out or not needed, and the calibrated rate."""
    notes: list[str] = []
    fallback = {
        arm: why
        for r in records
        for arm, why in (r.get("cgroup_fallback") or {}).items()
    }  # fmt: skip
    for arm, why in sorted(fallback.items()):
        notes.append(
            f"WARNING: arm {arm} ran without a cgroup ({why}); its CPU comes from procfs "
            "in 10 ms ticks and misses daemons that left its process tree"
        )
    memory = {
        arm: why
        for r in records
        for arm, why in (r.get("memory_fallback") or {}).items()
    }  # fmt: skip
    for arm, why in sorted(memory.items()):
        if arm not in fallback:
            notes.append(
                f"WARNING: arm {arm}'s memory comes from procfs, not its cgroup ({why}): "
                "the resident anonymous memory of its processes, without what exited or "
                "left them"
            )
    for r in records:
        if not r.get("accepted"):
            notes.append(
                f"trial {int(r['trial']) + 1} batch {int(r['batch']) + 1} attempt "
                f"{r['attempt']} was spoiled and run again: {'; '.join(r.get('problems', []))}"
            )
    for index, state, note in trial_notes:
        if state == "excluded":
            notes.append(f"trial {index + 1} left out: {note}")
    skipped = [index for index, state, _ in trial_notes if state == "skipped"]
    if skipped:
        notes.append(
            f"trials {skipped[0] + 1} to {skipped[-1] + 1} not run: the sequential design "
            f"had settled after {skipped[0]}"
            if len(skipped) > 1
            else f"trial {skipped[0] + 1} not run: the sequential design had settled"
        )
    if calibration is not None:
        notes.append(calibration_note(calibration))
    notes += side_effect_notes(records)
    return tuple(notes)


def _trials(
    config: ExperimentConfig, phase: str, done: int, trial_notes: list[tuple[int, str, str]]
) -> int:
    """The trials to show: those planned, or under a sequential design that finished, those
    it ran (done and left out)."""
    if config.design.sequential and phase in ("done", "failed"):
        return done + sum(1 for _, state, _ in trial_notes if state == "excluded")
    return config.design.planned_trials


def _time(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def _functions(
    config: ExperimentConfig,
    analysis: Analysis | None,
    observations: Observations | None,
    artifacts: Path,
    records: list[dict[str, Any]],
) -> tuple[tuple[FunctionAnalysis, ...], str]:
    """The function analysis of a profiled experiment, or why there is none ("" when the
    service is not profiled)."""
    profile = config.service.profile
    if profile is None or analysis is None or observations is None:
        return (), ""
    comparisons = {r.candidate: r.baseline for r in analysis.results}
    runs = artifacts / "runs"
    found = analyze_functions(
        observations, comparisons, profile, neighbours=neighbours_of(runs.glob("*.folded")),
        seed=config.analysis.seed,
    )  # fmt: skip
    if found:
        return tuple(found), ""
    reasons = sorted(
        {
            str(entry["why"])
            for record in records
            for entry in (record.get("profile") or {}).values()
            if isinstance(entry, dict) and entry.get("why")
        }
    )
    if reasons:
        return (), "no function metrics: " + "; ".join(reasons)
    if not any(record.get("profile") for record in records):
        return (), "no function metrics: no batch was profiled"
    return (), "no function metrics: fewer than two trials were profiled in both arms"


def _flame_stacks(
    runs: Path, records: list[dict[str, Any]], observations: Observations | None
) -> dict[str, dict[Stack, float]]:
    """Each arm's stacks in CPU ns per request over its accepted batches: a batch's folded
    file (``t0b0a1-B.folded``, lab/sampling.py) scaled by the arm's CPU per request in that
    batch. A batch without its file or its CPU row is left out; nothing fails here."""
    if observations is None:
        return {}
    table = observations.table
    cpu_rows = table.filter(pc.equal(table.column("metric"), CPU_PER_REQUEST.name))
    cpu = {
        (str(r["trial"]), str(r["batch"]), str(r["arm"])): float(r["value"])
        for r in cpu_rows.select(["trial", "batch", "arm", "value"]).to_pylist()
    }
    batches: dict[str, list[tuple[dict[Stack, float], float]]] = {}
    for record in records:
        if not record.get("accepted") or not record.get("profile") or "summary" not in record:
            continue
        stem = str(record["summary"]).removesuffix(".json")
        for arm in sorted(record["profile"]):
            at = cpu.get((str(record["trial"]), str(record["batch"]), str(arm)))
            try:
                text = (runs / f"{stem}-{arm}.folded").read_text()
            except OSError:
                continue
            if at is not None:
                batches.setdefault(str(arm), []).append((folded_counts(text), at))
    return {arm: per_request(found) for arm, found in sorted(batches.items())}


def load_report(store: Store, experiment_id: int, *, reanalyse: bool = False) -> ExperimentReport:
    """Everything a report shows about ``experiment_id``, with the analysis stored when it
    finished; ``reanalyse`` analyses its trials again (same seed, same A/A history)."""
    with store.transaction() as session:
        row = require_experiment(session, store, experiment_id)
        service = session.get(Service, row.service_id)
        arms = session.scalars(
            select(Arm).where(Arm.experiment_id == experiment_id).order_by(Arm.position)
        ).all()
        done = session.scalar(
            select(func.count())
            .select_from(Trial)
            .where(Trial.experiment_id == experiment_id, Trial.state == "done")
        )
        host_rows = session.execute(
            select(Run.host_index, Host.id, Host.name, Host.address, Host.cpus, Run.facts,
                   Run.trial, Run.processor, Host.healthy, Host.health_note)
            .join(Host, Host.id == Run.host_id)
            .where(Run.experiment_id == experiment_id)
            .order_by(Run.id)
        ).all()  # fmt: skip
        config = ExperimentConfig.model_validate(json.loads(row.spec))
        # What each arm really ran with: an A/A runs the baseline's on every arm.
        arm_configs = (config.as_aa() if row.kind == "aa" else config).arms
        artifacts = Path(row.artifacts_dir)
        # By index and host: a host that died is replaced, and both ran for that index.
        hosts: dict[tuple[int, int], HostReport] = {}
        seats = [
            Seat(trial, index, name, processor, None if healthy else (note or "unhealthy"))
            for index, _, name, _, _, _, trial, processor, healthy, note in host_rows
        ]
        for index, host_id, name, address, cpus, facts, *_ in host_rows:
            hosts.setdefault(
                (index, host_id),
                HostReport(
                    host=index,
                    cpus=parse_cpus(cpus),
                    facts=json.loads(facts),
                    name=name,
                    address=address,
                ),
            )
        hardware = config.mode_name == "hardware"
        arm_classes = {
            name: arm.hosts.facts()
            for name, arm in arm_configs.items()
            if hardware and arm.hosts is not None
        }
        arm_reports = tuple(
            ArmReport(
                name=a.name,
                source=a.source,
                build_key=a.build_key,
                build_cached=a.build_cached,
                build_log=Path(a.build_log) if a.build_log else None,
                args=tuple(arm_configs[a.name].args) if a.name in arm_configs else (),
                env=tuple(sorted(arm_configs[a.name].env.items())) if a.name in arm_configs else (),
                baseline=config.comparisons.get(a.name),
            )
            for a in arms
        )
        phase, failure, kind = row.phase, row.failure, row.kind
        rate_per_s = row.rate_per_s
        calibration = (
            calibration_from_dict(json.loads(row.calibration)) if row.calibration else None
        )
        trial_notes = [
            (t.index, t.state, t.note or "")
            for t in session.scalars(
                select(Trial)
                .where(
                    Trial.experiment_id == experiment_id,
                    Trial.state.in_(("excluded", "skipped")),
                )
                .order_by(Trial.index)
            )
        ]
        created, started, finished = row.created_at, row.started_at, row.finished_at
        trial_ends = session.execute(
            select(Trial.index, Trial.finished_at).where(
                Trial.experiment_id == experiment_id,
                Trial.state == "done",
                Trial.finished_at.is_not(None),
            )
        ).all()
        service_name = service.name if service else config.service.name
    analysis: Analysis | None = None
    observations: Observations | None = None
    table = experiment_observations(store, experiment_id)
    if table is not None:
        observations = observations_from_table(table, source=f"experiment {experiment_id}")
    if phase == "done":
        analysis = None if reanalyse else load_analysis(artifacts)
        if analysis is None:
            if kind == "aa":
                config = config.as_aa()
            analysis = analyze_experiment(
                store, experiment_id, config, history_ids=stored_history(artifacts)
            )
    host_list = tuple(hosts[key] for key in sorted(hosts, key=lambda k: k[0]))
    pairs = host_pairs(analysis, host_list, len(arm_reports))
    html = artifacts / "report.html"
    records = _batch_records(artifacts / "runs")
    functions, functions_note = _functions(config, analysis, observations, artifacts, records)
    flame_stacks = _flame_stacks(artifacts / "runs", records, observations) if functions else {}
    why = config.suggest.why if config.suggest else None
    # The A/A runs the verdict was computed against, so the certificate stays the same
    # however often the report is rendered; before any analysis, the service's so far.
    history = stored_history(artifacts)
    if history is None:
        history = [i for i in aa_experiments(store, service_name) if i != experiment_id]
    return ExperimentReport(
        experiment_id=experiment_id,
        service=service_name,
        kind="aa" if kind == "aa" else "ab",
        phase=phase,
        failure=failure,
        created_at=_time(created) or datetime.now(tz=UTC),
        started_at=_time(started),
        finished_at=_time(finished),
        design=config.design.schedule,
        trials=_trials(config, phase, int(done or 0), trial_notes),
        trials_done=int(done or 0),
        rate_per_s=rate_per_s or config.load.rate_per_s or 0.0,
        duration_s=config.load.duration_s,
        model=config.analysis.model,
        arms=arm_reports,
        hosts=host_list,
        host_pairs=pairs,
        mode=config.mode_name,
        curves=_capacity_curves(artifacts / "runs", records),
        overlaps=tuple(concurrency.overlaps(store, experiment_id)),
        aa_records=aa_records(store, history, config.analysis.alpha),
        functions=functions,
        functions_note=functions_note,
        flame_stacks=flame_stacks,
        suggested_functions=tuple(
            dict.fromkeys(name for f in (why.functions if why else ()) for name in f.names)
        ),
        trial_ended_at={i: at for i, ended in trial_ends if (at := _time(ended)) is not None},
        analysis=analysis,
        observations=observations,
        html_path=html if html.exists() else None,
        calibration=calibration,
        notes=why_notes(why)
        + host_notes(tuple(hosts.values()), arm_classes=arm_classes)
        + host_pair_notes(analysis, pairs)
        + handover_notes(seats)
        + measurement_notes(records, trial_notes, calibration)
        + load_notes(
            _load_summaries(artifacts / "runs", records), engine_steal_ms=_engine_steal_ms(records)
        ),
    )
