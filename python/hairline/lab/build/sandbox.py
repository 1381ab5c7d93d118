"""The sandbox a submitted experiment's build runs in: bubblewrap plus a cgroup's limits.

An experiment submitted through the API names code the lab has never seen, and its build
command (a Makefile, a ``build.rs``, a ``setup.py``) is code too. In the sandbox it sees:

- the system read-only (``/usr`` and the few files of ``/etc`` a toolchain reads), so it
  can compile but not change the machine (the command line is :mod:`hairline.kit.sandbox`'s,
  which the arms of submitted experiments share);
- its own work folder (at ``/build``), writable, and an empty ``/tmp``; nothing else: not
  the lab's home (its database, token store, other experiments' folders), not ``/root``
  or ``/home``;
- no network at all (a namespace of its own with only a loopback, down): a build fetches
  nothing, so it sends nothing;
- its own process and user namespaces, as an unprivileged user, with no capabilities;
- a cgroup capping its processes (a fork bomb stops at ``pids_max``) and its memory.

Builds the machine's owner starts (``hairline run`` from the command line, the scheduler's
A/A runs, bisection steps) run as they always did; only API submissions are sandboxed, and
never without one: no bubblewrap, or no way to set the limits, and the build fails saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hairline.errors import BuildFailed
from hairline.kit import sandbox

__all__ = ["INSIDE", "BuildSandbox", "bwrap_argv", "find_bwrap", "limits_problems"]

# Where the work folder appears inside: a fixed path, so the lab's own folders (the work
# folder lies under the lab's home) are not even named in the sandbox.
INSIDE = "/build"


@dataclass(frozen=True)
class BuildSandbox:
    """Limits of a sandboxed build: its processes and threads, its memory."""

    pids_max: int = 512
    memory_bytes: int = 4 << 30

    def __post_init__(self) -> None:
        if self.pids_max < 8 or self.memory_bytes < 64 << 20:
            raise ValueError("a build needs at least 8 processes and 64 MiB")


def find_bwrap() -> str:
    """bubblewrap's path; raises BuildFailed (saying how to install it) where it is missing."""
    path = sandbox.find_bwrap()
    if path is None:
        raise BuildFailed(
            "submitted experiments build in a sandbox, and bubblewrap (bwrap) is not installed",
            hint="install it (apt-get install bubblewrap; `make sysdeps` does) on every "
            "machine that processes API submissions",
        )
    return path


def bwrap_argv(
    bwrap: str, command: str, work: Path, *, root: Path = Path("/"), shell: str = "sh"
) -> list[str]:
    """The command line that runs ``sh -c command`` in ``work`` inside the sandbox, with no
    network. ``root`` is where the host's filesystem is read from to see what exists
    (tests)."""
    return sandbox.sandbox_argv(
        bwrap, [shell, "-c", command], chdir=INSIDE, home=INSIDE,
        writable=[(work, INSIDE)], root=root,
    )  # fmt: skip


def limits_problems(problems: Sequence[str]) -> BuildFailed:
    """The error for a sandbox whose limits could not all be set."""
    return BuildFailed(
        "submitted experiments build with a process and memory limit, which could not be "
        f"set here: {'; '.join(problems)}",
        hint="run the processor as root on a machine with the pids and memory cgroup "
        "controllers (cgroup v2, or v1's pids and memory hierarchies mounted)",
    )
