"""Which factors move which latency quantiles: Treadmill's quantile-regression attribution
with intervals from a bootstrap clustered by run.

The model, fitted at each quantile ``q`` of per-request latency::

    Q_q(latency | treatment) = intercept + sum over terms of estimate * code(treatment)

Coding: a factor of two levels is coded -1/2 (its first level) and +1/2 (its second), so
its estimate is level 2 minus level 1 averaged over the other factors, and the estimate of
an interaction of two such factors is a difference of differences. A factor of three or
more levels gets one 0/1 column per level after the first ("threads=8"), whose estimate is
that level minus the first. An interaction's columns are products of its factors' columns
(``interactions`` is the highest order included).

Requests of one run are not independent (a slow host, a long pause, a warm cache are shared
by the run), so the intervals come from a clustered bootstrap: each replicate resamples the
runs of every treatment with replacement, within the treatment so that every term stays
estimable, refits, and the interval is the percentile interval of the replicates. With few
runs a resample of runs varies by a factor ``(R - 1) / R`` less than new runs would, and
its spread is itself uncertain, so the replicates' deviations from the estimate are scaled
by ``sqrt(R / (R - 1))`` (``R`` the harmonic mean of runs per treatment) times
``t(runs - treatments) / z`` at the interval's level, as stats/bootstrap.py corrects for few
clusters. Measured on the tests' simulation (2x2 design, 200 seeds, 95% intervals at p50
and p99, 6,000 requests): 181 to 195 of 200 cover per term with 2, 3, 6 or 10 runs per
treatment; with 2 runs the plain percentile interval covers 146-159, with the first factor
alone 167-178; with 6 runs, plain 179-190.

Speed: latencies are rounded to a relative precision of 0.1% (each moves by 0.05% at most,
as in an HDR histogram of 3 significant digits) and identical (run, value) pairs become one
weighted row, so a refit costs treatments times distinct values, not requests, and a
replicate's weights are one product of its run multiplicities with the runs' counts. When
the model is saturated (as many terms as treatments) the fit is the treatments' own
quantiles mapped through the inverse design; only other designs go through the quantile
regression of stats/quantreg.py (attribute/grouped.py, which refits each replicate on
windows of values around the point fit).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from hairline.attribute.grouped import grouped_fit
from hairline.errors import ConfigError, DataError
from hairline.stats import dist

__all__ = ["Attribution", "Effect", "QuantileAttribution", "attribute"]

# Values 0.1% apart share a row: within 0.05% of the value, the precision of an HDR
# histogram with 3 significant digits, and about 2,300 distinct values per decade.
_RELATIVE_STEP = 1e-3
_LOG_STEP = math.log1p(_RELATIVE_STEP)
_MIN_BOOTSTRAP = 20


@dataclass(frozen=True)
class Effect:
    """One term's change of a quantile, in microseconds, with its bootstrap interval.

    ``share`` is the term's part of the variance of the fitted quantile across every level
    combination of the factors (the full grid, each combination counted once):
    ``estimate^2 * var(code)`` over that variance, where ``var(code)`` is the variance of
    the term's column across the grid (1/4 for a two-level factor, 1/16 for an interaction
    of two). In an orthogonal design (every factor of two levels) these parts add up to the
    variance exactly; otherwise (3+ levels, whose 0/1 columns are correlated) they are
    divided by the larger of the variance and their sum, so shares stay in 0..1 and sum to
    at most 1. All zero when the quantile does not change across the grid.
    """

    term: str
    estimate_us: float
    low_us: float
    high_us: float
    share: float


@dataclass(frozen=True)
class QuantileAttribution:
    quantile: float
    intercept_us: float
    effects: tuple[Effect, ...]


@dataclass(frozen=True)
class Attribution:
    factors: dict[str, tuple[str, ...]]
    quantiles: tuple[QuantileAttribution, ...]
    runs: int
    requests: int
    bootstrap: int
    confidence: float

    def best(self, quantile: float) -> tuple[dict[str, str], float]:
        """The level combination with the lowest predicted quantile, and that value (us)."""
        fit = next((a for a in self.quantiles if math.isclose(a.quantile, quantile)), None)
        if fit is None:
            have = ", ".join(f"{a.quantile:g}" for a in self.quantiles)
            raise ConfigError(
                f"quantile {quantile:g} was not analysed",
                hint=f"choose one of the analysed quantiles ({have}) or add it to quantiles",
            )
        terms = [e.term for e in fit.effects]
        estimates = np.array([e.estimate_us for e in fit.effects])
        grid = _grid(self.factors)
        predicted = fit.intercept_us + _codes(terms, self.factors, grid) @ estimates
        at = int(np.argmin(predicted))
        return dict(zip(self.factors, grid[at], strict=True)), float(predicted[at])


def attribute(
    latency_us: NDArray[np.float64],
    run_of: NDArray[np.int64],
    run_levels: Sequence[Mapping[str, str]],
    factors: Mapping[str, Sequence[str]],
    *,
    quantiles: Sequence[float] = (0.5, 0.9, 0.99, 0.999),
    interactions: int = 2,
    bootstrap: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
) -> Attribution:
    """The attribution of each quantile of ``latency_us`` (one per request, ``run_of`` its
    run) to the ``factors`` (factor -> levels, the first the reference) set in each run
    (``run_levels``). Bad settings raise ``ConfigError``, bad data ``DataError``."""
    levels = _checked_factors(factors)
    _check_settings(quantiles, interactions, bootstrap, confidence)
    latency, runs = _checked_data(latency_us, run_of, run_levels, levels)
    treatments, treatment_of_run = _treatments(run_levels, levels, runs)
    terms = _terms(levels, interactions)
    design = np.column_stack([np.ones(len(treatments)), _codes(terms, levels, treatments)])
    _check_estimable(design, terms, treatments, levels)
    cells = _compressed(latency, runs, treatment_of_run, len(treatments))
    _check_runs_per_treatment(cells, treatments, levels)

    rng = np.random.default_rng(seed)
    replicate_counts = [_resampled(counts, bootstrap, rng) for _, counts in cells]
    runs_per_treatment = np.array([counts.shape[0] for _, counts in cells], dtype=float)
    harmonic = len(runs_per_treatment) / float(np.sum(1.0 / runs_per_treatment))
    freedom = len(run_levels) - len(treatments)
    inflation = math.sqrt(harmonic / (harmonic - 1.0)) * float(
        dist.t_ppf(0.5 + confidence / 2.0, freedom) / dist.norm_ppf(0.5 + confidence / 2.0)
    )
    saturated = design.shape[0] == design.shape[1]
    grid_codes = _codes(terms, levels, _grid(levels))
    tail = (1.0 - confidence) / 2.0

    if saturated:
        fits = _saturated_fits(design, cells, replicate_counts, quantiles)
    else:
        fits = [grouped_fit(design, cells, replicate_counts, q) for q in quantiles]
    out = []
    for q, (coef, replicates) in zip(quantiles, fits, strict=True):
        replicates = coef + inflation * (replicates - coef)
        low, high = np.quantile(replicates, [tail, 1.0 - tail], axis=0)
        shares = _shares(coef[1:], grid_codes)
        effects = tuple(
            Effect(term, float(coef[j + 1]), float(low[j + 1]), float(high[j + 1]), shares[j])
            for j, term in enumerate(terms)
        )
        out.append(QuantileAttribution(float(q), float(coef[0]), effects))
    return Attribution(
        factors=dict(levels),
        quantiles=tuple(out),
        runs=len(run_levels),
        requests=int(latency.size),
        bootstrap=bootstrap,
        confidence=confidence,
    )


def _checked_factors(factors: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    if not factors:
        raise ConfigError("no factors to attribute to", hint="name at least one factor")
    levels: dict[str, tuple[str, ...]] = {}
    for name, values in factors.items():
        if not name or ":" in name or "=" in name:
            raise ConfigError(
                f"factor name {name!r} is empty or holds ':' or '='",
                hint="rename the factor: ':' joins interaction terms, '=' names a level",
            )
        values = tuple(str(v) for v in values)
        if len(values) < 2:
            raise ConfigError(
                f"factor {name!r} has {len(values)} level(s): a factor needs two or more",
                hint=f"add a second level to factors.{name}, or drop the factor",
            )
        if len(set(values)) != len(values):
            raise ConfigError(
                f"factor {name!r} repeats a level: {list(values)}",
                hint=f"give each level of factors.{name} once",
            )
        levels[name] = values
    return levels


def _check_settings(
    quantiles: Sequence[float], interactions: int, bootstrap: int, confidence: float
) -> None:
    if not quantiles or any(not 0.0 < q < 1.0 for q in quantiles):
        raise ConfigError(
            f"quantiles must lie strictly between 0 and 1, got {list(quantiles)}",
            hint="write quantiles as fractions, e.g. [0.5, 0.99] for p50 and p99",
        )
    if len(set(quantiles)) != len(quantiles):
        raise ConfigError(f"quantiles repeat: {list(quantiles)}", hint="give each quantile once")
    if interactions < 1:
        raise ConfigError(
            f"interactions must be at least 1, got {interactions}",
            hint="interactions = 1 fits main effects only, 2 adds two-factor interactions",
        )
    if bootstrap < _MIN_BOOTSTRAP:
        raise ConfigError(
            f"bootstrap must be at least {_MIN_BOOTSTRAP} replicates, got {bootstrap}",
            hint="percentile intervals from fewer replicates are noise; 200 is the default",
        )
    if not 0.0 < confidence < 1.0:
        raise ConfigError(
            f"confidence must lie strictly between 0 and 1, got {confidence}",
            hint="write it as a fraction, e.g. 0.95",
        )


def _checked_data(
    latency_us: NDArray[np.float64],
    run_of: NDArray[np.int64],
    run_levels: Sequence[Mapping[str, str]],
    levels: Mapping[str, tuple[str, ...]],
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    latency = np.asarray(latency_us, dtype=np.float64)
    runs = np.asarray(run_of)
    if latency.ndim != 1 or runs.shape != latency.shape:
        raise DataError(
            f"latency_us and run_of must be one value per request, got shapes "
            f"{latency.shape} and {runs.shape}"
        )
    if not np.all(np.isfinite(latency)) or np.any(latency < 0):
        raise DataError(
            "latencies must be finite and >= 0",
            hint="drop requests that failed or never completed before attributing",
        )
    if not np.issubdtype(runs.dtype, np.integer):
        raise DataError(f"run_of must hold integer run indexes, got {runs.dtype}")
    count = len(run_levels)
    if runs.size and (runs.min() < 0 or runs.max() >= count):
        raise DataError(f"run_of holds run indexes outside 0..{count - 1}")
    for index, chosen in enumerate(run_levels):
        for name, values in levels.items():
            if chosen.get(name) not in values:
                raise DataError(
                    f"run {index} sets factor {name!r} to {chosen.get(name)!r}, "
                    f"not one of its levels {list(values)}",
                    hint=f"add the level to factors.{name} or leave the run out",
                )
        extra = sorted(set(chosen) - set(levels))
        if extra:
            raise DataError(
                f"run {index} sets {extra}, which are not factors",
                hint="declare them as factors or leave them out of the run's levels",
            )
    empty = np.flatnonzero(np.bincount(runs, minlength=count) == 0)
    if empty.size:
        raise DataError(
            f"run(s) {empty.tolist()} have no requests",
            hint="leave runs without measured requests out of run_levels",
        )
    return latency, runs.astype(np.int64)


def _treatments(
    run_levels: Sequence[Mapping[str, str]],
    levels: Mapping[str, tuple[str, ...]],
    runs: NDArray[np.int64],
) -> tuple[list[tuple[str, ...]], NDArray[np.int64]]:
    """The distinct level combinations, in order of first run, and each run's index."""
    index: dict[tuple[str, ...], int] = {}
    of_run = [index.setdefault(tuple(c[f] for f in levels), len(index)) for c in run_levels]
    return list(index), np.array(of_run, dtype=np.int64)


def _terms(levels: Mapping[str, tuple[str, ...]], interactions: int) -> list[str]:
    columns = {
        name: [name] if len(values) == 2 else [f"{name}={v}" for v in values[1:]]
        for name, values in levels.items()
    }
    terms: list[str] = []
    for order in range(1, min(interactions, len(levels)) + 1):
        for group in itertools.combinations(levels, order):
            terms.extend(":".join(p) for p in itertools.product(*(columns[f] for f in group)))
    return terms


def _codes(
    terms: Sequence[str],
    levels: Mapping[str, tuple[str, ...]],
    treatments: Sequence[tuple[str, ...]],
) -> NDArray[np.float64]:
    """Treatments x terms: the coding of the module docstring."""
    position = {name: i for i, name in enumerate(levels)}
    out = np.ones((len(treatments), len(terms)))
    for j, term in enumerate(terms):
        for part in term.split(":"):
            name, _, level = part.partition("=")
            values = [t[position[name]] for t in treatments]
            if level:
                column = [1.0 if v == level else 0.0 for v in values]
            else:
                column = [-0.5 if v == levels[name][0] else 0.5 for v in values]
            out[:, j] *= column
    return out


def _grid(levels: Mapping[str, tuple[str, ...]]) -> list[tuple[str, ...]]:
    return list(itertools.product(*levels.values()))


def _check_estimable(
    design: NDArray[np.float64],
    terms: Sequence[str],
    treatments: Sequence[tuple[str, ...]],
    levels: Mapping[str, tuple[str, ...]],
) -> None:
    names = ["intercept", *terms]
    for j in range(1, design.shape[1]):
        before = design[:, :j]
        if np.linalg.matrix_rank(design[:, : j + 1]) > np.linalg.matrix_rank(before):
            continue
        weights = np.linalg.lstsq(before, design[:, j], rcond=None)[0]
        partners = [names[i] for i in np.flatnonzero(np.abs(weights) > 1e-9)]
        raise ConfigError(
            f"term {names[j]!r} cannot be told apart from {' and '.join(partners) or 'others'} "
            f"with the {len(treatments)} level combinations run "
            f"(of {math.prod(len(v) for v in levels.values())})",
            hint="lower interactions (1 fits main effects only) or run a fuller fraction of "
            "the design, so that no term is aliased with another",
        )


def _compressed(
    latency: NDArray[np.float64],
    runs: NDArray[np.int64],
    treatment_of_run: NDArray[np.int64],
    treatment_count: int,
) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
    """Per treatment: its distinct rounded values, and its runs x values request counts."""
    rounded = _rounded(latency)
    treatment = treatment_of_run[runs]
    cells = []
    for t in range(treatment_count):
        rows = treatment == t
        values, value_index = np.unique(rounded[rows], return_inverse=True)
        its_runs, run_index = np.unique(runs[rows], return_inverse=True)
        flat = run_index * values.size + value_index
        counts = np.bincount(flat, minlength=its_runs.size * values.size)
        cells.append((values, counts.reshape(its_runs.size, values.size).astype(np.float64)))
    return cells


def _rounded(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Each value moved to the nearest of a geometric ladder of step ``_RELATIVE_STEP``."""
    positive = values > 0
    rounded = np.zeros_like(values)
    rungs = np.round(np.log(values[positive]) / _LOG_STEP)
    rounded[positive] = np.exp(rungs * _LOG_STEP)
    return rounded


def _check_runs_per_treatment(
    cells: Sequence[tuple[NDArray[np.float64], NDArray[np.float64]]],
    treatments: Sequence[tuple[str, ...]],
    levels: Mapping[str, tuple[str, ...]],
) -> None:
    for (_, counts), treatment in zip(cells, treatments, strict=True):
        if counts.shape[0] < 2:
            named = ", ".join(f"{f}={v}" for f, v in zip(levels, treatment, strict=True))
            raise DataError(
                f"treatment {named} has {counts.shape[0]} run: the bootstrap clustered by "
                "run needs at least 2 runs of every treatment",
                hint="repeat every treatment at least twice (the experiment's repetitions)",
            )


def _resampled(
    counts: NDArray[np.float64], bootstrap: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """Replicates x values: the counts of a resample of the runs with replacement."""
    run_count = counts.shape[0]
    draws = rng.integers(0, run_count, size=(bootstrap, run_count))
    picked = np.zeros((bootstrap, run_count))
    np.add.at(picked, (np.arange(bootstrap)[:, None], draws), 1.0)
    result: NDArray[np.float64] = picked @ counts
    return result


def _cell_quantiles(
    values: NDArray[np.float64], counts: NDArray[np.float64], quantiles: Sequence[float]
) -> NDArray[np.float64]:
    """quantiles x rows of ``counts``: the smallest value whose share at or below is >= q
    (a minimiser of the check loss) of the values weighted by each row of ``counts``."""
    cumulative = np.cumsum(counts, axis=-1)
    out = np.empty((len(quantiles), *counts.shape[:-1]))
    for i, q in enumerate(quantiles):
        # The relative slack keeps a share that is q up to rounding from moving up a value.
        target = q * cumulative[..., -1:] * (1.0 - 1e-12)
        out[i] = values[np.minimum((cumulative < target).sum(axis=-1), values.size - 1)]
    return out


def _saturated_fits(
    design: NDArray[np.float64],
    cells: Sequence[tuple[NDArray[np.float64], NDArray[np.float64]]],
    replicate_counts: Sequence[NDArray[np.float64]],
    quantiles: Sequence[float],
) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
    """Per quantile, the coefficients and their replicates (replicates x coefficients)."""
    inverse = np.linalg.inv(design)
    # Both are quantiles x treatments (x replicates).
    point = np.stack([_cell_quantiles(v, c.sum(axis=0), quantiles) for v, c in cells], axis=1)
    replicates = np.stack(
        [
            _cell_quantiles(v, r, quantiles)
            for (v, _), r in zip(cells, replicate_counts, strict=True)
        ],
        axis=1,
    )
    return [(inverse @ point[i], replicates[i].T @ inverse.T) for i in range(len(quantiles))]


def _shares(estimates: NDArray[np.float64], grid_codes: NDArray[np.float64]) -> list[float]:
    parts = estimates**2 * grid_codes.var(axis=0)
    total = max(float(np.var(grid_codes @ estimates)), float(parts.sum()))
    if total <= 0.0:
        return [0.0] * len(estimates)
    return [float(p / total) for p in parts]
