"""The benchmark runners (bench/run.py, bench/stats/run.py) on tiny fake benchmarks.

The runners are copied into a temporary tree beside fake scripts, so no real benchmark runs:
each fake appends its name and arguments to a log and exits as told.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def fake(path: Path, *, exit_with: str = "sys.exit(0)") -> None:
    """A benchmark that logs ``name arg ...`` to log.txt beside the tree, then exits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        f"log = Path({str(path.parents[2] / 'log.txt')!r})\n"
        "with log.open('a') as f:\n"
        f"    f.write(' '.join([{path.stem!r} if {path.stem!r} != 'run' else "
        f"{path.parent.name!r}, *sys.argv[1:]]) + '\\n')\n"
        f"{exit_with}\n"
    )


def tree(tmp_path: Path) -> Path:
    """tmp/bench with the real runners and nothing else."""
    bench = tmp_path / "tree" / "bench"
    (bench / "stats").mkdir(parents=True)
    for script in BENCH.glob("*.py"):
        shutil.copy(script, bench / script.name)
    shutil.copy(BENCH / "stats" / "run.py", bench / "stats" / "run.py")
    return bench


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=60
    )


def logged(bench: Path) -> list[str]:
    log = bench.parent / "log.txt"
    return log.read_text().splitlines() if log.exists() else []


def test_a_benchmark_that_calls_sys_exit_does_not_end_the_stats_run(tmp_path):
    bench = tree(tmp_path)
    # The real bootstrap_bench.py ends with sys.exit(main(...)), which returns 0.
    fake(bench / "stats" / "bootstrap_bench.py", exit_with="sys.exit(0)")
    fake(bench / "stats" / "power_bench.py", exit_with="pass")

    result = run(bench / "stats" / "run.py", "--quick")

    assert result.returncode == 0, result.stdout + result.stderr
    assert logged(bench) == ["bootstrap_bench --quick", "power_bench --quick"]


def test_any_failure_fails_the_run_and_the_rest_still_run(tmp_path):
    bench = tree(tmp_path)
    fake(bench / "stats" / "bootstrap_bench.py", exit_with="raise SystemExit(3)")
    fake(bench / "stats" / "power_bench.py", exit_with="raise RuntimeError('boom')")

    result = run(bench / "stats" / "run.py")

    assert result.returncode == 1
    assert logged(bench) == ["bootstrap_bench", "power_bench"]
    assert "bootstrap_bench (exit status 3)" in result.stdout
    assert "power_bench (exit status 1)" in result.stdout


def test_the_top_runner_runs_each_suite_in_its_own_process_with_the_arguments(tmp_path):
    bench = tree(tmp_path)
    fake(bench / "engine" / "run.py", exit_with="sys.exit(0)")
    fake(bench / "record" / "run.py", exit_with="sys.exit(5)")
    fake(bench / "stats" / "bootstrap_bench.py")
    fake(bench / "stats" / "power_bench.py")

    result = run(bench / "run.py", "--", "--quick", "--out", "x.json")

    assert result.returncode == 1
    assert "record (exit status 5)" in result.stdout
    # The stats suite's own runner passes the arguments on to each of its benchmarks.
    assert logged(bench) == [
        "engine --quick --out x.json",
        "record --quick --out x.json",
        "bootstrap_bench --quick --out x.json",
        "power_bench --quick --out x.json",
    ]


def test_names_choose_suites_and_an_unknown_name_is_refused(tmp_path):
    bench = tree(tmp_path)
    fake(bench / "engine" / "run.py")
    fake(bench / "record" / "run.py")

    assert run(bench / "run.py", "record").returncode == 0
    assert logged(bench) == ["record"]

    result = run(bench / "run.py", "recrod")
    assert result.returncode == 2
    assert "no benchmark named recrod (have: engine, record, stats)" in result.stdout
