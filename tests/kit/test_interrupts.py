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
