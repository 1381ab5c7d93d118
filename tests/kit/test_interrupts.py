"""A Ctrl-C that Python swallows where it lands is raised again where work moves on."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from hairline.kit import interrupts


@pytest.fixture
def installed() -> Iterator[None]:
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupts.install()
    try:
        yield
    finally:
        interrupts.reset()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _SignalledInAFinaliser:
    """Python prints and drops an exception raised in ``__del__``, as it does one raised
    in the after-fork hooks that every ``subprocess.Popen`` runs."""

    def __init__(self, signum: signal.Signals) -> None:
        self.signum = signum

    def __del__(self) -> None:
        signal.raise_signal(self.signum)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_swallowed_interrupt_is_raised_at_the_next_check(
    installed: None, signum: signal.Signals
) -> None:
    victim = _SignalledInAFinaliser(signum)
    del victim  # "Exception ignored in ... __del__": the KeyboardInterrupt is gone
    assert interrupts.interrupted_by() == signum
    with pytest.raises(KeyboardInterrupt, match=f"signal {int(signum)}"):
        interrupts.raise_if_interrupted()


def test_without_a_signal_the_check_does_nothing(installed: None) -> None:
    interrupts.raise_if_interrupted()
    assert interrupts.interrupted_by() is None


def test_a_delivered_interrupt_raises_where_it_lands(installed: None) -> None:
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    interrupts.reset()
    interrupts.raise_if_interrupted()  # acted on and forgotten


class _Shutdown(BaseException):
    """As `hairline lab process` has: a processor asked to stop, its experiments taken over."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_process_may_choose_what_a_signal_raises_and_gets_it_again_if_swallowed() -> None:
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupts.install(exception=_Shutdown)
    try:
        victim = _SignalledInAFinaliser(signal.SIGTERM)
        del victim
        with pytest.raises(_Shutdown):
            interrupts.raise_if_interrupted()
    finally:
        interrupts.install()  # back to KeyboardInterrupt for the rest of the session
        interrupts.reset()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_a_ctrl_c_in_a_deferred_block_lets_it_finish_and_is_remembered(installed: None) -> None:
    """Clean-up inside ``deferred`` runs to its end; the command then reads the signal."""
    finished = []
    with interrupts.deferred():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # a second Ctrl-C changes nothing either
        finished.append("teardown")
    assert finished == ["teardown"]
    assert interrupts.interrupted_by() == signal.SIGINT
    assert interrupts.exit_status(signal.SIGINT) == 130
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_if_interrupted()


def test_under_another_handler_the_signal_is_delivered_when_the_block_ends() -> None:
    """Without ``install`` (a library caller, Python's own Ctrl-C handler) the interrupt is
    not lost: it is raised as the block ends, after the block's work, and the caller's
    handler is back."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    finished = []
    try:
        with pytest.raises(KeyboardInterrupt), interrupts.deferred():
            signal.raise_signal(signal.SIGINT)
            finished.append("teardown")
        assert finished == ["teardown"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert interrupts.interrupted_by() is None
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_a_deferred_block_ctrl_c_raises_again(installed: None) -> None:
    with interrupts.deferred():
        pass
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert interrupts.exit_status(signal.SIGTERM) == 143
