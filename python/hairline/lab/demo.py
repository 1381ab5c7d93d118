"""``hairline demo``: catch a small CPU regression in the bundled sample service.

Arm A is the sample service as it is; arm B is the same binary with ``--regress-cpu``
(every request does that fraction more work). Each arm gets its own CPU of this machine;
the fully balanced design swaps them between the two batches of every trial, and the
engine replays the bundled trace to both in lockstep. The analysis is the one
``hairline analyze`` runs, on the observations the run wrote.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from hairline import engine
from hairline.arms.local import ArmSpec
from hairline.config import MetricPolicy, Threshold
from hairline.errors import HairlineError
from hairline.lab.analysis import Analysis, AnalysisOptions, analyze
from hairline.lab.runner import ArmDef, Progress, RunPlan, run_trials
from hairline.store.observations import read_observations, write_observations

__all__ = ["DemoResult", "demo_plan", "run_demo"]

DEMO_POLICIES = {
    "cpu_ns_per_request": MetricPolicy(Threshold(0.01, relative=True)),
    "anon_memory_bytes": MetricPolicy(Threshold(0.02, relative=True)),
    "latency_us": MetricPolicy(Threshold(0.05, relative=True)),
    "latency_p50_us": MetricPolicy(Threshold(0.05, relative=True)),
    "latency_p99_us": MetricPolicy(Threshold(0.10, relative=True)),
    "throughput_per_s": MetricPolicy(Threshold(0.01, relative=True), "lower-is-worse"),
    "error_rate": MetricPolicy(Threshold(0.001, relative=False)),
}


@dataclass(frozen=True)
class DemoResult:
    analysis: Analysis
    observations: Path
    workdir: Path
    caught: bool


def _repo_file(*parts: str) -> Path:
    here = Path(__file__).resolve()
    for root in here.parents:
        candidate = root.joinpath(*parts)
        if candidate.exists():
            return candidate
    raise HairlineError(
        f"cannot find {'/'.join(parts)}",
        hint="run the demo from a checkout of hairline (make demo)",
    )


def _hosts() -> tuple[tuple[int, ...], ...]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise HairlineError(
            "the demo needs at least 2 CPUs, one per arm",
            hint="run it on a machine (or CPU set) with two or more cores",
        )
    half = len(cpus) // 2
    return (tuple(cpus[:half]), tuple(cpus[half : 2 * half]))


def demo_plan(
    workdir: Path,
    *,
    regress_cpu: float = 0.05,
    trials: int = 7,
    duration_s: float = 6.0,
    rate_per_s: float = 400.0,
) -> RunPlan:
    binary = str(engine.find_engine())

    def arm(name: str, *extra: str) -> ArmDef:
        def spec(port: int, cpus: tuple[int, ...]) -> ArmSpec:
            return ArmSpec(
                name=name,
                command=[binary, "sample-service", "--port", str(port), "--warmup-s", "1", *extra],
                health_path="/healthz",
            )

        return ArmDef(name=name, spec=spec, warm_path="/warm", metrics_path="/metrics")

    return RunPlan(
        arms=(arm("A"), arm("B", "--regress-cpu", f"{regress_cpu:g}")),
        hosts=_hosts(),
        trace=_repo_file("examples", "sample-service", "trace.jsonl"),
        rate_per_s=rate_per_s,
        duration_s=duration_s,
        warmup_rate_per_s=rate_per_s,
        warmup_duration_s=1.5,
        trials=trials,
        design="fully-balanced",
        workdir=workdir,
        counters=("sample_downstream_reads_total",),
    )


def run_demo(
    root: Path,
    *,
    regress_cpu: float = 0.05,
    progress: Progress | None = None,
    **plan_options: float,
) -> DemoResult:
    workdir = root / time.strftime("demo-%Y%m%d-%H%M%S")
    plan = demo_plan(workdir, regress_cpu=regress_cpu, **plan_options)  # type: ignore[arg-type]
    table = run_trials(plan, progress=progress)
    path = write_observations(workdir / "observations.parquet", table)
    result = analyze(
        read_observations(path),
        AnalysisOptions(policies=DEMO_POLICIES, default_policy=MetricPolicy()),
    )
    caught = any(
        r.metric == "cpu_ns_per_request" and r.verdict.label == "regression" for r in result.results
    )
    return DemoResult(analysis=result, observations=path, workdir=workdir, caught=caught)
