"""Per-token request rates (pure): a token bucket per caller, so that one token (or one
address without a token) cannot take the server from everyone else.

A caller's bucket holds up to ``burst`` requests and refills at ``rate_per_s``; a request
takes one, and when none is left the answer is 429 with the seconds until one is back
(``Retry-After``). A CI job polling a gate every 5 s, a browser refreshing a page, or a
script listing experiments a page at a time stay far inside the defaults. Buckets of
callers idle long enough to be full again are forgotten, so the table stays small.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["DEFAULT_BURST", "DEFAULT_RATE_PER_S", "RateLimiter", "caller_key"]

DEFAULT_RATE_PER_S = 20.0
DEFAULT_BURST = 200
# The table is swept of full buckets at most this often.
_SWEEP_EVERY_S = 60.0


def caller_key(token: str | None, address: str | None) -> str:
    """Whose bucket a request takes from: its token (hashed: the table never holds one), or
    its address when it carries none."""
    if token:
        return "t:" + hashlib.sha256(token.encode()).hexdigest()[:32]
    return f"a:{address or '?'}"


@dataclass
class RateLimiter:
    """Token buckets by caller. ``take(key)`` is 0.0 when the request may go on, else the
    seconds until the caller's next request would be let through."""

    rate_per_s: float = DEFAULT_RATE_PER_S
    burst: int = DEFAULT_BURST
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # key: (tokens, at)
    _swept_at: float = 0.0

    def __post_init__(self) -> None:
        if not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)) or self.burst < 1:
            raise ValueError(
                f"a rate limit needs a rate above 0 and a burst of at least 1 "
                f"(got {self.rate_per_s}/s, burst {self.burst})"
            )

    def take(self, key: str) -> float:
        now = self.clock()
        self._sweep(now)
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate_per_s)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate_per_s

    def _sweep(self, now: float) -> None:
        if now - self._swept_at < _SWEEP_EVERY_S:
            return
        self._swept_at = now
        full_after_s = self.burst / self.rate_per_s
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after_s}

    def __len__(self) -> int:
        return len(self._buckets)
