"""Context switches per request, read from a real process's threads in procfs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from arm_probes import Child

from hairline.collect.metric import Measured
from hairline.collect.registry import OPTIONAL
from hairline.collect.switches import CONTEXT_SWITCHES, INVOLUNTARY, VOLUNTARY, thread_switches
from hairline.config import load_experiment

# Blocks 1,000 times before the window (which must not count), then, inside it, 200 times
# on its main thread and 100 on a thread born in the window that lives past its end.
SLEEPER = """
import sys, threading, time
for _ in range(1000):
    time.sleep(0.0002)
print("ready", flush=True)
sys.stdin.readline()
slept, finish = threading.Event(), threading.Event()
def born_in_the_window():
    for _ in range(100):
        time.sleep(0.0002)
    slept.set()
    finish.wait()
thread = threading.Thread(target=born_in_the_window)
thread.start()
for _ in range(200):
    time.sleep(0.0002)
slept.wait()
print("done", flush=True)
sys.stdin.readline()
finish.set()
thread.join()
"""


def served(requests: int) -> Measured:
    return Measured(
        requests=requests, errors=0, latency_p50_us=0.0, latency_p99_us=0.0, cpu_ns=0,
        duration_s=1.0,
    )  # fmt: skip


def test_a_process_that_blocks_300_times_in_the_window_switches_3_times_per_request() -> None:
    """False failure: below 1 in 10,000. Each ``time.sleep`` blocks in the kernel, one
    voluntary switch, so the window holds at least the 300 sleeps of its two threads; the
    1,000 before it are subtracted, and the extra switches of two threads handing over the
    GIL would have to pass 700 to break the upper bound (a few dozen were seen here)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == b"ready"
        window = CONTEXT_SWITCHES.window({"A": Child(proc.pid)})
        with window:
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == b"done"
        values = window.values("A", served(100))
        proc.stdin.write(b"end\n")
        proc.stdin.flush()
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()

    assert set(values) == {VOLUNTARY.name, INVOLUNTARY.name}
    assert 3.0 <= values[VOLUNTARY.name] < 10.0
    assert values[INVOLUNTARY.name] >= 0.0


def test_an_arm_without_processes_to_read_has_no_values() -> None:
    """A Ray arm's processes are on its node (``pids()`` is empty here): no rows, not 0."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    window = CONTEXT_SWITCHES.window({"A": Child(gone.pid)})
    with window:
        pass
    assert window.values("A", served(100)) == {}


def test_thread_switches_reads_every_thread_and_skips_what_is_gone(tmp_path: Path) -> None:
    def thread(pid: int, tid: int, voluntary: int, involuntary: int) -> None:
        status = tmp_path / str(pid) / "task" / str(tid) / "status"
        status.parent.mkdir(parents=True)
        status.write_text(
            f"Name:\tsvc\nvoluntary_ctxt_switches:\t{voluntary}\n"
            f"nonvoluntary_ctxt_switches:\t{involuntary}\n"
        )

    thread(10, 10, 5, 1)
    thread(10, 11, 7, 2)
    thread(20, 20, 3, 0)

    # pid 30 is listed but gone (no directory): skipped, not an error.
    assert thread_switches([10, 20, 30], proc=tmp_path) == {10: (5, 1), 11: (7, 2), 20: (3, 0)}


def test_a_service_file_turns_it_on_and_may_set_its_metrics_thresholds(
    tmp_path: Path,
) -> None:
    assert OPTIONAL["context_switches"] is CONTEXT_SWITCHES
    (tmp_path / "service.toml").write_text(
        '[service]\nname = "svc"\nstart = "sleep 1 {port}"\ncollect = ["context_switches"]\n'
        '[service.metrics]\nvoluntary_switches_per_request = { threshold = "5%" }\n'
    )
    (tmp_path / "trace.jsonl").write_text('{"hairline_trace": 1}\n{"path": "/"}\n')
    path = tmp_path / "experiment.toml"
    path.write_text(
        'service = "service.toml"\ntrace = "trace.jsonl"\n'
        "[arms.A]\n[arms.B]\n[load]\nduration_s = 2\n"
    )
    config = load_experiment(path)
    assert config.service.collect == ["context_switches"]
    assert config.policies()["voluntary_switches_per_request"].threshold.value == 0.05
