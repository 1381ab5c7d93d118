"""Ctrl-C and SIGTERM that cannot be lost.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread happens to
be. When that is inside a callback whose exceptions Python ignores (the ``after fork``
hooks that every ``subprocess.Popen`` runs, a finaliser, a weakref callback) the interrupt
is printed as "Exception ignored in ..." and dropped: ``hairline run`` then went on and
finished the experiment with exit 0, 3 runs in 20 of tests/lab's Ctrl-C test (it starts
processes all the time). So the handler also records the signal, and the places where an
experiment moves forward (a batch, a trial, the drive loop) call
:func:`raise_if_interrupted`: a dropped interrupt is raised again there, at most one
batch step late. Clean-up code never calls it, so stopping arms after an interrupt is not
interrupted again.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["install", "interrupted_by", "raise_if_interrupted", "reset"]

_received: int | None = None
# What a signal raises: KeyboardInterrupt for a command (the experiment fails as
# interrupted), a processor's own shutdown for `hairline lab process` (it is taken over).
_exception: type[BaseException] = KeyboardInterrupt


def _handler(signum: int, _frame: FrameType | None) -> None:
    global _received
    _received = signum
    raise _exception(f"signal {signum}")


def install(
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
    *,
    exception: type[BaseException] = KeyboardInterrupt,
) -> None:
    """Make ``signals`` raise ``exception`` and be remembered (main thread only; elsewhere
    Python does not deliver signals, so there is nothing to install)."""
    global _exception
    if threading.current_thread() is threading.main_thread():
        _exception = exception
        for signum in signals:
            signal.signal(signum, _handler)


def interrupted_by() -> int | None:
    """The signal that asked this process to stop, if one did."""
    return _received


def raise_if_interrupted() -> None:
    """Raise the installed exception (``KeyboardInterrupt`` by default) if a signal asked
    this process to stop, even if the one its handler raised was swallowed where it
    landed."""
    if _received is not None:
        raise _exception(f"signal {_received}")


def reset() -> None:
    """Forget a signal once it has been acted on (a long-lived process that goes on)."""
    global _received
    _received = None
