"""hairline attribute end to end on the sample service: a 2x2 factorial (a CPU knob that
moves the body, a stall of 1 request in 100 that moves only the tail) run
through the lab, each factor attributed to the quantiles it moves; a stopped run resumed,
nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from schema_check import check_schema

# The lab's end-to-end checks (no arm alive, no host held, no cgroup left) live beside
# the lab's tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
from test_lab_e2e import assert_nothing_left

pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample-service"
HAIRLINE = Path(sys.executable).with_name("hairline")


def setup(tmp_path: Path) -> Path:
    for name in ("service.toml", "trace.jsonl", "attribute-experiment.toml", "attribute.toml"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    # Shorter batches than the example's, for the suite: 2 s, 600 requests a run. So that the
    # far tail is the stall's in every run, one request in 100 stalls (the example: 1 in 400,
    # 1.5 stalls a run at 2 s, and the hash of the same 600 ids chose 0 to 3 of them: a
    # fresh clone once read the stall's p99.9 lower bound as 441 us) for 20 ms: about 6
    # stalls and the requests queued behind them, 1-2% of a run, so p99.9 (the top 0.6
    # requests of a run) is a stalled request in every "on" run, and the median is not.
    # Three repetitions: with two, the small-cluster correction doubles the intervals.
    experiment = tmp_path / "attribute-experiment.toml"
    experiment.write_text(experiment.read_text().replace("duration_s = 3", "duration_s = 2"))
    factors = tmp_path / "attribute.toml"
    stall = '"--stall-every", "400", "--stall-ms", "10"'
    assert stall in factors.read_text()
    factors.write_text(
        factors.read_text().replace(stall, '"--stall-every", "100", "--stall-ms", "20"')
    )
    return factors


def hairline(*args: str, home: Path, engine: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine)}
    return subprocess.run([str(HAIRLINE), *args, "--home", str(home)], capture_output=True,
                          text=True, timeout=400, env=env)  # fmt: skip


def effects(report: dict, quantile: float) -> dict[str, dict]:
    [found] = [q for q in report["quantiles"] if q["quantile"] == quantile]
    return {e["term"]: e for e in found["effects"]}


def test_each_factor_is_attributed_to_the_quantiles_it_moves(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: under 1e-3: the stall (20 ms on about 6 requests a run and those
    queued behind them) is the far tail of every "on" run, so its p99.9 effect is near 20 ms
    against a lower bound asserted at 1 ms, where a run's tail without stalls moves by a
    few ms at most on this VM; the CPU knob doubles the work (2026-11-27: the median +169 us
    [+82, +273], p90 +635 us [+281, +944]: about 3 half-widths clear of 0, not measured
    over many runs); the median's stall effect is 1/20 of the far one's at most, where
    about 1-2% of requests are delayed (measured: +45 us against +13,071 us)."""
    path = setup(tmp_path)
    out = tmp_path / "run"
    documents = ["--json", str(tmp_path / "a.json"), "--html", str(tmp_path / "a.html")]
    done = hairline("attribute", str(path), "--output", str(out), *documents,
                    home=tmp_path / "home", engine=engine_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "a.json").read_text())
    check_schema("attribution", report)
    assert report == json.loads((out / "report.json").read_text())
    assert report["runs"] == 12 and len(report["experiments"]) == 6

    median, p90, far = effects(report, 0.5), effects(report, 0.9), effects(report, 0.999)
    # The CPU knob (twice the work) moves the median and p90, clear of 0. Not asserted at
    # p99.9: there the stall, in half of the runs, sets the tail, and its jitter is the
    # size of the CPU knob's effect (2026-11-27: cpu at p99.9 +1,924 us [-434, +3,284],
    # the stall +13,071 us [+10,911, +14,702]).
    assert median["cpu"]["low_us"] > 0, median
    assert p90["cpu"]["low_us"] > 0, p90
    # The stall moves p99.9 by milliseconds, and the median by a twentieth of that at most.
    assert far["stall"]["low_us"] > 1000, far
    assert abs(median["stall"]["estimate_us"]) < 0.05 * far["stall"]["estimate_us"], median
    assert report["best"]["levels"] == {"cpu": "0", "stall": "off"}
    assert "p99.9" in (tmp_path / "a.html").read_text()

    # Analysed again from the stored runs, with nothing run: the same effects.
    again = hairline("attribute", str(path), "--output", str(out), "--analyze-only",
                     home=tmp_path / "home", engine=engine_path)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((out / "report.json").read_text())["quantiles"] == report["quantiles"]

    assert_nothing_left(tmp_path / "home")


def test_check_prints_the_plan_and_a_bad_file_names_its_line(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: none: --check reads files and runs nothing."""
    path = setup(tmp_path)
    done = hairline("attribute", str(path), "--check", home=tmp_path / "home", engine=engine_path)
    assert done.returncode == 0, done.stderr
    assert "2 factors, 4 treatments, 12 runs in 6 experiments" in done.stdout
    path.write_text(path.read_text().replace("levels = [0, 1]", "levels = [0]"))
    bad = hairline("attribute", str(path), "--check", home=tmp_path / "home", engine=engine_path)
    assert bad.returncode == 2
    assert "attribute.toml:12: factors.cpu.levels: a factor needs two or more levels" in (
        bad.stdout + bad.stderr
    )
