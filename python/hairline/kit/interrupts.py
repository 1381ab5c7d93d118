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

Clean-up that must run to its end (a load balancer's weights put back, a fleet stopped,
then its folder removed) runs inside :func:`deferred`: a second Ctrl-C there is remembered,
not raised, and the command says so once the clean-up is done (``hairline kraken``: exit
130 after its teardown, where an escaping KeyboardInterrupt printed click's "Aborted!",
exit 1, with processes and folders left).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["deferred", "exit_status", "install", "interrupted_by", "raise_if_interrupted", "reset"]

_received: int | None = None
# What a signal raises: KeyboardInterrupt for a command (the experiment fails as
# interrupted), a processor's own shutdown for `hairline lab process` (it is taken over).
_exception: type[BaseException] = KeyboardInterrupt
# How many deferred() blocks the main thread is in: inside one, the handler only records.
_deferring = 0
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _handler(signum: int, _frame: FrameType | None) -> None:
    global _received
    _received = signum
    if _deferring:
        return
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


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run the block to its end whatever SIGINT or SIGTERM arrives meanwhile. Under
    :func:`install`'s handler a signal is only remembered (:func:`interrupted_by`); under any
    other Python handler (Python's own Ctrl-C, a library's) it is held and delivered again
    when the block ends. Outside the main thread, where no signal is delivered, it does
    nothing."""
    global _deferring
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {}
    for signum in _SIGNALS:
        handler = signal.getsignal(signum)
        # None: a handler not set from Python, which cannot be put back; SIG_IGN: nothing to
        # hold; SIG_DFL: SIGTERM's kills at once, which is what the caller chose.
        if handler is _handler or not callable(handler):
            continue
        previous[signum] = handler
        signal.signal(signum, lambda got, _frame: held.append(got))
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for got in dict.fromkeys(held):
            signal.raise_signal(got)


def exit_status(signum: int) -> int:
    """A shell's exit status for a command stopped by ``signum``: 128 + its number (130 for
    SIGINT, 143 for SIGTERM)."""
    return 128 + signum
