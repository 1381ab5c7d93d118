"""Child processes that cannot outlive hairline: pinned to a CPU set, killed with their parent.

Every process hairline starts (arms, the engine, builds) goes through :func:`child_setup`,
so that a processor killed with SIGKILL leaves nothing running behind it. The lab's lease
takeover also stops what a dead processor recorded (belt and braces: the parent-death
signal only reaches the direct child, and only on Linux).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "child_setup",
    "enter_netns",
    "group_alive",
    "kill_group",
    "session_members",
    "stop_process",
    "thread_pinned_to",
]

_PR_SET_PDEATHSIG = 1
_CLONE_NEWNET = 0x40000000


def enter_netns(path: str) -> None:
    """Move the calling thread into the network namespace at ``path`` (``/run/netns/X``).
    Python 3.11 has no ``os.setns``; libc's does the same."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def child_setup(
    cpus: Sequence[int] | None = None, *, join: Sequence[str] = (), netns: str | None = None
) -> Callable[[], None]:
    """A ``preexec_fn``: join the cgroups whose ``cgroup.procs`` files are ``join`` (before
    exec, so nothing the child runs is ever outside them), enter the network namespace at
    ``netns`` (before exec, so the service never opens a socket outside it), pin the child
    to ``cpus`` and have it killed when its parent dies."""

    def setup() -> None:
        for procs_file in join:
            with open(procs_file, "w") as f:
                f.write(str(os.getpid()))
        if netns is not None:
            enter_netns(netns)
        if cpus:
            os.sched_setaffinity(0, cpus)
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return setup


@contextlib.contextmanager
def thread_pinned_to(cpus: Sequence[int]) -> Iterator[None]:
    """Pin the calling thread (and the threads it starts meanwhile) to ``cpus``, then
    restore its affinity. Linux's ``sched_setaffinity(0, ...)`` acts on the calling thread."""
    before = os.sched_getaffinity(0)
    wanted = set(cpus) & before or before
    os.sched_setaffinity(0, wanted)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` is still running."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int) -> bool:
    """SIGKILL a process group; True if there was one to kill."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def session_members(sid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the live (not zombie) processes of session ``sid``: what a
    daemon that starts its own session (a Ray node) left running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # it exited meanwhile
            continue
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append((int(entry.name), text[text.index("(") + 1 : text.rindex(")")]))
    return found


def stop_process(
    proc: subprocess.Popen[Any], *, grace_s: float = 5.0, close_stdout: bool = True
) -> int:
    """SIGTERM, SIGKILL if it has not exited ``grace_s`` later, and (by default) its stdout
    pipe closed; its exit status. A process that already exited is only reaped."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if close_stdout and proc.stdout is not None and not proc.stdout.closed:
        proc.stdout.close()
    return proc.returncode
