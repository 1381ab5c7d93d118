"""Optuna's TPE through ask and tell (an option beside HHVM's searchers). Pure as far as the
caller sees: each call builds an in-memory study from the history (infeasible
configurations as failed trials, pending ones as running trials, which TPE's constant liar
counts), asks it, and throws it away; no Optuna storage, so nothing outlives the call.

TPE may ask for a configuration already told (integers and booleans repeat often); it is
asked again a few times, then the slot is filled by a uniform draw of an unused one.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from hairline.tune.searchers.common import Told, draw_unexplored, rng_for, taken
from hairline.tune.space import (
    BoolParam,
    ChoiceParam,
    Configuration,
    IntParam,
    Param,
    Space,
)

__all__ = ["DEFAULT_STARTUP", "propose_tpe"]

# Optuna's own default: random configurations until this many trials are complete.
DEFAULT_STARTUP = 10
ASKS_PER_CONFIG = 8


def _distribution(p: Param) -> BaseDistribution:
    if isinstance(p, BoolParam):
        return CategoricalDistribution((False, True))
    if isinstance(p, ChoiceParam):
        return CategoricalDistribution(p.choices)
    if isinstance(p, IntParam) and p.levels:
        return CategoricalDistribution(p.levels)
    if isinstance(p, IntParam):
        return IntDistribution(p.low, p.high, log=p.log)
    return FloatDistribution(p.low, p.high, log=p.log)


def propose_tpe(
    space: Space,
    history: Sequence[Told],
    n: int,
    pending: Sequence[Configuration],
    seed: int,
    *,
    startup: int,
) -> list[Configuration]:
    rng = rng_for(seed, history, pending, salt=4)
    used = taken(space, history, pending)
    dists = {p.name: _distribution(p) for p in space.params}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        # TPE's options beyond the defaults are "experimental" and say so at every call.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = TPESampler(seed=int(rng.integers(2**31)), n_startup_trials=startup)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for told in history:
            value = told.observation.value
            study.add_trial(
                create_trial(
                    state=TrialState.COMPLETE if value is not None else TrialState.FAIL,
                    value=value,
                    params=dict(told.config),
                    distributions=dists,
                )
            )
        for config in pending:
            study.add_trial(
                create_trial(state=TrialState.RUNNING, params=dict(config), distributions=dists)
            )
        out: list[Configuration] = []
        for _ in range(n * ASKS_PER_CONFIG):
            if len(out) == n or used.exhausted():
                break
            trial = study.ask(dists)
            asked: Configuration = {name: trial.params[name] for name in space.names}
            if asked not in used:
                used.add(asked)
                out.append(asked)
    return out + draw_unexplored(space, rng, n - len(out), used)
