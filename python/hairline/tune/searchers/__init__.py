"""The searchers of a tuning run: which configurations to evaluate next.

Every searcher is a pure function of the history (configurations told with their A/B's
effect against the default and its standard error), the pending configurations and a
seed, so a run resumed after a restart proposes what it would have proposed uninterrupted:
there is no state to save but the history itself. ``propose`` never returns the default,
a configuration told or pending, or one twice; fewer than ``n`` only when the space or the
searcher's plan is used up. ``best`` is the configuration a run recommends.

    SEARCHERS      the names ("bo", "hill", "single", "random", "tpe", "grid")
    OPTIONS        each searcher's options with their defaults
    propose(...)   the next configurations
    best(...)      the recommendation, by one rule for every searcher: the best observed
                   value, as a tuning run reports it (``TuningResult.best``)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hairline.tune.searchers.common import Observation, Told
from hairline.tune.space import Configuration, Space

__all__ = ["OPTIONS", "SEARCHERS", "Observation", "Told", "best", "check_options", "propose"]

SEARCHERS: tuple[str, ...] = ("bo", "hill", "single", "random", "tpe", "grid")

# Each option's default; None: worked out from the space (bo's "initial" is 2d + 1).
OPTIONS: dict[str, dict[str, int | float | bool | None]] = {
    "bo": {"initial": None, "samples": 128},
    "hill": {"min_improvement_se": 1.0},
    "single": {"points": 5, "combine": True},
    "random": {},
    "tpe": {"startup": 10},
    "grid": {},
}


def check_options(name: str, options: Mapping[str, object] | None) -> dict[str, object]:
    """The searcher's options with defaults filled in; ValueError naming an unknown
    searcher, an unknown option or a value of the wrong type, with what is valid."""
    if name not in OPTIONS:
        raise ValueError(f"unknown searcher {name!r}: use one of {', '.join(SEARCHERS)}")
    known = OPTIONS[name]
    given = dict(options or {})
    unknown = sorted(set(given) - set(known))
    if unknown:
        valid = ", ".join(sorted(known)) or "none"
        raise ValueError(
            f"unknown option {', '.join(map(repr, unknown))} for searcher {name!r}: "
            f"its options are {valid}"
        )
    merged: dict[str, object] = {**known, **given}
    for option, value in given.items():
        _check_value(name, option, value, known[option])
    return merged


def _check_value(name: str, option: str, value: object, default: object) -> None:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"option {option!r} of searcher {name!r} is true or false")
        return
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, float):
        if not number or float(value) < 0:  # type: ignore[arg-type]
            raise ValueError(f"option {option!r} of searcher {name!r} is a number >= 0")
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"option {option!r} of searcher {name!r} is a whole number >= 1")
    if option == "points" and value < 2:
        raise ValueError(f"option 'points' of searcher {name!r} is at least 2 (both ends)")


def propose(
    name: str,
    space: Space,
    history: Sequence[Told],
    n: int,
    *,
    pending: Sequence[Configuration] = (),
    seed: int,
    options: Mapping[str, object] | None = None,
) -> list[Configuration]:
    """Up to ``n`` new configurations to evaluate next (see the module's docstring)."""
    opts = check_options(name, options)
    if n < 1:
        return []
    if name == "random":
        from hairline.tune.searchers.random_search import propose_random

        return propose_random(space, history, n, pending, seed)
    if name == "grid":
        from hairline.tune.searchers.grid import propose_grid

        return propose_grid(space, history, n, pending)
    if name == "single":
        from hairline.tune.searchers.single import propose_single

        return propose_single(
            space, history, n, pending, points=_int(opts["points"]), combine=bool(opts["combine"])
        )
    if name == "hill":
        from hairline.tune.searchers.hill import propose_hill

        return propose_hill(
            space, history, n, pending, seed, min_improvement_se=_float(opts["min_improvement_se"])
        )
    if name == "tpe":
        # Optuna and scikit-learn take a second to import: only the searcher in use pays.
        from hairline.tune.searchers.tpe import propose_tpe

        return propose_tpe(space, history, n, pending, seed, startup=_int(opts["startup"]))
    from hairline.tune.searchers.bo import default_initial, propose_bo

    initial = default_initial(space) if opts["initial"] is None else _int(opts["initial"])
    return propose_bo(
        space, history, n, pending, seed, initial=initial, samples=_int(opts["samples"])
    )


def best(history: Sequence[Told]) -> Configuration | None:
    """The told configuration with the best observed value (the default, told first at 0,
    when nothing beats it); None when nothing told is feasible.

    One rule for every searcher, the one ``hairline tune`` reports and deploys
    (``TuningResult.best``), so that searchers are compared on what a user gets. BO's
    posterior mean is not used to pick: a rule only one searcher has makes the comparison
    unfair (bench/RESULTS.md, "Autotuning searchers", has what it changed).
    """
    feasible = [t for t in history if t.observation.value is not None]
    if not feasible:
        return None
    return max(feasible, key=lambda t: float(t.observation.value or 0.0)).config


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


def _float(value: object) -> float:
    assert isinstance(value, int | float)
    return float(value)
