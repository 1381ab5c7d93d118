"""bench/stats/bisect_budget.py: the simulated bisection fails when, and only when, it should."""

from __future__ import annotations

import numpy as np
from benchscript import load_bench


def test_a_clear_culprit_in_quiet_trials_never_fails_and_an_invisible_one_always_does() -> None:
    """False failure: none: seeded. At an sd of 0.3% the steps are 25 standard errors apart;
    a culprit of 0% cannot read as a regression at a 5% threshold."""
    bench = load_bench("stats/bisect_budget.py")
    settings = {"trials": 6, "threshold_pct": 5.0, "bisections": 2000, "alpha": 0.05}

    clear = bench.failure_rate(0.3, effect_pct=7.5, rng=np.random.default_rng(1), **settings)
    invisible = bench.failure_rate(0.3, effect_pct=0.0, rng=np.random.default_rng(1), **settings)

    assert clear == (0.0, 0.0)
    assert invisible[0] == 1.0


def test_noisier_trials_fail_more_often() -> None:
    """False failure: none: seeded, and the same draws' scale only grows."""
    bench = load_bench("stats/bisect_budget.py")
    settings = {"trials": 4, "threshold_pct": 4.0, "bisections": 4000, "alpha": 0.05}
    rates = [
        bench.failure_rate(sd, effect_pct=7.5, rng=np.random.default_rng(2), **settings)[0]
        for sd in (1.0, 3.0, 5.0)
    ]
    assert rates[0] < rates[1] < rates[2]
