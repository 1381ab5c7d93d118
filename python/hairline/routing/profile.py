"""A profile: which functions each endpoint runs and what they cost there (HHVM section 2.2's
bipartite graph of endpoints and functions), read from folded stacks or JSON.

Folded (collapsed) stacks, one stack a line, the endpoint as the root frame::

    /api/op/3;op_common_0 1234
    /api/op/3;render;escape 56

Every frame below the root is code the endpoint runs, so each one is charged the line's
count (inclusive cost): a function that only calls others still occupies the code cache.
The simple JSON form gives the costs directly::

    {"endpoints": {"/api/op/1": {"fn_a": 120, "fn_b": 3}}}

``curl -s http://HOST:PORT/debug/profile > profile.folded`` saves the sample service's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hairline.errors import DataError
from hairline.profile.formats import parse_folded

__all__ = ["Profile", "parse_profile", "read_profile"]


@dataclass(frozen=True)
class Profile:
    """Endpoint -> function -> cost (any unit: samples, work units, ns); ``totals`` holds
    each endpoint's own total where the costs overlap (folded stacks charge every frame)."""

    endpoints: Mapping[str, Mapping[str, float]]
    totals: Mapping[str, float] = field(default_factory=dict)

    @property
    def functions(self) -> tuple[str, ...]:
        """Every function some endpoint runs, sorted."""
        return tuple(sorted({f for costs in self.endpoints.values() for f in costs}))

    def cost(self, endpoint: str) -> float:
        """What the endpoint cost in all: its stacks' counts, or its functions' costs."""
        if endpoint in self.totals:
            return float(self.totals[endpoint])
        return float(sum(self.endpoints[endpoint].values()))


def read_profile(path: Path | str) -> Profile:
    """The profile in ``path``: JSON when it starts with ``{``, else folded stacks."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(
            f"cannot read the profile {path}: {err}",
            hint="pass a folded-stack file (`curl -s HOST/debug/profile > profile.folded`) "
            'or a JSON file {"endpoints": {...}}',
        ) from err
    return parse_profile(text, source=str(path))


def parse_profile(text: str, *, source: str = "<profile>") -> Profile:
    """A profile from its text; ``source`` names it in errors."""
    profile = (
        _parse_json(text, source) if text.lstrip().startswith("{") else _parse_folded(text, source)
    )
    if not profile.endpoints:
        raise DataError(
            f"{source}: the profile names no endpoint",
            hint="each folded line is `/endpoint;function;... COUNT`; collect the profile "
            "after the service has served traffic",
        )
    return profile


def _parse_folded(text: str, source: str) -> Profile:
    """Folded stacks through the one folded parser (profile/formats.py), charged to every
    function of each stack once."""
    endpoints: dict[str, dict[str, float]] = {}
    totals: dict[str, float] = {}
    for (endpoint, frames), count in parse_folded(text, source=source).stacks.items():
        costs = endpoints.setdefault(endpoint, {})
        totals[endpoint] = totals.get(endpoint, 0.0) + count
        # A recursive function appears twice in one stack but is charged once.
        for function in dict.fromkeys(frame.name for frame in frames):
            costs[function] = costs.get(function, 0.0) + count
    return Profile(endpoints=endpoints, totals=totals)


def _parse_json(text: str, source: str) -> Profile:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(
            f"{source}:{err.lineno}: not valid JSON: {err.msg}",
            hint='write {"endpoints": {"/api/op/1": {"fn_a": 120}}}',
        ) from err
    top = data.get("endpoints") if isinstance(data, dict) else None
    if not isinstance(top, dict):
        raise DataError(
            f'{source}: the JSON profile has no "endpoints" object',
            hint='write {"endpoints": {"/api/op/1": {"fn_a": 120}}}: endpoint -> function -> cost',
        )
    endpoints: dict[str, dict[str, float]] = {}
    for endpoint, functions in top.items():
        if not isinstance(functions, dict):
            raise DataError(
                f'{source}: "endpoints"."{endpoint}" is not an object',
                hint='give each endpoint an object of function -> cost, e.g. {"fn_a": 120}',
            )
        costs: dict[str, float] = {}
        for function, value in functions.items():
            cost = None if isinstance(value, bool) else _number(str(value))
            if cost is None:
                raise DataError(
                    f'{source}: "endpoints"."{endpoint}"."{function}" is {value!r}',
                    hint="a cost is a non-negative number",
                )
            costs[str(function)] = cost
        endpoints[str(endpoint)] = costs
    return Profile(endpoints=endpoints)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
