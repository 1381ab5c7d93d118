#!/usr/bin/env python3
"""The searchers against each other on simulated noisy objectives with known optima.

Each objective is a relative effect against its default configuration (the A/B's
effect, higher better, 0 at the default), with its optimum 2 to 2.2% above the default,
away from the middle of the space, and parameters that interact, over 3 or 4 parameters
mixing integers, log-scaled integers, floats and booleans. The default is a reasonable
configuration, as a production one is: most of the space is worse than it.

- threads: two thread pools of 2 to 11 and an affinity flag, as the HHVM paper's Table 2;
  their best sizes interact; the optimum (8, 4, on) +2.2% over (6, 6, off).
- buffer: a log-scaled batch of 1 to 4,096, a float ratio and a sorted flag, shaped like the
  sample service's knobs: the best batch grows with the ratio (a diagonal ridge the default
  sits on, far from its top) and sorting moves both; the optimum +2.2%.
- mixed4: workers 1 to 32, a log-scaled cache 16 to 65,536 whose best size grows with the
  workers (a ridge again), a float and a flag that is best off (the default has it on);
  the optimum +2.0%.

Two more are the space of examples/sample-service/tune.toml (``--log-batch`` 16 to 2,048
in powers of 2 x ``--log-codec`` none, fast, small; 24 configurations, the default
16/none), with CPU per request as the objective (lower better; the effect is
1 - cost / the default's cost):

- service: the sample service's steady-state cost, a request's own 160 work units plus
  the log's ``flush / N + per_entry x (N - 1) / 2`` (engine/src/sample/log.rs,
  ``expected_units``); its best, 512/small, is 23.2% cheaper than the default, 256/small
  is within 0.6% of it, and the next basin (128/fast) 2.7% off it.
- rough: the measured table of docs/engine.md ("Tunable knobs": CPU per request of one
  run each, on a shared machine) taken as the truth, 2,048 the geometric mean of 1,024 and
  4,096: a bumpier surface whose best (256/small) has no other configuration within 2%.

Every evaluation is observed as the true effect plus Gaussian noise whose standard error,
drawn per evaluation, is what the searcher is told (an A/B's interval): from 0.3% to 1% on
the first three, from 0.15% to 1.1% on the last two (the sample service's real A/Bs in
bench/RESULTS.md, "Autotuning the sample service", had 0.14% to 1.1%). A run starts from
the history the tuning loop gives (the default at 0 with no error) and proposes
``--evaluations`` configurations in batches of ``--batch``.

Every searcher's pick from its first k evaluations is made by one rule, the one a tuning
run reports and deploys: the best observed value (``searchers.best``). The pick is judged
by its true value, which the simulation knows, so the noise that made it look best (the
winner's curse) flatters no one. Regret after k = the optimum's true value minus the
pick's.

Versus the sweep (the service objectives): the exhaustive sweep (grid, all 23
configurations other than the default) and each searcher with a budget of ``--budget``
evaluations run on the same seed; the gap is how much more CPU per request the searcher's
pick costs than the sweep's, both picked by that rule and judged by their true cost (the
issue's goal: within 2%). Printed per searcher: the median, 90th percentile and largest
gap over the seeds and how many seeds are within 2%.

Prints the median (IQR) regret in percentage points per objective, searcher and k, and the
rank of each searcher by median regret, then the gaps to the sweep; ``--json`` prints the
same as JSON, ``--out`` writes it. 100 seeds by default; ``--quick`` is 10.

    .venv/bin/python bench/tune/run.py                     # ~6 minutes
    .venv/bin/python bench/tune/run.py --batch 4 --searchers bo,random
    .venv/bin/python bench/tune/run.py --objectives service,rough --budget 10
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hairline.tune.searchers import Observation, Told, best, propose
from hairline.tune.space import (
    BoolParam,
    ChoiceParam,
    Configuration,
    FloatParam,
    IntParam,
    Space,
    Value,
)

OUT_DIR = Path(__file__).resolve().parents[1] / "out"
SEARCHERS = ("bo", "hill", "single", "random", "tpe")
CHECKPOINTS = (5, 10, 20)
SE_RANGE = (0.003, 0.01)
# The sample service's real A/Bs: intervals of +-0.27 to +-2.2 points at 95%.
SERVICE_SE_RANGE = (0.0015, 0.011)
OBJECTIVES = ("threads", "buffer", "mixed4", "service", "rough")
SWEPT = ("service", "rough")
BUDGET = 10
GOAL_GAP = 0.02


@dataclass(frozen=True)
class Objective:
    name: str
    space: Space
    # The true effect of a configuration before the default's is subtracted.
    raw: Callable[[Mapping[str, Value]], float]
    # The best raw value, found by enumeration (see optimum()).
    best_raw: float
    se_range: tuple[float, float] = SE_RANGE

    def effect(self, config: Mapping[str, Value]) -> float:
        return self.raw(config) - self.raw(self.space.default)

    @property
    def top(self) -> float:
        return self.best_raw - self.raw(self.space.default)


def _threads(c: Mapping[str, Value]) -> float:
    tao, web = float(c["tao"]), float(c["web"])
    return (
        -0.002 * (tao - 8) ** 2
        - 0.0015 * (web - 4) ** 2
        + 0.0005 * (tao - 8) * (web - 4)
        + 0.006 * float(c["affinity"])
    )


def _buffer(c: Mapping[str, Value]) -> float:
    sort = float(c["sorted"])
    ratio = float(c["ratio"])
    # The best batch grows with the ratio (a ridge along the diagonal), one step more when
    # sorted; the default sits on the ridge far from its top.
    off_ridge = math.log2(float(c["batch"])) - (2 + 8 * ratio + sort)
    return 0.006 * sort - 0.003 * off_ridge**2 - 0.08 * (ratio - 0.7) ** 2


def _mixed4(c: Mapping[str, Value]) -> float:
    workers = float(c["workers"])
    off_ridge = math.log2(float(c["cache"])) - (8 + workers / 4)
    return (
        -0.0002 * (workers - 16) ** 2
        - 0.002 * off_ridge**2
        - 0.04 * (float(c["ratio"]) - 0.25) ** 2
        - 0.005 * float(c["prefetch"])
    )


LOG_BATCHES = (16, 32, 64, 128, 256, 512, 1024, 2048)
# engine/src/sample/log.rs: a flush's work units and a buffered entry's (steps / 256).
FLUSH_UNITS = {"none": 1280.0, "fast": 2560.0, "small": 5120.0}
ENTRY_UNITS = {"none": 160 / 256, "fast": 53 / 256, "small": 18 / 256}
OWN_UNITS = 160.0
# docs/engine.md's measured CPU per request (µs), 16 to 1,024 then 2,048 as the geometric
# mean of the measured 1,024 and 4,096.
MEASURED_US = {
    "none": (304, 275, 217, 250, 279, 346, 496, math.sqrt(496 * 1083)),
    "fast": (329, 267, 233, 217, 217, 258, 296, math.sqrt(296 * 513)),
    "small": (479, 342, 263, 233, 208, 229, 229, math.sqrt(229 * 308)),
}
SERVICE_SPACE = Space(
    (IntParam("log_batch", 16, 2048, log=True, levels=LOG_BATCHES),
     ChoiceParam("log_codec", ("none", "fast", "small"))),
    {"log_batch": 16, "log_codec": "none"},
)  # fmt: skip


def service_cost(c: Mapping[str, Value]) -> float:
    """Work units per request at steady state: the request's own and the log's."""
    n, codec = float(c["log_batch"]), str(c["log_codec"])
    return OWN_UNITS + FLUSH_UNITS[codec] / n + ENTRY_UNITS[codec] * (n - 1) / 2


def measured_cost(c: Mapping[str, Value]) -> float:
    return float(MEASURED_US[str(c["log_codec"])][LOG_BATCHES.index(int(c["log_batch"]))])


def cost_objective(name: str, cost: Callable[[Mapping[str, Value]], float]) -> Objective:
    """A lower-is-better cost as the searchers see it: the effect is 1 - cost / default's."""
    default_cost = cost(SERVICE_SPACE.default)

    def raw(c: Mapping[str, Value]) -> float:
        return -cost(c) / default_cost

    top = max(raw(c) for c in SERVICE_SPACE.grid())
    return Objective(name, SERVICE_SPACE, raw, top, SERVICE_SE_RANGE)


def objectives() -> list[Objective]:
    threads = Space(
        (IntParam("tao", 2, 11), IntParam("web", 2, 11), BoolParam("affinity")),
        {"tao": 6, "web": 6, "affinity": False},
    )
    buffer = Space(
        (IntParam("batch", 1, 4096, log=True), FloatParam("ratio", 0.0, 1.0), BoolParam("sorted")),
        {"batch": 16, "ratio": 0.25, "sorted": False},
    )
    mixed4 = Space(
        (
            IntParam("workers", 1, 32),
            IntParam("cache", 16, 65536, log=True),
            FloatParam("ratio", 0.0, 1.0),
            BoolParam("prefetch"),
        ),
        {"workers": 8, "cache": 1024, "ratio": 0.5, "prefetch": True},
    )
    return [
        Objective("threads", threads, _threads, max(_threads(c) for c in threads.grid())),
        # The float terms peak inside their range: the optima are the peaks themselves, on
        # the ridge (integers round onto it to within 1e-6 of a percentage point).
        Objective("buffer", buffer, _buffer, 0.006),
        Objective("mixed4", mixed4, _mixed4, 0.0),
        cost_objective("service", service_cost),
        cost_objective("rough", measured_cost),
    ]


def history_of(objective: Objective, searcher: str, seed: int, evaluations: int, batch: int,
               options: Mapping[str, object] | None = None) -> list[Told]:  # fmt: skip
    """The default and ``evaluations`` configurations the searcher proposed, each told as
    its true effect plus seeded noise."""
    space = objective.space
    rng = np.random.default_rng([seed, sum(map(ord, objective.name))])
    history = [Told(dict(space.default), Observation(0.0, 0.0))]
    while len(history) - 1 < evaluations:
        wanted = min(batch, evaluations - (len(history) - 1))
        configs = propose(searcher, space, history, wanted, seed=seed, options=options)
        if not configs:
            break
        for config in configs:
            se = float(rng.uniform(*objective.se_range))
            value = objective.effect(config) + float(rng.normal(0.0, se))
            history.append(Told(config, Observation(value, se)))
    return history


def pick(history: Sequence[Told]) -> Configuration:
    chosen = best(history)
    assert chosen is not None  # the default is always feasible
    return chosen


def run_one(objective: Objective, searcher: str, seed: int, evaluations: int, batch: int,
            options: Mapping[str, object] | None = None) -> list[float]:  # fmt: skip
    """Regret (in effect units) after each checkpoint's number of evaluations."""
    history = history_of(objective, searcher, seed, evaluations, batch, options)
    return [objective.top - objective.effect(pick(history[: 1 + k])) for k in CHECKPOINTS]


def gap_to_sweep(objective: Objective, searcher: str, seed: int, budget: int,
                 options: Mapping[str, object] | None = None) -> float:  # fmt: skip
    """How much more the searcher's pick costs than the sweep's, by their true costs."""
    size = objective.space.size()
    assert size is not None
    sweep = pick(history_of(objective, "grid", seed, size - 1, 1))
    found = pick(history_of(objective, searcher, seed, budget, 1, options))
    # effect = 1 - cost / default's cost, so cost is proportional to 1 - effect.
    return (1 - objective.effect(found)) / (1 - objective.effect(sweep)) - 1


def summarise(values: Sequence[float]) -> dict[str, float]:
    q1, median, q3 = np.percentile(np.asarray(values) * 100, [25, 50, 75])
    return {"median_pp": float(median), "q1_pp": float(q1), "q3_pp": float(q3)}


def gap_summary(gaps: Sequence[float]) -> dict[str, float]:
    values = np.asarray(gaps) * 100
    median, p90 = np.percentile(values, [50, 90])
    return {
        "median_pct": float(median),
        "p90_pct": float(p90),
        "max_pct": float(values.max()),
        "within_goal": int(np.sum(values <= GOAL_GAP * 100 + 1e-9)),
    }


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="10 seeds")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--evaluations", type=int, default=max(CHECKPOINTS))
    parser.add_argument("--searchers", default=",".join(SEARCHERS))
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    parser.add_argument(
        "--budget", type=int, default=BUDGET, help="evaluations against the sweep's 23"
    )
    parser.add_argument(
        "--bo-initial", type=int, default=None, help="bo's design size (default 2d+1)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    seeds = 10 if args.quick else args.seeds
    searchers = args.searchers.split(",")
    chosen = [o for o in objectives() if o.name in args.objectives.split(",")]
    options: dict[str, dict[str, object]] = {
        "bo": {} if args.bo_initial is None else {"initial": args.bo_initial}
    }

    results: dict[str, Any] = {
        "seeds": seeds,
        "batch": args.batch,
        "evaluations": args.evaluations,
        "checkpoints": list(CHECKPOINTS),
        "se_range": list(SE_RANGE),
        "budget": args.budget,
        "bo_options": options["bo"],
        "picked_as": "best observed, judged by its true value",
        "objectives": {},
        "versus_sweep": {},
    }
    started = time.monotonic()
    for objective in chosen:
        table: dict[str, Any] = {"top_pp": objective.top * 100, "searchers": {}}
        for searcher in searchers:
            t0 = time.monotonic()
            opts = options.get(searcher)
            runs = [run_one(objective, searcher, s, args.evaluations, args.batch, opts)
                    for s in range(seeds)]  # fmt: skip
            table["searchers"][searcher] = {
                str(k): summarise([r[i] for r in runs]) for i, k in enumerate(CHECKPOINTS)
            } | {"seconds": time.monotonic() - t0}
            if not args.json:
                print(
                    f"  {objective.name}/{searcher}: {time.monotonic() - t0:.1f} s", file=sys.stderr
                )
        results["objectives"][objective.name] = table
        if objective.name in SWEPT:
            gaps = {}
            for searcher in searchers:
                opts = options.get(searcher)
                found = [gap_to_sweep(objective, searcher, s, args.budget, opts)
                         for s in range(seeds)]  # fmt: skip
                gaps[searcher] = gap_summary(found)
            results["versus_sweep"][objective.name] = gaps
    results["seconds"] = time.monotonic() - started

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results, searchers))
    return 0


def render(results: Mapping[str, Any], searchers: Sequence[str]) -> str:
    lines = [
        f"Median (IQR) regret in percentage points over {results['seeds']} seeds, batch "
        f"{results['batch']}; every searcher's pick is its best observed value, judged by "
        "its true value.",
        "",
        "| objective (top) | searcher | " + " | ".join(f"after {k}" for k in CHECKPOINTS) + " |",
        "|---|---|" + "---:|" * len(CHECKPOINTS),
    ]
    for name, table in results["objectives"].items():
        ranks = {
            k: min(searchers, key=lambda s, k=k: table["searchers"][s][str(k)]["median_pp"])
            for k in CHECKPOINTS
        }
        for searcher in searchers:
            cells = []
            for k in CHECKPOINTS:
                cell = table["searchers"][searcher][str(k)]
                text = f"{cell['median_pp']:.2f} ({cell['q1_pp']:.2f}-{cell['q3_pp']:.2f})"
                cells.append(f"**{text}**" if ranks[k] == searcher else text)
            lines.append(
                f"| {name} (+{table['top_pp']:.2f}%) | {searcher} | " + " | ".join(cells) + " |"
            )
    lines.append("")
    lines.append("Bold: the lowest median at that checkpoint.")
    if results["versus_sweep"]:
        lines += [
            "",
            f"Versus the sweep (all 23): each searcher with {results['budget']} evaluations; "
            "gap = its pick's true CPU per request over the sweep's pick's, in %.",
            "",
            "| objective | searcher | median | 90th pct | max | seeds within 2% |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for name, gaps in results["versus_sweep"].items():
            for searcher, g in gaps.items():
                lines.append(
                    f"| {name} | {searcher} | {g['median_pct']:+.2f} | {g['p90_pct']:+.2f} | "
                    f"{g['max_pct']:+.2f} | {g['within_goal']} of {results['seeds']} |"
                )
    lines.append("")
    lines.append(f"{results['seconds']:.0f} s.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
