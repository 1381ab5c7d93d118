"""A build command run: ``sh -c`` in its own process group, its output teed to a file and
to the caller line by line, a deadline, and nothing it started left running.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hairline.lab.build.source import CHUNK_BYTES, git_env

__all__ = ["run_command"]

# After the build's shell exits, how long a grandchild may keep writing before we stop reading.
_DRAIN_S = 0.5


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _pump(
    proc: subprocess.Popen[bytes],
    out: Any,
    deadline: float,
    on_output: Callable[[str], None] | None,
) -> bool:
    """Tee the build's output until EOF; returns True when the deadline passed first."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    pending = b""
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            return True
        ready, _, _ = select.select([fd], [], [], min(0.1, deadline - now))
        if ready:
            chunk = os.read(fd, CHUNK_BYTES)
            if not chunk:
                # The pipe closed, but the build may go on with its output elsewhere.
                try:
                    proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
                except subprocess.TimeoutExpired:
                    return True
                break
            out.write(chunk)
            if on_output is not None:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    on_output(line.decode(errors="replace").rstrip("\r"))
            continue
        # A daemon the build started may hold the pipe open forever: stop soon after exit.
        if proc.poll() is not None:
            exited_at = now if exited_at is None else exited_at
            if now - exited_at >= _DRAIN_S:
                break
    if pending and on_output is not None:
        on_output(pending.decode(errors="replace").rstrip("\r"))
    return False


def run_command(
    command: str,
    cwd: Path,
    env: Mapping[str, str],
    output: Path,
    timeout_s: float,
    on_output: Callable[[str], None] | None,
) -> tuple[int, bool]:
    """Run ``sh -c command`` in its own process group; returns (exit status, timed out)."""
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", command],
            cwd=cwd,
            env={**git_env(), **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            timed_out = _pump(proc, out, time.monotonic() + timeout_s, on_output)
        finally:
            # Whatever the build left running (or all of it, on timeout) goes with it.
            _kill_group(proc)
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
    return proc.returncode, timed_out
