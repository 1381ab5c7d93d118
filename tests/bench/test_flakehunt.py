"""bench/flakehunt/run.py: its parsers and table as functions, its process handling on tiny
runs, and the script end to end on a two-test file written into tmp_path.

Every pytest it starts here runs with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 and a pytest.ini of
its own beside the tests: plugin loading costs about 2 s a process, and the project's
pyproject.toml (its addopts, its conftest) has nothing to do with these tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchscript import BENCH, load_bench

SCRIPT = BENCH / "flakehunt" / "run.py"

flakehunt = load_bench("flakehunt/run.py")
Run, Result = flakehunt.Run, flakehunt.Result


@pytest.fixture
def quiet_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


def write_tests(tmp_path: Path, source: str) -> Path:
    """tmp_path/t with ``source`` as test_tiny.py and a pytest.ini that makes it the
    rootdir (the runs start in the repository root, whose pyproject.toml would be found)."""
    directory = tmp_path / "t"
    directory.mkdir()
    (directory / "pytest.ini").write_text("[pytest]\n")
    (directory / "test_tiny.py").write_text(source)
    return directory


# --- the durations section ---------------------------------------------------------------

LOG = """\
============================= test session starts ==============================
collected 5 items

tests/lab/test_lab_e2e.py ..F..
0.40s call     this line is output of a test, before the section
=================================== FAILURES ===================================
E   assert 1 == 2
============================= slowest 25 durations =============================
12.34s call     tests/lab/test_lab_e2e.py::test_ab[fast arm]
3.00s setup    tests/lab/test_lab_e2e.py::test_ab[fast arm]
0.50s teardown tests/lab/test_lab_e2e.py::test_ab[fast arm]
8.00s call     tests/lab/test_lab_e2e.py::test_aa[[1, 2]-x]
\x1b[33mstarting the fleet: a service's own output, interleaved\x1b[0m
2.25s call     tests/kraken/test_fleet.py::TestFleet::test_knee
9.75s setup    tests/store/test_pg.py::test_migrate

(14 durations < 0.005s hidden.  Use -vv to show these durations.)
=========================== short test summary info ============================
FAILED tests/lab/test_lab_e2e.py::test_x - assert 1 == 2
99.00s call     tests/after/the_section.py::not_a_duration
=================== 1 failed, 4 passed in 40.12s ===================
"""


def test_the_durations_section_adds_setup_call_and_teardown_per_test():
    assert flakehunt.parse_durations(LOG) == {
        "tests/lab/test_lab_e2e.py::test_ab[fast arm]": pytest.approx(15.84),
        "tests/lab/test_lab_e2e.py::test_aa[[1, 2]-x]": 8.0,
        "tests/kraken/test_fleet.py::TestFleet::test_knee": 2.25,
        # Only its setup is in the top 25, and a run of it pays for the setup too.
        "tests/store/test_pg.py::test_migrate": 9.75,
    }


@pytest.mark.parametrize(
    "nodeid",
    [
        "tests/x.py::test_plain",
        "tests/x.py::test_p[a b]",
        "tests/x.py::test_p[  two leading spaces]",
        "tests/x.py::test_p[[nested]-[1, 2]]",
        "tests/x.py::test_p[a - b|c]",
        "tests/x.py::TestClass::test_p[0.5s call]",
        "tests/dir with space/test_y.py::test_z",
    ],
)
@pytest.mark.parametrize("when", ["setup", "call", "teardown"])
def test_a_node_id_is_the_rest_of_the_line_whatever_it_holds(nodeid, when):
    # As _pytest/runner.py writes it: f"{duration:02.2f}s {when:<8} {nodeid}".
    log = f"{'=' * 10} slowest durations {'=' * 10}\n{1.5:02.2f}s {when:<8} {nodeid}\n"
    assert flakehunt.parse_durations(log) == {nodeid: 1.5}


def test_a_test_in_several_sessions_keeps_its_largest_total():
    one = "=== slowest durations ===\n5.00s call     tests/a.py::t\n1.00s call     tests/b.py::t\n"
    two = (
        "=== slowest 3 durations ===\n2.00s setup    tests/a.py::t\n2.00s call     tests/a.py::t\n"
    )
    # The second log is cut off inside its section: what is there still counts.
    assert flakehunt.parse_durations(one + "=== 2 passed ===\n" + two) == {
        "tests/a.py::t": 5.0,
        "tests/b.py::t": 1.0,
    }


def test_a_log_without_the_section_has_no_durations():
    assert flakehunt.parse_durations("12.34s call     tests/a.py::t\n=== 1 passed ===\n") == {}


def test_the_slowest_come_first_ties_by_node_id_and_n_caps():
    durations = {"b": 2.0, "a": 2.0, "c": 9.0, "d": 0.1}
    assert flakehunt.slowest(durations, 3) == ["c", "a", "b"]
    assert flakehunt.slowest(durations, 25) == ["c", "a", "b", "d"]


# --- outcomes and reasons ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "status", "outcome"),
    [
        (".\n1 passed in 0.01s\n", 0, "passed"),
        ("s\n1 skipped in 0.01s\n", 0, "skipped"),
        ("x\n1 xfailed in 0.01s\n", 0, "passed"),
        # A service the test left running wrote after pytest's summary line.
        ("s\n1 skipped in 0.01s\nservice: shutting down\n", 0, "skipped"),
        ("F\n1 failed in 0.01s\n", 1, "failed"),
        ("", 5, "failed"),
    ],
)
def test_the_outcome_of_a_run(output, status, outcome):
    assert flakehunt.outcome_of(output, status) == outcome


TRACEBACK = """\
F                                                                        [100%]
=================================== FAILURES ===================================
    def test_b():
        print("FAILED to connect - retrying")
>       assert compute() == 3, "the arithmetic | broke down completely, said the test"
E       AssertionError: the arithmetic | broke down completely, said the test
E       assert 2 == 3
----------------------------- Captured stdout call -----------------------------
FAILED to connect - retrying
=========================== short test summary info ============================
"""


@pytest.mark.parametrize(
    ("summary", "nodeid", "reason"),
    [
        # pytest cut the summary at 80 columns: the whole line comes from the traceback.
        (
            "FAILED tests/a.py::test_b - AssertionError: the arithmetic | broke down...",
            "tests/a.py::test_b",
            "AssertionError: the arithmetic | broke down completely, said the test",
        ),
        # Shown relative to where pytest ran, with " - " in the parameter.
        (
            "FAILED ../../tmp/a.py::test_b[x - y] - ValueError: no",
            "/tmp/a.py::test_b[x - y]",
            "ValueError: no",
        ),
        (
            "ERROR tests/a.py::test_b - RuntimeError: no port",
            "tests/a.py::test_b",
            "RuntimeError: no port",
        ),
        # An id so long that pytest left the message out.
        (
            "FAILED tests/a.py::test_" + "b" * 80,
            "tests/a.py::test_" + "b" * 80,
            "AssertionError: the arithmetic | broke down completely, said the test",
        ),
    ],
)
def test_the_reason_comes_from_the_short_summary(summary, nodeid, reason):
    output = f"{TRACEBACK}{summary}\n1 failed in 0.02s\n"
    assert flakehunt.failure_reason(output, 1, nodeid) == reason


@pytest.mark.parametrize(
    ("output", "status", "reason"),
    [
        ("ERROR: not found: /tmp/a.py::nope\n(no match)\n", 4, "ERROR: not found: /tmp/a.py::nope"),
        ("E   ImportError: no module named x\n", 2, "ImportError: no module named x"),
        ("", 3, "exit status 3 (internal error)"),
        ("", 7, "exit status 7"),
        ("", -9, "killed by signal 9"),
    ],
)
def test_without_a_short_summary_the_reason_is_the_error_or_the_status(output, status, reason):
    assert flakehunt.failure_reason(output, status, "tests/a.py::t") == reason


def test_a_long_reason_is_shortened_to_one_line():
    output = "=== short test summary info ===\nFAILED a.py::t - " + "x" * 300 + "\n"
    reason = flakehunt.failure_reason(output, 1, "a.py::t")
    assert len(reason) == flakehunt.REASON_CHARS and reason.endswith("...")


def test_the_tail_is_the_last_lines():
    assert flakehunt.tail("\n".join(str(i) for i in range(100))) == "\n".join(
        str(i) for i in range(70, 100)
    )


# --- the table and the JSON ----------------------------------------------------------------


def results() -> list:
    return [
        Result(
            "tests/lab/test_lab_e2e.py::test_ab[a|b]",
            [
                Run(12.31, "passed"),
                Run(14.0, "failed", "AssertionError: slow arm", "first\ntail"),
                Run(600.0, "timeout", "timeout", "last\ntail"),
            ],
        ),
        Result("tests/store/test_pg.py::test_migrate", [Run(9.75, "skipped")] * 3),
        Result("tests/a.py::test_ok", [Run(1.0, "passed"), Run(1.04, "passed")]),
    ]


def test_the_table_has_a_row_per_test_and_a_total():
    assert flakehunt.render(results()).splitlines() == [
        "| test | failed | seconds per run (*: failed) | first failure |",
        "|---|---|---|---|",
        "| tests/lab/test_lab_e2e.py::test_ab[a\\|b] | 2 of 3 failed | 12.3 14.0* 600.0* "
        "| AssertionError: slow arm |",
        "| tests/store/test_pg.py::test_migrate | 0 of 3 failed (3 skipped) | 9.8 9.8 9.8 |  |",
        "| tests/a.py::test_ok | 0 of 2 failed | 1.0 1.0 |  |",
        "",
        "total: 2 of 8 runs failed, in 1 of 3 tests; 657.6 s of runs",
    ]


def test_an_interrupted_or_empty_hunt_says_so():
    assert flakehunt.total_line([], interrupted=True) == (
        "total: 0 of 0 runs failed, in 0 of 0 tests; 0.0 s of runs"
        " (interrupted: only the runs done)"
    )


def test_the_json_keeps_the_last_failures_tail_and_the_settings():
    report = flakehunt.to_json(
        results(),
        neighbour=True,
        k=3,
        timeout_s=600.0,
        command="python bench/flakehunt/run.py --k 3",
        started_at="2026-01-01T00:00:00+00:00",
    )
    assert json.loads(json.dumps(report)) == report
    first = report["tests"][0]
    assert first == {
        "nodeid": "tests/lab/test_lab_e2e.py::test_ab[a|b]",
        "runs": 3,
        "failed": 2,
        "skipped": 0,
        "seconds": [12.31, 14.0, 600.0],
        "outcomes": ["passed", "failed", "timeout"],
        "first_failure": "AssertionError: slow arm",
        "last_failure_tail": "last\ntail",
    }
    assert report["tests"][2]["last_failure_tail"] == ""
    assert report["tests"][2]["first_failure"] is None
    assert (report["neighbour"], report["n"], report["k"]) == (True, 3, 3)
    assert report["run_command"].endswith("-m pytest -q -p no:cacheprovider '<nodeid>'")


# --- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], ["--quick"]])
def test_as_bench_run_calls_it_there_is_nothing_to_do(argv, capsys):
    # bench/run.py runs every bench/*/run.py with no arguments (or the ones after `--`),
    # and counts any exit status but 0 as a failed benchmark.
    assert flakehunt.main(argv) == 0
    assert capsys.readouterr().out == flakehunt.NOTHING_TO_DO + "\n"


def test_options_without_tests_are_refused_naming_both_sources(capsys):
    with pytest.raises(SystemExit) as exit:
        flakehunt.main(["--k", "3"])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert "--durations-file" in error and "--tests" in error


def test_a_log_without_durations_is_refused(tmp_path, capsys):
    log = tmp_path / "pytest.log"
    log.write_text("=== 3 passed in 1.00s ===\n")
    assert flakehunt.main(["--durations-file", str(log)]) == 2
    assert "no 'slowest durations' section" in capsys.readouterr().err


# --- processes -------------------------------------------------------------------------------


def gone(pid: int, within_s: float = 5.0) -> bool:
    """True once ``pid`` is dead: no more, or a zombie (which only its parent, here maybe a
    slow init, has yet to reap)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            # The state is the field after the ")" that ends the command's name.
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def test_a_run_past_its_timeout_is_killed_and_counts_as_failed(tmp_path, quiet_pytest):
    directory = write_tests(tmp_path, "import time\ndef test_hangs():\n    time.sleep(60)\n")
    started = time.monotonic()
    run = flakehunt.run_once(f"{directory}/test_tiny.py::test_hangs", timeout_s=1.0)
    assert (run.outcome, run.reason, run.failed) == ("timeout", "timeout", True)
    assert 1.0 <= run.seconds <= time.monotonic() - started < 10


def test_what_a_run_left_running_is_killed_when_it_ends(tmp_path, quiet_pytest):
    # Not tried on a timeout, where it would race the test's start: the same kill of the
    # run's process group ends both.
    pid_file = tmp_path / "child.pid"
    directory = write_tests(
        tmp_path,
        "import subprocess, sys\n"
        "def test_leaves_a_child():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    open({str(pid_file)!r}, 'w').write(str(child.pid))\n",
    )
    run = flakehunt.run_once(f"{directory}/test_tiny.py::test_leaves_a_child", timeout_s=60)
    assert run.outcome == "passed", run
    assert gone(int(pid_file.read_text()))


def test_the_neighbour_runs_only_inside_the_block():
    with flakehunt.neighbour(False) as pid:
        assert pid is None
    with flakehunt.neighbour(True) as pid:
        assert pid is not None
        os.kill(pid, 0)  # alive
        assert os.getpgid(pid) == pid  # in a group of its own
    assert gone(pid)


def test_the_neighbour_is_killed_when_the_block_raises():
    with pytest.raises(KeyboardInterrupt), flakehunt.neighbour(True) as pid:
        raise KeyboardInterrupt
    assert gone(pid)


def test_end_to_end_a_passing_and_a_failing_test_run_twice(tmp_path):
    directory = write_tests(
        tmp_path,
        "def test_passes():\n    assert 1 + 1 == 2\n\n"
        "def test_fails():\n    assert 1 + 1 == 3, 'arithmetic broke'\n\n"
        "def test_not_slow_enough():\n    raise AssertionError('never run: not in the top 2')\n",
    )
    passes, fails = (
        f"{directory}/test_tiny.py::test_passes",
        f"{directory}/test_tiny.py::test_fails",
    )
    log = tmp_path / "pytest.log"
    log.write_text(
        "========== slowest durations ==========\n"
        f"3.00s call     {fails}\n"
        f"1.50s call     {passes}\n"
        f"1.00s setup    {passes}\n"
        f"0.90s call     {directory}/test_tiny.py::test_not_slow_enough\n"
    )
    out = tmp_path / "out" / "flakehunt.json"
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    arguments = ["--durations-file", str(log), "--n", "2", "--k", "2", "--json", str(out)]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"| {fails} | 2 of 2 failed |" in result.stdout
    assert "| AssertionError: arithmetic broke |" in result.stdout
    assert f"| {passes} | 0 of 2 failed |" in result.stdout
    assert "total: 2 of 4 runs failed, in 1 of 2 tests;" in result.stdout
    assert "neighbour: none" in result.stdout
    assert "[4/4]" in result.stderr and "run 2/2 ... FAILED" in result.stderr

    report = json.loads(out.read_text())
    assert [t["nodeid"] for t in report["tests"]] == [fails, passes]  # slowest first
    assert [(t["runs"], t["failed"]) for t in report["tests"]] == [(2, 2), (2, 0)]
    assert [len(t["seconds"]) for t in report["tests"]] == [2, 2]
    assert "AssertionError: arithmetic broke" in report["tests"][0]["last_failure_tail"]
    assert len(report["tests"][0]["last_failure_tail"].splitlines()) <= 30
    assert report["tests"][1]["last_failure_tail"] == ""
    assert (report["neighbour"], report["n"], report["k"]) == (False, 2, 2)
    assert report["interrupted"] is False
    assert "--durations-file" in report["command"] and report["started_at"]
