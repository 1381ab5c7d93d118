#!/usr/bin/env python3
"""Flake hunt: the N slowest end-to-end tests, each run K times, every run in a fresh
``python -m pytest -q -p no:cacheprovider <nodeid>`` process, and how often each failed.

    .venv/bin/python -m pytest -q tests --durations=0 2>&1 | tee durations.log
    .venv/bin/python bench/flakehunt/run.py --durations-file durations.log       # 25 x 5
    .venv/bin/python bench/flakehunt/run.py --durations-file durations.log --n 10 --k 20 \\
        --neighbour --json bench/out/flakehunt.json
    .venv/bin/python bench/flakehunt/run.py --tests 'tests/lab/test_lab_e2e.py::test_x[a]' --k 3

Which tests: ``--durations-file FILE`` takes a pytest log with a ``slowest durations``
section (from ``--durations=0``, or the ``--durations=25`` pyproject.toml adds to every
run), adds up each test's setup, call and teardown, and hunts the ``--n`` (default 25)
slowest; ``--tests NODEID ...`` names them instead. One of the two is required; called with
neither and no other option (as ``bench/run.py`` calls every benchmark) it says there is
nothing to do and exits 0, because a hunt takes hours and the runner counts any other exit
status as a failed benchmark. ``--quick`` (which ``bench/run.py -- --quick`` passes to every
benchmark) makes the defaults 5 tests and 2 runs each.

Every run starts in the repository root, so node ids are relative to it, as pytest prints
them, and in a process group of its own: a run that exceeds ``--timeout-s`` (default 600)
is killed with everything it started and counts as failed, reason "timeout"; anything a run
leaves behind is killed when it ends, so it cannot slow the runs after it.

``--neighbour`` starts, for the whole hunt, a process that burns half of one CPU (5 ms busy,
5 ms asleep): a loaded machine's timing, where flakes that depend on it show up. It is
killed at the end, also on Ctrl-C or SIGTERM, and stops by itself if the hunt is killed.

Prints a header, progress on stderr (``[3/125] tests/x.py::t run 2/5 ... ok 12.3 s``), then
a table: per test, ``F of K failed``, the wall time of each run (``*``: failed) and the
first failure's short reason, and a total line. ``--json FILE`` (``-`` for stdout, and then
the header and table go to stderr) also writes::

    {"tests": [{"nodeid", "runs", "failed", "skipped", "seconds": [...], "outcomes": [...],
                "first_failure", "last_failure_tail"}],
     "neighbour", "n", "k", "timeout_s", "command", "run_command", "started_at",
     "interrupted"}

``n`` is how many tests were hunted, ``last_failure_tail`` the last 30 lines of output of
the test's last failed run ("" if none). Exits 1 if any run failed, 130 when interrupted
(after reporting the runs done), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUN_COMMAND = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")
TAIL_LINES = 30
REASON_CHARS = 100
NOTHING_TO_DO = "flakehunt: nothing to do without --durations-file or --tests"
# How often a run's end is polled for: small next to any test's seconds, and a wake-up
# every 10 ms costs nothing measurable on the CPU the tests use.
POLL_S = 0.01

# The neighbour: 5 ms of busy loop, 5 ms of sleep, until killed. It watches its parent so
# that a hunt killed with SIGKILL, where no cleanup of ours runs, does not leave it burning.
NEIGHBOUR_CODE = """\
import os, sys, time
parent = int(sys.argv[1])
while os.getppid() == parent:
    busy_until = time.perf_counter() + 0.005
    while time.perf_counter() < busy_until:
        pass
    time.sleep(0.005)
"""

# The lines of pytest's --durations section ("12.34s call     tests/x.py::t[a b]", see
# _pytest/runner.py), and the separator lines that open and close sections.
_SECTION = re.compile(r"^=+ slowest (?:\d+ )?durations =+$")
_SEPARATOR = re.compile(r"^=+( .* =+)?$")
_SHORT_SUMMARY = re.compile(r"^=+ short test summary info =+$")
_DURATION = re.compile(
    r"^\s*(?P<seconds>\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(?P<nodeid>\S.*)$"
)
# Logs of a coloured terminal carry escape codes that would hide the separators.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# pytest's summary line, e.g. "1 passed, 2 skipped in 0.12s", and the counts in it.
_SUMMARY = re.compile(r"\b\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b.* in ")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)\b")
# pytest's exit statuses other than 1 (tests failed), for a run that printed no reason.
_EXIT_STATUS = {
    2: "interrupted",
    3: "internal error",
    4: "usage error",
    5: "no tests collected",
}


@dataclass(frozen=True)
class Run:
    """One run of one test."""

    seconds: float
    outcome: str  # "passed", "skipped", "failed" or "timeout"
    reason: str = ""  # why it failed, one line
    tail: str = ""  # the last TAIL_LINES lines of its output, kept for failed runs only

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "timeout")


@dataclass
class Result:
    """All runs of one test."""

    nodeid: str
    runs: list[Run] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(run.failed for run in self.runs)

    @property
    def skipped(self) -> int:
        return sum(run.outcome == "skipped" for run in self.runs)

    @property
    def first_failure(self) -> str | None:
        return next((run.reason for run in self.runs if run.failed), None)

    @property
    def last_failure_tail(self) -> str:
        return next((run.tail for run in reversed(self.runs) if run.failed), "")


# --- pure functions: parsing pytest's output and building the report ---------------------


def parse_durations(text: str) -> dict[str, float]:
    """Seconds per node id in the ``slowest durations`` sections of a pytest log: setup,
    call and teardown added up, as a run of the test alone pays for all three.

    A log of several pytest sessions has several sections; a test in more than one keeps
    its largest total, so a test listed twice is not counted as twice as slow.
    """
    slowest: dict[str, float] = {}
    section: dict[str, float] | None = None
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if _SECTION.match(line):
            section = {}
            continue
        if section is None:
            continue
        if _SEPARATOR.match(line):
            _merge_max(slowest, section)
            section = None
            continue
        # Other lines (the "(12 durations < 0.005s hidden ...)" note, output of services
        # that were still shutting down) are skipped rather than ending the section.
        match = _DURATION.match(line)
        if match:
            nodeid = match["nodeid"]
            section[nodeid] = section.get(nodeid, 0.0) + float(match["seconds"])
    if section is not None:  # a log cut off inside the section
        _merge_max(slowest, section)
    return slowest


def _merge_max(into: dict[str, float], section: Mapping[str, float]) -> None:
    for nodeid, seconds in section.items():
        into[nodeid] = max(into.get(nodeid, 0.0), seconds)


def slowest(durations: Mapping[str, float], n: int) -> list[str]:
    """The ``n`` slowest node ids, slowest first; ties in node id order, so that the same
    log always picks the same tests."""
    return sorted(durations, key=lambda nodeid: (-durations[nodeid], nodeid))[:n]


def outcome_of(output: str, status: int) -> str:
    """The outcome of a run of one test that exited with ``status``: "passed", "skipped"
    (and nothing passed) or "failed"."""
    if status != 0:
        return "failed"
    counts = {word: int(number) for number, word in _COUNT.findall(_summary_line(output))}
    # A test that skipped every time was never hunted: say so instead of "0 failed".
    if counts.get("skipped") and not counts.get("passed") and not counts.get("xpassed"):
        return "skipped"
    return "passed"


def _summary_line(output: str) -> str:
    # The last such line rather than the last line: a process the test left running may
    # still have written to the output after pytest's summary.
    lines = (_ANSI.sub("", line) for line in reversed(output.splitlines()))
    return next((line for line in lines if _SUMMARY.search(line)), "")


def failure_reason(output: str, status: int, nodeid: str) -> str:
    """A failed run's reason in one line: from pytest's short summary ("FAILED <id> -
    <reason>") when there is one, else the first line of the error, else the exit status."""
    lines = [_ANSI.sub("", line).rstrip() for line in output.splitlines()]
    # The "E   ..." lines of the tracebacks: the exception's message, whole.
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    # Only the short summary's lines: a test's captured output, shown above it, may have a
    # line of its own that starts with "FAILED ".
    summary = [i for i, line in enumerate(lines) if _SHORT_SUMMARY.match(line)]
    for line in lines[summary[-1] + 1 :] if summary else []:
        word, space, rest = line.partition(" ")
        if word not in ("FAILED", "ERROR") or not space:
            continue
        reason = _summary_reason(rest, nodeid)
        if reason is None:  # the id filled the line and pytest left the message out
            return _shorten(errors[0] if errors else line)
        if reason.endswith("..."):
            # pytest cuts the summary to the terminal's width (80 columns when it writes to
            # a file): the traceback's line it was cut from is whole.
            reason = next((error for error in errors if error.startswith(reason[:-3])), reason)
        return _shorten(reason)
    for line in lines:
        if line.startswith("ERROR:"):  # "ERROR: not found: ...", a usage error
            return _shorten(line)
    if errors:
        return _shorten(errors[0])
    if status < 0:
        return f"killed by signal {-status}"
    return f"exit status {status}" + (
        f" ({_EXIT_STATUS[status]})" if status in _EXIT_STATUS else ""
    )


def _summary_reason(rest: str, nodeid: str) -> str | None:
    """The reason in a short summary line ``rest`` ("<id> - <reason>"), None if none.

    pytest shows the id relative to the directory it ran in, so it is found by its part
    after the file; and as a parameter may itself hold " - ", the first " - " is the last
    resort.
    """
    in_file = nodeid.partition("::")[2]
    marker = f"::{in_file} - "
    if in_file and marker in rest:
        return rest.split(marker, 1)[1]
    _, dash, reason = rest.partition(" - ")
    return reason if dash else None


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def tail(output: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(output.splitlines()[-lines:])


def render(results: Sequence[Result], *, interrupted: bool = False) -> str:
    """The table, one row per test, and a total line."""
    rows = [
        "| test | failed | seconds per run (*: failed) | first failure |",
        "|---|---|---|---|",
    ]
    for result in results:
        counts = f"{result.failed} of {len(result.runs)} failed"
        if result.skipped:
            counts += f" ({result.skipped} skipped)"
        seconds = " ".join(
            f"{run.seconds:.1f}" + ("*" if run.failed else "") for run in result.runs
        )
        reason = result.first_failure or ""
        rows.append(f"| {_cell(result.nodeid)} | {counts} | {seconds} | {_cell(reason)} |")
    rows.append("")
    rows.append(total_line(results, interrupted=interrupted))
    return "\n".join(rows)


def total_line(results: Sequence[Result], *, interrupted: bool = False) -> str:
    runs = sum(len(result.runs) for result in results)
    failed = sum(result.failed for result in results)
    flaky = sum(1 for result in results if result.failed)
    seconds = sum(run.seconds for result in results for run in result.runs)
    line = (
        f"total: {failed} of {runs} runs failed, in {flaky} of {len(results)} tests; "
        f"{seconds:.1f} s of runs"
    )
    return line + (" (interrupted: only the runs done)" if interrupted else "")


def _cell(text: str) -> str:
    # A "|" in a parameter or a message would split the markdown cell.
    return text.replace("|", "\\|")


def to_json(
    results: Sequence[Result],
    *,
    neighbour: bool,
    k: int,
    timeout_s: float,
    command: str,
    started_at: str,
    interrupted: bool = False,
) -> dict[str, Any]:
    return {
        "tests": [
            {
                "nodeid": result.nodeid,
                "runs": len(result.runs),
                "failed": result.failed,
                "skipped": result.skipped,
                "seconds": [round(run.seconds, 3) for run in result.runs],
                "outcomes": [run.outcome for run in result.runs],
                "first_failure": result.first_failure,
                "last_failure_tail": result.last_failure_tail,
            }
            for result in results
        ],
        "neighbour": neighbour,
        "n": len(results),
        "k": k,
        "timeout_s": timeout_s,
        "command": command,
        "run_command": shlex.join([Path(RUN_COMMAND[0]).name, *RUN_COMMAND[1:], "<nodeid>"]),
        "started_at": started_at,
        "interrupted": interrupted,
    }


# --- processes ---------------------------------------------------------------------------


def run_once(nodeid: str, timeout_s: float) -> Run:
    """One run of ``nodeid`` in a fresh pytest process in a process group of its own."""
    # Output goes to a file, not a pipe: a process the test started and left running would
    # hold a pipe open, and reading it would wait for that process instead of the run.
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [*RUN_COMMAND, nodeid],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        try:
            exited = _wait_unreaped(proc.pid, timeout_s)
            seconds = time.perf_counter() - started
        finally:
            # Also on Ctrl-C: the run is in its own group, so the terminal's SIGINT never
            # reached it, and nothing else would end it.
            _kill_group(proc)
        log.seek(0)
        output = log.read().decode("utf-8", errors="replace")
    if not exited:
        return Run(seconds, "timeout", "timeout", tail(output))
    outcome = outcome_of(output, proc.returncode)
    if outcome != "failed":
        return Run(seconds, outcome)
    return Run(seconds, outcome, failure_reason(output, proc.returncode, nodeid), tail(output))


def _wait_unreaped(pid: int, timeout_s: float) -> bool:
    """Waits for ``pid`` to exit but leaves it unreaped; False if ``timeout_s`` passed.

    An exited but unreaped leader keeps its pid, and so its group's id, from being reused:
    the killpg after it cannot reach a stranger's processes.
    """
    deadline = time.monotonic() + timeout_s
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kills the process group led by ``proc`` (run with ``process_group=0``), then reaps
    ``proc``. Before the reaping, so the group's id is still ours."""
    # No such group only if ``proc`` was reaped already and left nothing behind.
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextmanager
def neighbour(enabled: bool) -> Iterator[int | None]:
    """A process burning half of one CPU while the block runs; yields its pid (or None)."""
    if not enabled:
        yield None
        return
    proc = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOUR_CODE, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        process_group=0,  # its own group: the terminal's Ctrl-C is ours to handle, not its
    )
    try:
        yield proc.pid
    finally:
        _kill_group(proc)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI's timeout, ``kill``) would end Python without running ``finally``,
    leaving the neighbour and the current run alive: handle it like Ctrl-C instead."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def hunt(nodeids: Sequence[str], k: int, timeout_s: float, results: list[Result]) -> None:
    """Runs each test ``k`` times, appending to ``results`` as it goes, so that what was done
    before a Ctrl-C can still be reported."""
    total = len(nodeids) * k
    done = 0
    for nodeid in nodeids:
        result = Result(nodeid)
        results.append(result)
        for i in range(1, k + 1):
            done += 1
            print(
                f"[{done}/{total}] {nodeid} run {i}/{k} ... ", end="", file=sys.stderr, flush=True
            )
            run = run_once(nodeid, timeout_s)
            result.runs.append(run)
            verdict = {"passed": "ok", "skipped": "skipped"}.get(run.outcome, "FAILED")
            note = f" ({run.reason})" if run.failed else ""
            print(f"{verdict} {run.seconds:.1f} s{note}", file=sys.stderr, flush=True)


# --- command line ------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/flakehunt/run.py",
        description="Runs the slowest tests K times each, each run in a fresh pytest process.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--durations-file",
        type=Path,
        metavar="FILE",
        help="a pytest log with a 'slowest durations' section: hunt its N slowest tests",
    )
    source.add_argument("--tests", nargs="+", metavar="NODEID", help="hunt these tests")
    parser.add_argument("--n", type=_positive_int, help="how many tests (default 25; 5 quick)")
    parser.add_argument("--k", type=_positive_int, help="runs per test (default 5; 2 quick)")
    parser.add_argument("--quick", action="store_true", help="5 tests, 2 runs each")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="kill a run after this long; it counts as failed (default 600)",
    )
    parser.add_argument(
        "--neighbour", action="store_true", help="burn half of one CPU during the hunt"
    )
    parser.add_argument(
        "--json", metavar="FILE", help="also write the results as JSON ('-': stdout)"
    )
    args = parser.parse_args(argv)
    if args.timeout_s <= 0:
        parser.error("--timeout-s must be above 0")
    if args.durations_file is None and args.tests is None:
        if all(arg == "--quick" for arg in argv):
            return args  # main says there is nothing to do: bench/run.py calls us like this
        parser.error("say which tests: --durations-file FILE or --tests NODEID ...")
    args.n = args.n or (5 if args.quick else 25)
    args.k = args.k or (2 if args.quick else 5)
    return args


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.durations_file is None and args.tests is None:
        print(NOTHING_TO_DO)
        return 0
    if args.tests is not None:
        nodeids = list(dict.fromkeys(args.tests))  # a test named twice is hunted once
        origin = "from --tests"
    else:
        try:
            text = args.durations_file.read_text(errors="replace")
        except OSError as err:
            print(f"flakehunt: cannot read {args.durations_file}: {err}", file=sys.stderr)
            return 2
        durations = parse_durations(text)
        if not durations:
            print(
                f"flakehunt: no 'slowest durations' section in {args.durations_file} "
                "(run pytest with --durations=0)",
                file=sys.stderr,
            )
            return 2
        nodeids = slowest(durations, args.n)
        origin = f"the slowest in {args.durations_file}"

    # With --json -, stdout is for the JSON alone.
    out = sys.stderr if args.json == "-" else sys.stdout
    command = shlex.join([Path(sys.executable).name, sys.argv[0], *argv])
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    results: list[Result] = []
    interrupted = False
    print(
        f"flakehunt: {len(nodeids)} tests ({origin}), {args.k} run{'s' if args.k > 1 else ''} "
        f"of each, every run in a fresh pytest process, at most {args.timeout_s:g} s per run",
        file=out,
        flush=True,
    )
    try:
        with sigterm_as_interrupt(), neighbour(args.neighbour) as pid:
            if pid is None:
                print("neighbour: none", file=out, flush=True)
            else:
                print(
                    f"neighbour: pid {pid} burns half of one CPU (5 ms busy, 5 ms asleep) "
                    "for the whole hunt",
                    file=out,
                    flush=True,
                )
            hunt(nodeids, args.k, args.timeout_s, results)
    except KeyboardInterrupt:
        interrupted = True
        print("\nflakehunt: interrupted", file=sys.stderr, flush=True)
    # A test interrupted before its first run has nothing to report.
    results = [result for result in results if result.runs]

    print("", file=out)
    print(render(results, interrupted=interrupted), file=out, flush=True)
    if args.json is not None:
        report = to_json(
            results,
            neighbour=args.neighbour,
            k=args.k,
            timeout_s=args.timeout_s,
            command=command,
            started_at=started_at,
            interrupted=interrupted,
        )
        text = json.dumps(report, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            path = Path(args.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if interrupted:
        return 130
    return 1 if any(result.failed for result in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
