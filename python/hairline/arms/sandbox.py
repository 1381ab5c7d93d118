"""The sandbox the arms of a submitted experiment run in: bubblewrap plus its cgroup's limits.

A submission's build is sandboxed (``lab/build/sandbox.py``), and what it built is code the
lab has never seen too: the arm that runs it sees the system read-only, its own arm folder
(``{workdir}``) writable, the submission's folder and the built artifact read-only, the
program the registered start command names, and nothing else of the machine: not the lab's
home (its database, token store, other experiments' folders), not ``/root`` or ``/home``.
It runs as an unprivileged user without capabilities, under its cgroup's process and memory
limits, with an environment of its own (nothing of the processor's, which may hold a
database password). Its network is the namespace it is started in: an arm must answer the
load generator, so the lab gives a submitted experiment's arms a network namespace of their
own (``[service.isolation]``, with nothing allowed unless the file allows it) on the local
backend.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hairline.errors import ArmFailed
from hairline.kit.sandbox import find_bwrap, sandbox_argv

__all__ = ["ArmSandbox", "sandbox_env", "sandboxed_command"]

# All a sandboxed arm is given of the processor's environment: nothing of it can hold a
# secret (the database URL, a token), and a program finds its libraries and locale with it.
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
# Folders bound read-only whatever the arm: a program found in them needs no bind of its own.
_SYSTEM = (Path("/usr"), Path("/bin"), Path("/sbin"), Path("/lib"), Path("/lib64"))


@dataclass(frozen=True)
class ArmSandbox:
    """What a sandboxed arm may see besides the system, and its limits. ``writable``: its
    arm folder(s); ``readable``: the submission's folder and the built artifact."""

    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    pids_max: int = 1024
    memory_bytes: int = 8 << 30

    def __post_init__(self) -> None:
        if self.pids_max < 8 or self.memory_bytes < 64 << 20:
            raise ValueError("an arm needs at least 8 processes and 64 MiB")


def _program(word: str, env: Mapping[str, str]) -> Path | None:
    """Where the start command's program lies, when outside the system folders (the engine
    in the venv, say): the one file of it the sandbox binds."""
    found = shutil.which(word, path=env.get("PATH", os.defpath))
    if found is None:
        return None
    path = Path(found).resolve()
    return None if any(path.is_relative_to(s) for s in _SYSTEM) else path


def sandboxed_command(
    sandbox: ArmSandbox, command: Sequence[str], cwd: Path | None, env: Mapping[str, str]
) -> list[str]:
    """The arm's command line inside the sandbox; ArmFailed where bubblewrap is missing.
    Only the program the command names is bound, never a path among its arguments: those
    come from the submission, and would open any file of the machine to it."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise ArmFailed(
            "the arms of submitted experiments run in a sandbox, and bubblewrap (bwrap) is "
            "not installed",
            hint="install it (apt-get install bubblewrap; `make sysdeps` does) on every "
            "machine that runs API submissions' arms",
        )
    program = _program(command[0], env) if command else None
    readable = [p for p in (*sandbox.readable, cwd) if p is not None and p.exists()]
    if program is not None:
        readable.append(program)
    words = [str(program) if program is not None else command[0], *command[1:]]
    inside = str(cwd) if cwd is not None else "/"
    home = str(sandbox.writable[0]) if sandbox.writable else "/tmp"
    return sandbox_argv(
        bwrap, words, chdir=inside, home=home, readable=readable,
        writable=[(p, str(p)) for p in sandbox.writable], network=True,
    )  # fmt: skip


def sandbox_env(processor_env: Mapping[str, str], arm_env: Mapping[str, str]) -> dict[str, str]:
    """A sandboxed arm's environment: the few harmless keys of the processor's, and its own
    (the submission's, already checked against the allowlist)."""
    return {k: v for k, v in processor_env.items() if k in _KEPT_ENV} | dict(arm_env)
