"""Planning an experiment: how many trials, which design, how many hosts and requests.

Two questions, answered from A/A data or from variance components:

- Trials (ServiceLab, servicelab-osdi24.txt section 4, figure 6). Trials are independent
  repetitions of one A/B comparison, so the per-trial effect estimates have a standard
  deviation ``sd`` and the mean of ``n`` of them has a standard error ``sd / sqrt(n)``. The
  half-width of the interval is ``q * sd / sqrt(n)`` (:func:`half_width_curve`), and the
  trials needed to detect an effect of ``threshold`` with a two-sided test at ``alpha`` and
  ``power`` follow from it (:func:`trials_needed`). ``sd`` comes from the per-trial effects
  of A/A runs (:func:`trial_sd_from_aa`, the paper's "(A' - A) / A" of each A/A pair) or
  from the standard error of a design (:func:`trial_sd_from_components`).

- Design and sizes (Perflab, perflab-benchmark-design.txt section 3.1.2). Among the four
  designs and their hosts ``H``, requests per arm ``R`` and repetitions ``T``, the one with
  the smallest standard error (section 4.2.1) within a budget (:func:`plan_designs`). The
  cost model extends the paper's ``S_f + R (C_f + T C_m) <= B`` from one host to ``H``
  hosts and two arms, counting machine time in host-seconds::

      cost_s = batches * H * setup_s + 2 * R * (request_s + T * repetition_s)

  ``setup_s`` (S_f) is the set-up of one host for one batch (restart, cache flush, warm-up),
  paid once per host per batch: once for the single-batch designs, twice for the two-batch
  ones. ``request_s`` (C_f) is the fixed cost of bringing one request into the benchmark and
  ``repetition_s`` (C_m) the cost of each execution; every arm runs ``R`` requests ``T``
  times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from numpy.typing import NDArray

from hairline.kit.jsonout import ArrayJson
from hairline.stats import dist
from hairline.stats.data import ARM_A, ARM_B, MetricSample
from hairline.stats.designs import (
    DESIGNS,
    Design,
    StandardError,
    VarianceComponents,
    standard_error_grid,
    standard_error_terms,
)

__all__ = [
    "CostModel",
    "DesignPlan",
    "HalfWidthCurve",
    "TestKind",
    "TrialsPlan",
    "detectable_effect",
    "half_width_curve",
    "plan_designs",
    "power_at",
    "trial_effects",
    "trial_sd_from_aa",
    "trial_sd_from_components",
    "trials_by_design",
    "trials_needed",
]

TestKind = Literal["z", "t"]
FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class HalfWidthCurve:
    """Interval half-width as a function of the number of trials (ServiceLab figure 6)."""

    trials: Annotated[IntArray, ArrayJson("integer")]
    half_width: Annotated[FloatArray, ArrayJson("number")]
    sd_per_trial: float
    alpha: float
    test: TestKind


@dataclass(frozen=True)
class TrialsPlan:
    """Trials needed to detect ``threshold`` at ``alpha`` with at least ``power``.

    ``achieved_power`` is the power at ``trials``; ``half_width`` the interval half-width
    there. ``design`` is set when the per-trial standard deviation came from a design.
    """

    threshold: float
    alpha: float
    power: float
    sd_per_trial: float
    trials: int
    achieved_power: float
    half_width: float
    test: TestKind
    design: Design | None = None


@dataclass(frozen=True)
class CostModel:
    """Machine-time costs of one experiment, in seconds (see the module docstring).

    ``max_hosts`` and ``max_repetitions`` bound the search.
    """

    setup_s: float
    request_s: float
    repetition_s: float
    max_hosts: int
    max_repetitions: int = 32

    def __post_init__(self) -> None:
        for name in ("setup_s", "request_s", "repetition_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value}")
        if self.request_s + self.repetition_s <= 0:
            raise ValueError("request_s and repetition_s cannot both be 0: requests would be free")
        for name in ("max_hosts", "max_repetitions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def cost_s(self, design: Design, hosts: int, requests: int, repetitions: int) -> float:
        """Host-seconds of one experiment of ``design`` at these sizes."""
        batches = 1 if design in ("unbalanced", "request-balanced") else 2
        per_request = self.request_s + repetitions * self.repetition_s
        return batches * hosts * self.setup_s + 2 * requests * per_request


@dataclass(frozen=True)
class DesignPlan:
    """The sizes of one design that minimise its standard error within the budget."""

    design: Design
    hosts: int
    requests: int
    repetitions: int
    standard_error: float
    cost_s: float
    terms: StandardError


def _validate_alpha_power(alpha: float, power: float | None = None) -> None:
    if not (isinstance(alpha, float | int) and 0 < alpha < 1):
        raise ValueError(f"alpha must be between 0 and 1, e.g. 0.05; got {alpha!r}")
    if power is not None and not (isinstance(power, float | int) and 0 < power < 1):
        raise ValueError(f"power must be between 0 and 1, e.g. 0.8; got {power!r}")


def _validate_sd(sd_per_trial: float) -> None:
    if not (math.isfinite(sd_per_trial) and sd_per_trial > 0):
        raise ValueError(
            f"sd_per_trial must be a finite standard deviation > 0, got {sd_per_trial}"
        )


def _validate_test(test: str) -> None:
    if test not in ("z", "t"):
        raise ValueError(f"test must be 'z' (known sd) or 't' (sd estimated); got {test!r}")


def _validate_trial_effects(aa: MetricSample | Sequence[MetricSample]) -> list[MetricSample]:
    trials: list[MetricSample]
    if isinstance(aa, MetricSample):
        aa.require("trial")
        assert aa.trial is not None  # checked above
        trials = [aa.select(aa.trial == t) for t in np.unique(aa.trial)]
    else:
        trials = list(aa)
        for i, trial in enumerate(trials):
            if not isinstance(trial, MetricSample):
                raise TypeError(f"A/A trial {i} is a {type(trial).__name__}, not a MetricSample")
    for i, trial in enumerate(trials):
        arms = set(np.unique(trial.arm).tolist())
        if not {ARM_A, ARM_B} <= arms:
            raise ValueError(
                f"A/A trial {i}: column 'arm' holds {sorted(arms)}; each trial needs rows of "
                "both arm 0 (A) and arm 1 (A')"
            )
    return trials


def trial_effects(
    aa: MetricSample | Sequence[MetricSample], *, relative: bool = True
) -> FloatArray:
    """The effect of each A/A trial: (mean(A') - mean(A)) / mean(A), or the difference.

    ``aa`` is one sample per trial, or one sample whose ``trial`` column separates them.
    Arm 1 plays A'. A trial whose mean(A) is 0 gives NaN when ``relative``.
    """
    trials = _validate_trial_effects(aa)
    effects = np.empty(len(trials))
    for i, trial in enumerate(trials):
        mean_a = float(np.mean(trial.arm_values(ARM_A)))
        diff = float(np.mean(trial.arm_values(ARM_B))) - mean_a
        effects[i] = (diff / mean_a if mean_a != 0 else math.nan) if relative else diff
    return effects


def trial_sd_from_aa(
    aa: Sequence[float] | FloatArray | MetricSample | Sequence[MetricSample],
    *,
    relative: bool = True,
) -> float:
    """The standard deviation of one trial's effect, from A/A runs (ServiceLab figure 6).

    ``aa`` is either the per-trial effect estimates themselves or the A/A samples (see
    :func:`trial_effects`). Needs at least two finite effects.
    """
    if isinstance(aa, MetricSample) or (
        isinstance(aa, Sequence) and len(aa) > 0 and isinstance(aa[0], MetricSample)
    ):
        effects = trial_effects(aa, relative=relative)  # type: ignore[arg-type]
    else:
        effects = np.asarray(aa, dtype=np.float64)
    finite = effects[np.isfinite(effects)]
    if finite.size < 2:
        raise ValueError(
            f"A/A data has {finite.size} usable trial effects; the spread needs at least 2 trials"
        )
    return float(np.std(finite, ddof=1))


def trial_sd_from_components(
    components: VarianceComponents,
    *,
    design: Design,
    hosts: int,
    requests: int,
    repetitions: int = 1,
    relative: bool = False,
) -> float:
    """The standard deviation of one trial's effect: the design's standard error.

    With ``relative`` it is divided by ``components.mu``, the mean of arm A, which must then
    be non-zero (standardised components such as Table 1's have no meaningful relative
    scale).
    """
    se = standard_error_terms(
        design, components, hosts=hosts, requests=requests, repetitions=repetitions
    ).se
    if not relative:
        return se
    if components.mu == 0:
        raise ValueError("components.mu is 0: a relative standard deviation needs the mean of A")
    return se / abs(components.mu)


def _quantile(alpha: float, test: TestKind, trials: IntArray) -> FloatArray:
    if test == "z":
        return np.full(trials.shape, float(dist.norm_ppf(1 - alpha / 2)))
    with np.errstate(invalid="ignore"):
        q = dist.t_ppf(1 - alpha / 2, trials - 1)
    return np.where(trials >= 2, q, np.inf)


def half_width_curve(
    sd_per_trial: float, *, max_trials: int = 30, alpha: float = 0.05, test: TestKind = "z"
) -> HalfWidthCurve:
    """Half-width of the 1 - alpha interval with 1 to ``max_trials`` trials.

    ``test="z"`` treats the per-trial spread as known (ServiceLab's "two standard
    deviations"); ``"t"`` uses Student's t with n - 1 degrees of freedom, infinite at n = 1.
    """
    _validate_sd(sd_per_trial)
    _validate_alpha_power(alpha)
    _validate_test(test)
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
        raise ValueError(f"max_trials must be a positive integer, got {max_trials!r}")
    trials = np.arange(1, max_trials + 1, dtype=np.int64)
    half = _quantile(alpha, test, trials) * sd_per_trial / np.sqrt(trials)
    return HalfWidthCurve(
        trials=trials, half_width=half, sd_per_trial=sd_per_trial, alpha=alpha, test=test
    )


def _power(
    trials: IntArray, sd_per_trial: float, threshold: float, alpha: float, test: TestKind
) -> FloatArray:
    """Power of the two-sided test of zero effect when the true effect is ``threshold``."""
    shift = abs(threshold) * np.sqrt(trials) / sd_per_trial
    q = _quantile(alpha, test, trials)
    if test == "z":
        return np.asarray(dist.norm_sf(q - shift) + dist.norm_cdf(-q - shift), dtype=np.float64)
    df = np.maximum(trials - 1, 1)
    power = dist.nct_sf(q, df, shift) + dist.nct_cdf(-q, df, shift)
    return np.asarray(np.where(trials >= 2, power, 0.0), dtype=np.float64)


def power_at(
    sd_per_trial: float, trials: int, effect: float, *, alpha: float = 0.05, test: TestKind = "t"
) -> float:
    """The probability that ``trials`` trials with per-trial spread ``sd_per_trial`` flag a
    true ``effect`` (same units) in a two-sided test at ``alpha``."""
    _validate_sd(sd_per_trial)
    _validate_alpha_power(alpha)
    _validate_test(test)
    n = np.array([trials], dtype=np.int64)
    return float(_power(n, sd_per_trial, effect, alpha, test)[0])


def detectable_effect(
    sd_per_trial: float,
    trials: int,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    test: TestKind = "t",
) -> float:
    """The smallest effect that ``trials`` trials detect with ``power``: the minimum
    detectable effect, in the units of ``sd_per_trial``. With ``test="t"`` it is found on
    the noncentral t (a 2-trial t test needs about 3.3 times the z answer); infinite below
    the 2 trials a t test needs."""
    _validate_sd(sd_per_trial)
    _validate_alpha_power(alpha, power)
    _validate_test(test)
    if test == "t" and trials < 2:
        return math.inf
    z_total = float(dist.norm_ppf(1 - alpha / 2) + dist.norm_ppf(power))
    low, high = 0.0, 4.0 * z_total * sd_per_trial / math.sqrt(trials)
    while power_at(sd_per_trial, trials, high, alpha=alpha, test=test) < power:
        high *= 2.0
    for _ in range(60):  # bisection to far below any reported digit
        mid = (low + high) / 2.0
        if power_at(sd_per_trial, trials, mid, alpha=alpha, test=test) < power:
            low = mid
        else:
            high = mid
    return high


def trials_needed(
    sd_per_trial: float,
    *,
    threshold: float,
    alpha: float = 0.05,
    power: float = 0.8,
    test: TestKind = "z",
    max_trials: int = 100_000,
) -> TrialsPlan:
    """The fewest trials whose two-sided test at ``alpha`` detects ``threshold`` with ``power``.

    ``threshold`` is in the units of ``sd_per_trial`` (a fraction for relative effects).
    ``test="z"`` gives ``ceil(((z_{1-alpha/2} + z_power) * sd / threshold)^2)``; ``"t"``
    searches with the noncentral t for an analysis that estimates the spread from the
    trials themselves (at least 2). Raises ``ValueError`` when even ``max_trials`` fall short.
    """
    _validate_sd(sd_per_trial)
    _validate_alpha_power(alpha, power)
    _validate_test(test)
    if not (math.isfinite(threshold) and threshold != 0):
        raise ValueError(f"threshold must be a finite non-zero effect, got {threshold}")
    z_total = float(dist.norm_ppf(1 - alpha / 2) + dist.norm_ppf(power))
    guess = max(1, math.ceil((z_total * sd_per_trial / abs(threshold)) ** 2))
    if guess > max_trials:
        raise ValueError(
            f"detecting {threshold:g} needs about {guess} trials, more than max_trials="
            f"{max_trials}; raise the threshold or reduce the per-trial spread"
        )
    # The z formula ignores the far tail and the t test needs a few more trials than z, so
    # the answer lies just around the guess.
    low = max(1 if test == "z" else 2, guess - 2)
    candidates = np.arange(low, min(max_trials, low + 64) + 1, dtype=np.int64)
    powers = _power(candidates, sd_per_trial, threshold, alpha, test)
    reached = np.flatnonzero(powers >= power)
    if reached.size == 0:
        raise ValueError(f"no number of trials up to {candidates[-1]} reaches power {power}")
    n = int(candidates[reached[0]])
    return TrialsPlan(
        threshold=float(threshold),
        alpha=float(alpha),
        power=float(power),
        sd_per_trial=float(sd_per_trial),
        trials=n,
        achieved_power=float(powers[reached[0]]),
        half_width=float(
            _quantile(alpha, test, np.array([n], dtype=np.int64))[0] * sd_per_trial / math.sqrt(n)
        ),
        test=test,
    )


def trials_by_design(
    components: VarianceComponents,
    *,
    hosts: int,
    requests: int,
    repetitions: int = 1,
    threshold: float,
    alpha: float = 0.05,
    power: float = 0.8,
    relative: bool = False,
    test: TestKind = "z",
) -> tuple[TrialsPlan, ...]:
    """Trials needed by each of the four designs at the same sizes, best design first."""
    plans = []
    for design in DESIGNS:
        sd = trial_sd_from_components(
            components,
            design=design,
            hosts=hosts,
            requests=requests,
            repetitions=repetitions,
            relative=relative,
        )
        plan = trials_needed(sd, threshold=threshold, alpha=alpha, power=power, test=test)
        plans.append(dataclasses.replace(plan, design=design))
    return tuple(sorted(plans, key=lambda p: (p.trials, p.sd_per_trial)))


def _validate_plan_designs(
    components: VarianceComponents, budget_s: float, costs: CostModel, designs: Sequence[str]
) -> None:
    if not isinstance(components, VarianceComponents):
        raise TypeError("components must be a VarianceComponents")
    if not isinstance(costs, CostModel):
        raise TypeError("costs must be a CostModel")
    if not (math.isfinite(budget_s) and budget_s > 0):
        raise ValueError(f"budget_s must be a positive number of host-seconds, got {budget_s}")
    unknown = [d for d in designs if d not in DESIGNS]
    if unknown or not designs:
        raise ValueError(f"designs must be among {', '.join(DESIGNS)}; got {list(designs)}")


def _best_sizes(
    design: Design, components: VarianceComponents, budget_s: float, costs: CostModel
) -> DesignPlan | None:
    single_batch = design in ("unbalanced", "request-balanced")
    step = 2 if single_batch else 1
    hosts = np.arange(step, costs.max_hosts + 1, step, dtype=np.int64)
    if hosts.size == 0:
        return None
    repetitions = np.arange(1, costs.max_repetitions + 1, dtype=np.int64)
    h, t = np.meshgrid(hosts, repetitions, indexing="ij")
    batches = 1 if single_batch else 2
    # Requests spread evenly over the hosts that run one arm: a multiple of that count.
    per_arm_hosts = h // 2 if single_batch else h
    left = budget_s - batches * h * costs.setup_s
    per_request = 2 * (costs.request_s + t * costs.repetition_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = np.floor(np.maximum(left, 0) / per_request)
    r = (fit // per_arm_hosts) * per_arm_hosts
    ok = r >= per_arm_hosts
    if not ok.any():
        return None
    se = np.full(h.shape, np.inf)
    se[ok] = standard_error_grid(
        design, components, hosts=h[ok], requests=r[ok].astype(np.int64), repetitions=t[ok]
    )
    # Ties (equal SE) go to the cheaper plan, then to fewer hosts.
    cost = batches * h * costs.setup_s + r * per_request
    order = np.lexsort((h.ravel(), cost.ravel(), np.round(se.ravel(), 15)))
    best = int(order[0])
    bh, br, bt = int(h.ravel()[best]), int(r.ravel()[best]), int(t.ravel()[best])
    terms = standard_error_terms(design, components, hosts=bh, requests=br, repetitions=bt)
    return DesignPlan(
        design=design,
        hosts=bh,
        requests=br,
        repetitions=bt,
        standard_error=terms.se,
        cost_s=costs.cost_s(design, bh, br, bt),
        terms=terms,
    )


def plan_designs(
    components: VarianceComponents,
    *,
    budget_s: float,
    costs: CostModel,
    designs: Sequence[Design] = DESIGNS,
) -> tuple[DesignPlan, ...]:
    """For each design, the hosts, requests and repetitions with the smallest standard
    error whose cost fits ``budget_s`` (Perflab section 3.1.2); best design first.

    A design that cannot fit one request per host within the budget is left out; an empty
    result means the budget is too small for all of them.
    """
    _validate_plan_designs(components, budget_s, costs, designs)
    plans = [_best_sizes(d, components, budget_s, costs) for d in designs]
    found = [p for p in plans if p is not None]
    return tuple(sorted(found, key=lambda p: (p.standard_error, p.cost_s)))
