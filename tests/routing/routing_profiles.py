"""Synthetic profiles with planted partitions, shared by the routing tests."""

from __future__ import annotations

import numpy as np

from hairline.routing.profile import Profile


def planted_profile(
    groups: int = 4,
    endpoints_per_group: int = 8,
    functions_per_group: int = 12,
    functions_per_endpoint: int = 8,
    common: int = 2,
    noise_calls: int = 1,
    seed: int = 0,
) -> tuple[Profile, dict[str, int]]:
    """Each endpoint runs ``functions_per_endpoint`` of its group's functions, the common
    ones, and ``noise_calls`` cheap functions of other groups (the mess of a real profile).
    Returns the profile and each endpoint's planted group."""
    rng = np.random.default_rng(seed)
    endpoints: dict[str, dict[str, float]] = {}
    truth: dict[str, int] = {}
    for g in range(groups):
        for e in range(endpoints_per_group):
            name = f"/api/op/{g * endpoints_per_group + e}"
            own = rng.choice(functions_per_group, size=functions_per_endpoint, replace=False)
            costs = {f"g{g}_f{int(f)}": float(rng.integers(50, 500)) for f in own}
            costs |= {f"common_{c}": 100.0 for c in range(common)}
            for _ in range(noise_calls):
                other = int(rng.choice([h for h in range(groups) if h != g]))
                costs[f"g{other}_f{int(rng.integers(functions_per_group))}"] = 2.0
            endpoints[name] = costs
            truth[name] = g
    return Profile(endpoints=endpoints), truth
