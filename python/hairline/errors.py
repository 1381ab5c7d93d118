"""The one exception family for problems a user can cause.

    HairlineError            anything the user can fix; has a ``hint``
    ├── ConfigError          a service or experiment file is wrong (names file and field)
    ├── DataError            an observations or trace file is wrong (names column/line)
    ├── EngineError          hairline-engine failed or could not be found
    ├── ArmFailed            an arm did not start, or never became healthy
    ├── BuildFailed          a build failed, timed out or made no artifact (names its log)
    ├── HostsUnavailable     an experiment can never get its hosts here
    ├── CalibrationFailed    no replay rate kept the baseline's load valid
    ├── NodeLost             a foreground agent's Ray node stopped by itself
    └── LoadBalancerError    a load balancer's runtime API could not be reached or refused

The CLI prints these without a traceback and exits with status 2. Anything else is a bug,
except control flow inside the lab, a family of its own that never reaches the user as an
error (each is caught by the lab layer that owns the decision):

    LabSignal
    ├── TrialLeftOut         a trial's batch was spoiled in every attempt
    ├── HeadUnreachable      the Ray head does not answer
    ├── HostLost             a host of the batch stopped answering
    ├── HostTakenMeanwhile   a host read free was taken by another allocation
    ├── LeaseLost            another processor holds the experiment's lease
    └── Cancelled            ``hairline cancel`` asked the experiment to stop
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ArmFailed",
    "BuildFailed",
    "CalibrationFailed",
    "Cancelled",
    "ConfigError",
    "DataError",
    "EngineError",
    "HairlineError",
    "HeadUnreachable",
    "HostLost",
    "HostTakenMeanwhile",
    "HostsUnavailable",
    "LabSignal",
    "LeaseLost",
    "LoadBalancerError",
    "NodeLost",
    "Problem",
    "TrialLeftOut",
]


class HairlineError(Exception):
    """A problem the user can fix. ``hint`` says how."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


@dataclass(frozen=True)
class Problem:
    """One problem of a file: where (``file``, ``line`` when known, the dotted ``field``),
    what is wrong and what to write instead."""

    file: str
    line: int | None
    field: str
    message: str
    fix: str


class ConfigError(HairlineError):
    """A service or experiment file is invalid. ``problems`` lists each problem the message
    names, for callers that show them other than as text (the HTTP API)."""

    def __init__(
        self, message: str, *, hint: str | None = None, problems: tuple[Problem, ...] = ()
    ) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems


class DataError(HairlineError):
    """An observations file or trace is malformed."""


class EngineError(HairlineError):
    """``hairline-engine`` could not be run or reported a failure."""


class ArmFailed(HairlineError):
    """An arm did not start, or never became healthy."""


class BuildFailed(HairlineError):
    """A build command failed, timed out or produced no artifact. The hint names the log,
    and ``log`` is its path (None when the build failed before anything was logged)."""

    def __init__(self, message: str, *, hint: str | None = None, log: Path | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log = log


class HostsUnavailable(HairlineError):
    """The experiment can never get its hosts here (too few, or over the team's quota)."""


class CalibrationFailed(HairlineError):
    """No replay rate kept the baseline's load valid."""


class NodeLost(HairlineError):
    """The Ray node a foreground agent waited on stopped by itself (its daemons died, its
    head went away); the agent exits so that its supervisor starts it again."""


class LoadBalancerError(HairlineError):
    """A load balancer's runtime API (HAProxy's admin socket) could not be reached, or it
    refused a command; the hint names the socket and what to check."""


class LoadBalancerGone(LoadBalancerError):
    """The load balancer is not running: no process listens on HAProxy's admin socket (or
    the socket file is gone), nginx's master process or its files are gone. Kraken's
    watchdog then stops trying to restore weights that no longer exist."""


class LabSignal(Exception):
    """Control flow between the lab's layers, never a problem for the user to fix: raised
    where the fact is found, caught where the decision is made."""


class TrialLeftOut(LabSignal):
    """A trial's batch was spoiled in every attempt; the trial is left out of the analysis
    with this reason (the experiment goes on)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class HeadUnreachable(LabSignal):
    """The Ray head does not answer: the batch is failed, the trial goes back to pending,
    and the experiment waits for a head (the next `hairline run` / `lab process`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HostLost(LabSignal):
    """The host ``index`` of the batch (``name``) stopped answering: its node died, its
    actor died, or a call timed out. The trial is run again elsewhere."""

    def __init__(self, index: int, name: str, reason: str) -> None:
        super().__init__(f"host {name} lost: {reason}")
        self.index = index
        self.name = name
        self.reason = reason


class HostTakenMeanwhile(LabSignal):
    """Hosts read free were taken by another allocation before this one's update: the
    transaction rolls back, so that no host of this attempt stays taken, and the
    experiment waits (or tries again)."""


class LeaseLost(LabSignal):
    """This processor no longer holds the experiment's lease; another one has it."""


class Cancelled(LabSignal):
    """``hairline cancel`` asked this experiment to stop; raised at the next safe point."""
