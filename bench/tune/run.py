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

Every evaluation is observed as the true effect plus Gaussian noise whose standard error,
drawn per evaluation from 0.3% to 1%, is what the searcher is told (an A/B's interval).
A run starts from the history the tuning loop gives (the default at 0 with no error) and
proposes ``--evaluations`` configurations in batches of ``--batch``. Regret after k
evaluations = the true value at the optimum minus the true value of the configuration the
searcher would pick from its first k: for bo the told configuration with the highest
posterior mean, for the others the best observed value (``searchers.best``).

Prints the median (IQR) regret in percentage points per objective, searcher and k, and the
rank of each searcher by median regret; ``--json`` prints the same as JSON, ``--out`` writes
it. 100 seeds by default; ``--quick`` is 10.

    .venv/bin/python bench/tune/run.py                     # ~5 minutes
    .venv/bin/python bench/tune/run.py --batch 4 --searchers bo,random
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
    FloatParam,
    IntParam,
    Space,
    Value,
)

OUT_DIR = Path(__file__).resolve().parents[1] / "out"
SEARCHERS = ("bo", "hill", "single", "random", "tpe")
CHECKPOINTS = (5, 10, 20)
SE_RANGE = (0.003, 0.01)


@dataclass(frozen=True)
class Objective:
    name: str
    space: Space
    # The true effect of a configuration before the default's is subtracted.
    raw: Callable[[Mapping[str, Value]], float]
    # The best raw value, found by enumeration (see optimum()).
    best_raw: float

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
    ]


def run_one(objective: Objective, searcher: str, seed: int, evaluations: int, batch: int
            ) -> list[float]:  # fmt: skip
    """Regret (in effect units) after each checkpoint's number of evaluations."""
    space = objective.space
    rng = np.random.default_rng([seed, sum(map(ord, objective.name))])
    history = [Told(dict(space.default), Observation(0.0, 0.0))]
    while len(history) - 1 < evaluations:
        wanted = min(batch, evaluations - (len(history) - 1))
        configs = propose(searcher, space, history, wanted, seed=seed)
        if not configs:
            break
        for config in configs:
            se = float(rng.uniform(*SE_RANGE))
            value = objective.effect(config) + float(rng.normal(0.0, se))
            history.append(Told(config, Observation(value, se)))
    regrets = []
    for k in CHECKPOINTS:
        pick = best(searcher, space, history[: 1 + k], seed=seed)
        assert pick is not None
        regrets.append(objective.top - objective.effect(pick))
    return regrets


def summarise(values: Sequence[float]) -> dict[str, float]:
    q1, median, q3 = np.percentile(np.asarray(values) * 100, [25, 50, 75])
    return {"median_pp": float(median), "q1_pp": float(q1), "q3_pp": float(q3)}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="10 seeds")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--evaluations", type=int, default=max(CHECKPOINTS))
    parser.add_argument("--searchers", default=",".join(SEARCHERS))
    parser.add_argument("--objectives", default="threads,buffer,mixed4")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    seeds = 10 if args.quick else args.seeds
    searchers = args.searchers.split(",")
    chosen = [o for o in objectives() if o.name in args.objectives.split(",")]

    results: dict[str, Any] = {
        "seeds": seeds,
        "batch": args.batch,
        "evaluations": args.evaluations,
        "checkpoints": list(CHECKPOINTS),
        "se_range": list(SE_RANGE),
        "picked_as": {
            s: "best posterior mean" if s == "bo" else "best observed" for s in searchers
        },
        "objectives": {},
    }
    started = time.monotonic()
    for objective in chosen:
        table: dict[str, Any] = {"top_pp": objective.top * 100, "searchers": {}}
        for searcher in searchers:
            t0 = time.monotonic()
            runs = [run_one(objective, searcher, s, args.evaluations, args.batch)
                    for s in range(seeds)]  # fmt: skip
            table["searchers"][searcher] = {
                str(k): summarise([r[i] for r in runs]) for i, k in enumerate(CHECKPOINTS)
            } | {"seconds": time.monotonic() - t0}
            if not args.json:
                print(
                    f"  {objective.name}/{searcher}: {time.monotonic() - t0:.1f} s", file=sys.stderr
                )
        results["objectives"][objective.name] = table
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
        f"{results['batch']}; bo picks its best posterior mean, the others their best "
        "observed value.",
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
    lines.append(f"{results['seconds']:.0f} s; bold: the lowest median at that checkpoint.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
