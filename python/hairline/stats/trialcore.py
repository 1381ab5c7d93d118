"""The per-trial fallback models on arrays: thousands of simulated experiments at once.

Planning (:mod:`.planning`) and the sequential design (:mod:`.sequential`) judge simulated
experiments with the same model and verdict rule the analysis uses. Calling the registered
model on a :class:`~hairline.stats.data.MetricSample` per simulation would cost a second per
thousand; these functions compute, for arrays of per-trial arm means (simulations x
trials), exactly what :func:`~hairline.stats.paired.paired_t_test` and
:func:`~hairline.stats.trimmed.trimmed_t_test` report without preprocessing: the relative
effect, its interval and the p-value (the tests check equality with the registered
models), and :func:`~hairline.stats.verdict.classify` labels them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hairline.stats._modelkit import FloatArray
from hairline.stats.paired import paired_t_core
from hairline.stats.trimmed import trimmed_t_core

__all__ = ["SIMULATED_MODELS", "TrialDecision", "per_trial_decision"]

#: The models :func:`per_trial_decision` computes: the fallback models for 2 trials or more.
SIMULATED_MODELS = ("paired-t-none", "trimmed-t-none")


@dataclass(frozen=True)
class TrialDecision:
    """Relative effect, its (1 - alpha) interval and the p-value, one per simulation."""

    effect_rel: FloatArray
    ci_rel: tuple[FloatArray, FloatArray]
    p_value: FloatArray


def per_trial_decision(
    model: str, means_a: FloatArray, means_b: FloatArray, alpha: float
) -> TrialDecision:
    """What ``model`` reports for per-trial arm means of shape (..., trials).

    ``model`` is one of ``SIMULATED_MODELS``; anything else is a ``ValueError`` (simulate it
    through the registry instead).
    """
    a = np.asarray(means_a, dtype=np.float64)
    b = np.asarray(means_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim < 1:
        raise ValueError(f"means_a and means_b must share one shape (..., trials); got "
                         f"{a.shape} and {b.shape}")  # fmt: skip
    location = np.mean(a, axis=-1)
    if model == "paired-t-none":
        core = paired_t_core(b - a, alpha)
        with np.errstate(divide="ignore", invalid="ignore"):
            ends = (core.ci[0] / location, core.ci[1] / location)
            return TrialDecision(
                core.mean / location, (np.minimum(*ends), np.maximum(*ends)), core.p_value
            )
    if model == "trimmed-t-none":
        relative = np.all(a > 0, axis=-1) | np.all(a < 0, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            differences = np.where(relative[..., None], b / a - 1.0, b - a)
            # Rows without a relative scale were tested on absolute differences: their
            # relative effect is the shift over the baseline, as the model reports it.
            scale = np.where(relative, 1.0, location)
            t = trimmed_t_core(differences, alpha)
            ends = (t.ci[0] / scale, t.ci[1] / scale)
            return TrialDecision(
                t.estimate / scale, (np.minimum(*ends), np.maximum(*ends)), t.p_value
            )
    raise ValueError(
        f"no array form for model {model!r}; simulate one of {', '.join(SIMULATED_MODELS)}, "
        f"or run the model through the registry"
    )
