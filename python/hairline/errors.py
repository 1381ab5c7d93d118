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

The CLI prints these without a traceback and exits with status 2. Anything else is a bug.
Control flow inside the lab (a lost lease, a cancel, a trial left out) is not in this
family: those are plain exceptions of the modules that raise and catch them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ArmFailed",
    "BuildFailed",
    "CalibrationFailed",
    "ConfigError",
    "DataError",
    "EngineError",
    "HairlineError",
    "HostsUnavailable",
    "LoadBalancerError",
    "NodeLost",
    "Problem",
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
    """A build command failed, timed out or produced no artifact. The hint names the log."""


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
