#!/usr/bin/env python3
"""What examples/nginx-config's change costs, measured the long way, outside the lab.

    python bench/lab/change_cost.py                  # 10 rounds of 4 s at 16,000/s
    python bench/lab/change_cost.py --rate 8000 --rounds 6
    python bench/lab/change_cost.py --candidate candidate-quarter   # the smaller change

Builds both arms of the example, then alternates them (A B, B A, ...) alone on CPU 1 while
the engine runs on CPU 0, each warmed for 1 s and measured for 4 s: CPU per request from
the arm's cgroup over the responses. Nothing shares the arm's CPU, so this is the change's
own cost; the lab's fully balanced trials on a 2-CPU machine also put each arm once beside
the engine. Prints both arms' values per round, the ratio of means and the median of the
per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hairline import engine
from hairline.arms.local import ArmSpec, LocalArm, free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nginx-config"


def build(folder: Path, arm_config: str) -> Path:
    shutil.copytree(EXAMPLE, folder)
    env = {**os.environ, "ARM_CONFIG": arm_config}
    subprocess.run(["sh", "build.sh"], cwd=folder, env=env, check=True, capture_output=True)
    return folder / "out"


def cost_ns(artifact: Path, workdir: Path, rate: float) -> float:
    port = free_port()
    spec = ArmSpec(name="arm", command=["sh", str(artifact / "start.sh"), str(port), str(workdir)])
    with LocalArm(spec, port=port, cpus=[1], cgroup=f"hl-bench-cost-{port}").start() as arm:
        trace = EXAMPLE / "trace.jsonl"
        engine.measure(targets={"arm": arm.url}, trace=trace, rate_per_s=rate, duration_s=1,
                       cpus=[0])  # fmt: skip
        before = arm.cpu_ns()
        result = engine.measure(targets={"arm": arm.url}, trace=trace, rate_per_s=rate,
                                duration_s=4, cpus=[0])  # fmt: skip
        return (arm.cpu_ns() - before) / result.targets["arm"].requests


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=16_000.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--candidate", default="candidate", help="B's lines: CANDIDATE.conf in the example"
    )
    args = parser.parse_args(argv)
    if os.cpu_count() is None or os.cpu_count() < 2:  # type: ignore[operator]
        print("needs two CPUs: the engine on CPU 0, the arm on CPU 1")
        return 1
    with tempfile.TemporaryDirectory(prefix="hairline-bench-cost-") as tmp:
        root = Path(tmp)
        if not (EXAMPLE / f"{args.candidate}.conf").is_file():
            print(f"--candidate {args.candidate}: no {EXAMPLE / args.candidate}.conf")
            return 2
        artifacts = {
            "A": build(root / "A", "baseline"),
            "B": build(root / "B", args.candidate),
        }
        values: dict[str, list[float]] = {"A": [], "B": []}
        for i in range(args.rounds):
            for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                values[name].append(cost_ns(artifacts[name], root / f"run-{name}-{i}", args.rate))
            print(f"round {i + 1}: A {values['A'][-1]:,.0f} ns, B {values['B'][-1]:,.0f} ns",
                  flush=True)  # fmt: skip
    a, b = values["A"], values["B"]
    ratios = [y / x - 1 for x, y in zip(a, b, strict=True)]
    print(
        f"at {args.rate:g}/s: B ({args.candidate}) costs "
        f"{statistics.mean(b) / statistics.mean(a) - 1:+.1%} "
        f"(ratio of means), {statistics.median(ratios):+.1%} (median of {len(ratios)} rounds)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
