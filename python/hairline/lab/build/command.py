"""A build command run: ``sh -c`` in its own process group, its output teed to a file and
to the caller line by line, a deadline, and nothing it started left running. A submitted
experiment's build runs in the sandbox of :mod:`hairline.lab.build.sandbox`.
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

from hairline.arms.cgroup import ArmCgroup, create_cgroup, sweep
from hairline.kit.procs import child_setup
from hairline.lab.build.sandbox import BuildSandbox, bwrap_argv, find_bwrap, limits_problems
from hairline.lab.build.source import CHUNK_BYTES, git_env

__all__ = ["run_command"]

# After the build's shell exits, how long a grandchild may keep writing before we stop reading.
_DRAIN_S = 0.5
# All a sandboxed build is given of the processor's environment: nothing of it can hold a
# secret (a database password, a token), and a toolchain finds itself with these.
_SANDBOX_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "SOURCE_DATE_EPOCH")


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
    *,
    sandbox: BuildSandbox | None = None,
) -> tuple[int, bool]:
    """Run ``sh -c command`` in its own process group (in ``sandbox`` if given, ``cwd`` its
    only writable folder); returns (exit status, timed out)."""
    argv, full_env = ["sh", "-c", command], {**git_env(), **env}
    group: ArmCgroup | None = None
    if sandbox is not None:
        sweep_orphaned_builds()
        argv = bwrap_argv(find_bwrap(), command, cwd)
        full_env = {k: v for k, v in os.environ.items() if k in _SANDBOX_ENV} | dict(env)
        group = _limited_cgroup(f"{_BUILD_PREFIX}{cwd.name}-{os.getpid()}", sandbox)
    try:
        with open(output, "wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=child_setup(join=group.procs_files) if group is not None else None,
            )
            try:
                timed_out = _pump(proc, out, time.monotonic() + timeout_s, on_output)
            finally:
                # Whatever the build left running (or all of it, on timeout) goes with it.
                _kill_group(proc)
                proc.wait()
                assert proc.stdout is not None
                proc.stdout.close()
    finally:
        if group is not None:
            group.remove()  # and every process still in it: the sandbox's own session too
    return proc.returncode, timed_out


_BUILD_PREFIX = "hlbuild-"


def _owner_alive(name: str) -> bool:
    """Whether the process named at the end of ``hlbuild-<work>-<pid>`` still runs (an
    unreadable name is kept: it is nobody's to remove)."""
    pid = name.rpartition("-")[2]
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphaned_builds() -> list[str]:
    """Kill and remove the build cgroups whose processor died: a SIGKILL skips
    run_command's clean-up, and the build (a hostile one in particular) would run on in
    its cgroup. Returns the names removed."""
    return sweep(_BUILD_PREFIX, keep=_owner_alive)


def _limited_cgroup(name: str, sandbox: BuildSandbox) -> ArmCgroup:
    """A cgroup for a sandboxed build with its limits set, or BuildFailed saying why not."""
    group, why = create_cgroup(name)
    if group is None:
        raise limits_problems([why])
    problems = group.limit(pids_max=sandbox.pids_max, memory_bytes=sandbox.memory_bytes)
    if problems:
        group.remove()
        raise limits_problems(problems)
    return group
