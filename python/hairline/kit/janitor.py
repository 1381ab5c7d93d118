"""A temporary folder that does not outlive its owner, even one killed with SIGKILL.

``python -m hairline.kit.janitor PREFIX`` makes a folder ``PREFIX*`` in the system's
temporary folder, prints its path and waits on its stdin, in a session of its own so that
Ctrl-C in the owner's terminal does not reach it. Its stdin is a pipe whose other end only
the owner holds, so the pipe closes when the owner exits by any means; the janitor then
removes the folder and exits. :class:`OwnedFolder` is the owner's side.

Why a process: a ``TemporaryDirectory`` is removed by the code that made it, which a
SIGKILL never runs (``hairline kraken`` left its 2 MB trace, the engine's summary folder
and the fleet's configs and logs behind, issue 31).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from hairline.errors import HairlineError
from hairline.kit import interrupts

__all__ = ["REMOVE_TRIES_S", "OwnedFolder", "main", "remove_folder"]

#: How long a removal is tried again: processes that died with the owner (a parent-death
#: signal) may still be writing their logs into the folder for a moment.
REMOVE_TRIES_S = 5.0


class OwnedFolder:
    """A temporary folder removed when the ``with`` block ends, or, if this process is
    killed first, by its janitor::

        with OwnedFolder("hairline-kraken-") as folder:
            ...  # everything temporary goes under folder
    """

    def __init__(self, prefix: str, *, start_timeout_s: float = 10.0) -> None:
        self._prefix = prefix
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self.folder = Path()

    @property
    def pid(self) -> int | None:
        """The janitor's process id."""
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> Path:
        # Its own session: Ctrl-C in the terminal is for the owner, who removes the folder
        # itself; no parent-death signal (kit/procs.child_setup's): outliving it is the job.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "hairline.kit.janitor", self._prefix],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], self._start_timeout_s)
        line = self._proc.stdout.readline().strip() if ready else ""
        if not line or not Path(line).is_dir():
            self._stop()
            raise HairlineError(
                f"the folder janitor did not start (said {line!r})",
                hint="run `python -m hairline.kit.janitor hairline-test-` to see why",
            )
        self.folder = Path(line)
        return self.folder

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with interrupts.deferred():
            remove_folder(self.folder, tries_s=0.0)
            self._stop()

    def _stop(self) -> None:
        """Close the janitor's pipe (it removes what is left and exits) and reap it."""
        proc = self._proc
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            proc.wait(timeout=REMOVE_TRIES_S + 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def remove_folder(folder: Path, *, tries_s: float = REMOVE_TRIES_S) -> bool:
    """Remove ``folder`` and what it holds, trying again for ``tries_s`` while files still
    appear in it; True once it is gone."""
    deadline = time.monotonic() + tries_s
    while True:
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _wait_for_eof(fd: int) -> None:
    while True:
        select.select([fd], [], [])
        if not os.read(fd, 4096):
            return


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hairline.kit.janitor")
    parser.add_argument("prefix", help="the folder's name starts so (hairline-kraken-)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix=args.prefix))
    # Ctrl-C is the owner's to act on; a SIGTERM is someone ending this: remove and go.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(
        signal.SIGTERM, lambda _signum, _frame: sys.exit(0 if remove_folder(folder) else 1)
    )
    try:
        print(folder, flush=True)
    except OSError:  # the owner died before it read the path: nothing will use the folder
        pass
    else:
        _wait_for_eof(sys.stdin.fileno())
    return 0 if remove_folder(folder) else 1


if __name__ == "__main__":
    sys.exit(main())
