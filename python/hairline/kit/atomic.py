"""Files written whole or not at all: a reader (a dashboard, a resumed run, a second
processor) never sees half a file, and a failed write leaves the old file as it was.

The temporary file is made beside its target (a rename within one filesystem is atomic)
and given the permissions a plain ``open`` would give it (0666 less the umask), not
``mkstemp``'s 0600: a report or a trace is a file like any other. Secrets are written by
``kit/secretfiles.py``, never through here.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "umask", "write_text_atomic"]


def umask() -> int:
    """The process's umask, read without changing it where Linux shows it."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _special(path: Path) -> bool:
    """Whether ``path`` is a device, a FIFO or a socket (following symlinks)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed over ``path`` when the block
    ends, removed if it raises. The folder is made if missing.

    A symlink is followed: the file it names is replaced, the link kept. A device, FIFO or
    socket (``--json /dev/null``, a named pipe) is written in place: renaming over it
    would replace it with a plain file, and /dev/null was once replaced that way, by root.
    """
    target = Path(path)
    if _special(target):
        yield target
        return
    if target.is_symlink():
        target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        os.close(fd)
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """``text`` written to ``path`` whole (UTF-8, newlines as given)."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as f:
        f.write(text)
    return Path(path)
