"""The memory collector samples a real process while its window is open."""

from __future__ import annotations

import subprocess
import sys
import time

from arm_probes import Child

from hairline.collect.memory import ANON_MEMORY, MEMORY, PEAK_MEMORY
from hairline.collect.metric import Measured

HOLDER = """
import sys
block = bytearray(32 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
print("ready", flush=True)
sys.stdin.readline()
"""


def test_anonymous_memory_is_the_mean_of_the_samples_and_no_peak_without_a_cgroup() -> None:
    """False failure: below 1 in 10,000: 0.6 s holds two samples at 0.25 s unless the
    sampling thread waits more than 0.35 s for a CPU."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == b"ready"
        window = MEMORY.window({"A": Child(proc.pid)})
        with window:
            time.sleep(0.6)
        measured = Measured(
            requests=1, errors=0, latency_p50_us=0.0, latency_p99_us=0.0, cpu_ns=0,
            duration_s=1.0,
        )  # fmt: skip
        values = window.values("A", measured)
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()

    assert set(values) == {ANON_MEMORY.name}  # no peak_memory_bytes: None is no row
    assert values[ANON_MEMORY.name] > 32 * 1024 * 1024
    assert PEAK_MEMORY.name not in values
