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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

__all__ = ["child_setup", "group_alive", "kill_group", "session_members", "thread_pinned_to"]

_PR_SET_PDEATHSIG = 1


def child_setup(
    cpus: Sequence[int] | None = None, *, join: Sequence[str] = ()
) -> Callable[[], None]:
    """A ``preexec_fn``: join the cgroups whose ``cgroup.procs`` files are ``join`` (before
    exec, so nothing the child runs is ever outside them), pin the child to ``cpus`` and
    have it killed when its parent dies."""

    def setup() -> None:
        for procs_file in join:
            with open(procs_file, "w") as f:
                f.write(str(os.getpid()))
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
