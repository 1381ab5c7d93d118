"""Durations written the way people write them: ``500ms``, ``30s``, ``15m``, ``2h``, ``1d``.

One grammar for every place that reads one (an A/A schedule's period, an event's offset
from now, a Kraken rule's window); each caller says which units make sense for it and
words its own error.
"""

from __future__ import annotations

import re
from collections.abc import Collection

__all__ = ["UNIT_S", "duration_s"]

UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^(?P<amount>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d)$")


def duration_s(text: str, *, units: Collection[str] = tuple(UNIT_S)) -> float | None:
    """``text`` in seconds (a number, then one of ``units``; no sign), or ``None`` when it
    is not such a duration (pure)."""
    match = _DURATION.match(text.strip())
    if match is None or match["unit"] not in units:
        return None
    return float(match["amount"]) * UNIT_S[match["unit"]]
