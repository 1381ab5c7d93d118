"""Waiting for hosts or a Ray head: how long, when to say so, when to give up. Pure (the
caller passes the time); the lab's drive loop, ``hairline lab process`` and the commands
that wait share it.

The experiment waits from the first moment it is seen waiting after its last step forward,
a *mark* that changes when its phase changes or one of its trials ends, and it is given up
on only while it is seen waiting. So a Ray head that comes and goes between trials never
adds up to a give-up, a trial that runs long after a wait is not cut short, and a head that
never comes back is given up on even though each attempt at it shows "running trial ..."
for a few seconds.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field

__all__ = ["NOTE_EVERY_S", "Patience", "WaitNote", "duration_text"]

# How often a wait that goes on is shown again (at once when its reason changes).
NOTE_EVERY_S = 15.0


def duration_text(seconds: float) -> str:
    """``seconds`` as a person reads it: "45 s", "2 min 05 s", "1 h 03 min"."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


@dataclass(frozen=True)
class WaitNote:
    """A wait worth showing: why, for how long so far, and the limit (0: none)."""

    reason: str
    waited_s: float
    limit_s: float

    def text(self) -> str:
        limit = f", gives up at {duration_text(self.limit_s)}" if self.limit_s else ""
        return f"{self.reason} ({duration_text(self.waited_s)} so far{limit})"


@dataclass
class Patience:
    """How long work has waited since it last moved on, and whether that is too long.

    ``limit_s`` 0 waits forever. :meth:`observe` is called after each attempt (or poll)
    with the time, the work's mark and, when it waits, why.
    """

    limit_s: float
    every_s: float = NOTE_EVERY_S
    _mark: Hashable = field(default=None, init=False)
    _since: float | None = field(default=None, init=False)
    _reason: str | None = field(default=None, init=False)
    _shown_at: float = field(default=-math.inf, init=False)
    _waiting: bool = field(default=False, init=False)

    def observe(self, now: float, *, mark: Hashable, reason: str | None) -> WaitNote | None:
        """Record what was seen at ``now``; a note to show when the work waits for a new
        reason, or has waited another ``every_s`` since the last note."""
        if mark != self._mark:
            self._mark, self._since, self._reason, self._shown_at = mark, None, None, -math.inf
        self._waiting = reason is not None
        if reason is None:
            return None
        if self._since is None:
            self._since = now
        if reason == self._reason and now - self._shown_at < self.every_s:
            return None
        self._reason, self._shown_at = reason, now
        return WaitNote(reason, now - self._since, self.limit_s)

    def waited_s(self, now: float) -> float:
        return 0.0 if self._since is None else now - self._since

    def expired(self, now: float) -> bool:
        """Whether to give up: the work was last seen waiting, for ``limit_s`` or longer."""
        if self.limit_s <= 0 or not self._waiting or self._since is None:
            return False
        return now - self._since >= self.limit_s

    def sleep_s(self, now: float, poll_s: float) -> float:
        """How long to sleep before the next attempt: ``poll_s``, not past the limit."""
        if self.limit_s <= 0 or not self._waiting or self._since is None:
            return poll_s
        return max(0.0, min(poll_s, self._since + self.limit_s - now))

    @property
    def reason(self) -> str | None:
        return self._reason
