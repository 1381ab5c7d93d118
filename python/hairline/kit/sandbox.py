"""The bubblewrap command line both sandboxes share: a submitted experiment's build
(``lab/build/sandbox.py``) and its arms (``arms/sandbox.py``).

What runs inside sees the system read-only (``/usr`` and the few files of ``/etc`` a
toolchain or a service reads), an empty ``/tmp``, its own ``/proc`` and ``/dev``, and only
the folders it is given; not the lab's home (its database, token store, other experiments'
folders), not ``/root`` or ``/home``. It runs in its own user, process, IPC and UTS
namespaces as an unprivileged user with no capabilities, and in a network namespace of its
own unless it is told to keep the one it was started in (an arm must answer the load
generator; its network is confined by ``[service.isolation]``'s namespace instead).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

__all__ = ["find_bwrap", "sandbox_argv"]

# What a compiler, linker, interpreter or server reads from /etc; the rest of /etc stays
# hidden (it may hold credentials, and /etc/shadow is readable by root).
_ETC_FILES = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "mime.types",
    "hosts",
)
# Merged-/usr systems link these to /usr; elsewhere they are folders, bound read-only.
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_NOBODY = 65534


def find_bwrap() -> str | None:
    """bubblewrap's path, or None where it is not installed (the caller says how to)."""
    return shutil.which("bwrap")


def sandbox_argv(
    bwrap: str,
    argv: Sequence[str],
    *,
    chdir: str,
    home: str,
    readable: Sequence[Path] = (),
    writable: Sequence[tuple[Path, str]] = (),
    network: bool = False,
    root: Path = Path("/"),
) -> list[str]:
    """The command line that runs ``argv`` in the sandbox, in ``chdir``. ``readable``: host
    paths (files or folders) seen read-only at the same path; ``writable``: (host folder,
    path inside) pairs; ``network``: keep the network namespace it is started in (else one
    of its own with only a loopback, down). ``root`` is where the host's filesystem is read
    from to see what exists (tests)."""
    out = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        *([] if network else ["--unshare-net"]),
        "--uid", str(_NOBODY),
        "--gid", str(_NOBODY),
        "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for name in _TOP_LEVEL:
        host = root / name
        if host.is_symlink():
            out += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            out += ["--ro-bind", f"/{name}", f"/{name}"]
    for name in _ETC_FILES:
        out += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in readable:
        out += ["--ro-bind", str(path), str(path)]
    for host_path, inside in writable:
        out += ["--bind", str(host_path), inside]
    out += [
        # The sandbox's own root (where /etc's few files are mounted) read-only as well.
        "--remount-ro", "/",
        "--chdir", chdir,
        "--setenv", "HOME", home,
        "--setenv", "TMPDIR", "/tmp",
        "--", *argv,
    ]  # fmt: skip
    return out
