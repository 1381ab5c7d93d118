"""The one exception family for problems a user can cause.

    HairlineError            anything the user can fix; has a ``hint``
    ├── ConfigError          a service or experiment file is wrong (names file and field)
    ├── DataError            an observations or trace file is wrong (names column/line)
    └── EngineError          hairline-engine failed or could not be found

The CLI prints these without a traceback and exits with status 2. Anything else is a bug.
"""

from __future__ import annotations

__all__ = ["ConfigError", "DataError", "EngineError", "HairlineError"]


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


class ConfigError(HairlineError):
    """A service or experiment file is invalid."""


class DataError(HairlineError):
    """An observations file or trace is malformed."""


class EngineError(HairlineError):
    """``hairline-engine`` could not be run or reported a failure."""
