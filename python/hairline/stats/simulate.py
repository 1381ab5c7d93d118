"""A simulator of Perflab's random-effects model, for tests, benchmarks and planning.

Draws observations from Eq. 4 of perflab-benchmark-design.txt (section 4.1)::

    Y(d) = mu + d * effect + alpha_r(d) + beta_h(d) + gamma_{r,h,b} + eta_{h,b} + epsilon

on the schedule of one of the four designs (see :mod:`hairline.stats.designs`). The
treatment interactions of Eq. 4 are modelled as ``alpha_r(1) = alpha_r(0) + tau_r`` and
``beta_h(1) = beta_h(0) + tau_h`` with independent normal ``tau``: a request or a host that
the change affects more than the others. With both interaction deviations at zero the model
is the sharp null (effect 0) or a constant additive effect, the two cases of section 4.2.

:func:`simulate_values` draws many experiments at once as a matrix (experiments x rows) on
one shared schedule, which is what makes thousands of simulated A/A tests cheap.

:func:`simulate_lab_batches` draws what a local lab stores for a batch-level metric (one
value per trial, batch and arm, two swapped CPU sets), with one outlying batch on request:
the world of the per-trial models and of the sequential design.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from hairline.stats import dist
from hairline.stats.data import MetricSample
from hairline.stats.designs import Design, Schedule, VarianceComponents, schedule

__all__ = [
    "Link",
    "Outlier",
    "in_binomial_band",
    "lab_batches_sample",
    "simulate",
    "simulate_lab_batches",
    "simulate_values",
]

Link = Literal["identity", "exp"]
FloatArray = NDArray[np.float64]


def in_binomial_band(hits: int, n: int, rate: float, *, confidence: float = 0.999) -> bool:
    """Whether ``hits`` of ``n`` simulated runs is within the central ``confidence`` range
    of Binomial(n, rate): how a simulated false-positive rate or coverage is checked."""
    lo, hi = dist.binom_interval(confidence, n, rate)
    return bool(lo <= hits <= hi)


def _codes(*columns: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
    """Dense codes 0..k-1 of the distinct tuples of ``columns``, and k."""
    stacked = np.stack(columns, axis=1)
    _, inverse = np.unique(stacked, axis=0, return_inverse=True)
    codes = inverse.ravel().astype(np.int64)
    return codes, int(codes.max()) + 1


def _validate_simulate_values(
    plan: Schedule,
    components: VarianceComponents,
    n_experiments: int,
    effect: float,
    sigma_request_treatment: float,
    sigma_host_treatment: float,
    link: str,
    rng: object,
) -> None:
    if not isinstance(plan, Schedule):
        raise TypeError("schedule must be a Schedule (see hairline.stats.designs.schedule)")
    if not isinstance(components, VarianceComponents):
        raise TypeError("components must be a VarianceComponents")
    if isinstance(n_experiments, bool) or not isinstance(n_experiments, int) or n_experiments < 1:
        raise ValueError(f"n_experiments must be a positive integer, got {n_experiments!r}")
    if not math.isfinite(effect):
        raise ValueError(f"effect must be finite, got {effect}")
    for name, value in (
        ("sigma_request_treatment", sigma_request_treatment),
        ("sigma_host_treatment", sigma_host_treatment),
    ):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite standard deviation >= 0, got {value}")
    if link not in ("identity", "exp"):
        raise ValueError(f"link must be 'identity' or 'exp', got {link!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator, e.g. numpy.random.default_rng(0)")


def simulate_values(
    plan: Schedule,
    components: VarianceComponents,
    *,
    n_experiments: int = 1,
    effect: float = 0.0,
    sigma_request_treatment: float = 0.0,
    sigma_host_treatment: float = 0.0,
    link: Link = "identity",
    rng: np.random.Generator,
) -> FloatArray:
    """Values of ``n_experiments`` independent experiments on one schedule (Perflab Eq. 4).

    Returns an array of shape ``(n_experiments, len(plan))``; row ``e`` is one experiment
    whose rows align with the schedule's columns. Every experiment draws its own requests,
    hosts, batch effects and noise. ``effect`` is added to arm B (on the log scale when
    ``link`` is ``"exp"``, where it is a multiplicative effect of ``exp(effect) - 1``).
    """
    _validate_simulate_values(
        plan,
        components,
        n_experiments,
        effect,
        sigma_request_treatment,
        sigma_host_treatment,
        link,
        rng,
    )
    c = components
    e = n_experiments
    request, n_requests = _codes(plan.request)
    host, n_hosts = _codes(plan.host)
    host_batch, n_host_batches = _codes(plan.host, plan.batch)
    request_host_batch, n_rhb = _codes(plan.request, plan.host, plan.batch)
    is_b = plan.arm == 1

    values = rng.normal(c.mu, c.sigma_noise, size=(e, len(plan)))
    values += rng.normal(0.0, c.sigma_request, size=(e, n_requests))[:, request]
    values += rng.normal(0.0, c.sigma_host, size=(e, n_hosts))[:, host]
    values += rng.normal(0.0, c.sigma_request_batch, size=(e, n_rhb))[:, request_host_batch]
    values += rng.normal(0.0, c.sigma_host_batch, size=(e, n_host_batches))[:, host_batch]
    values[:, is_b] += effect
    if sigma_request_treatment > 0:
        tau = rng.normal(0.0, sigma_request_treatment, size=(e, n_requests))
        values[:, is_b] += tau[:, request[is_b]]
    if sigma_host_treatment > 0:
        tau = rng.normal(0.0, sigma_host_treatment, size=(e, n_hosts))
        values[:, is_b] += tau[:, host[is_b]]
    if link == "exp":
        np.exp(values, out=values)
    return values


def simulate(
    design: Design,
    components: VarianceComponents,
    *,
    hosts: int,
    requests: int,
    repetitions: int = 1,
    trials: int = 1,
    effect: float = 0.0,
    sigma_request_treatment: float = 0.0,
    sigma_host_treatment: float = 0.0,
    link: Link = "identity",
    rng: np.random.Generator,
) -> MetricSample:
    """One simulated experiment of ``trials`` trials as a :class:`MetricSample`.

    Each trial runs the design's schedule with ``hosts`` hosts and ``requests`` requests per
    arm, ``repetitions`` times each, on fresh hosts and fresh requests (as ServiceLab runs
    its trials on different machines): host and request codes are offset per trial so that
    no two trials share one. Columns: value, arm, trial, batch, host, request.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    plan = schedule(design, hosts=hosts, requests=requests, repetitions=repetitions)
    values = simulate_values(
        plan,
        components,
        n_experiments=trials,
        effect=effect,
        sigma_request_treatment=sigma_request_treatment,
        sigma_host_treatment=sigma_host_treatment,
        link=link,
        rng=rng,
    )
    n = len(plan)
    trial = np.repeat(np.arange(trials, dtype=np.int64), n)
    host_offset = int(plan.host.max()) + 1
    request_offset = int(plan.request.max()) + 1
    return MetricSample(
        value=values.ravel(),
        arm=np.tile(plan.arm, trials),
        trial=trial,
        batch=np.tile(plan.batch, trials),
        host=np.tile(plan.host, trials) + trial * host_offset,
        request=np.tile(plan.request, trials) + trial * request_offset,
    )


Outlier = Literal["none", "against", "random"]


def simulate_lab_batches(
    rng: np.random.Generator,
    *,
    experiments: int,
    trials: int,
    effect_rel: float = 0.0,
    trial_sd: float = 0.05,
    batch_sd: float = 0.03,
    outlier: Outlier = "none",
    outlier_factor: float = 0.75,
) -> FloatArray:
    """Batch-level values (CPU per request, a p99) of ``experiments`` local-lab experiments:
    an array (experiments, trials, 2 batches, 2 arms).

    Each trial runs two batches in which the arms swap their two CPU sets (the fully
    balanced design); both arms of a trial share its level (lognormal, ``trial_sd``), and
    every batch of every arm has its own lognormal noise (``batch_sd``, skewed like times
    are). B is scaled by 1 + ``effect_rel``. ``outlier`` puts one batch that ran
    ``outlier_factor`` times its value into one random trial of each experiment: a batch of
    B (``"against"`` a regression, as a noisy neighbour slowing A's batch or a faster host
    for B's would) or of a random arm (``"random"``).
    """
    if trials < 1 or experiments < 1:
        raise ValueError(f"experiments and trials must be >= 1, got {experiments}, {trials}")
    if outlier not in ("none", "against", "random"):
        raise ValueError(f"outlier must be none, against or random, got {outlier!r}")
    level = rng.lognormal(-(trial_sd**2) / 2, trial_sd, (experiments, trials, 1, 1))
    noise = rng.lognormal(-(batch_sd**2) / 2, batch_sd, (experiments, trials, 2, 2))
    values = 1000.0 * level * noise
    values[..., 1] *= 1.0 + effect_rel
    if outlier != "none":
        rows = np.arange(experiments)
        trial = rng.integers(0, trials, experiments)
        batch = rng.integers(0, 2, experiments)
        arm = np.ones(experiments, dtype=np.int64)
        if outlier == "random":
            arm = rng.integers(0, 2, experiments)
        values[rows, trial, batch, arm] *= outlier_factor
    return values


def lab_batches_sample(batches: FloatArray) -> MetricSample:
    """One experiment of :func:`simulate_lab_batches` (trials, 2, 2) as the lab stores it:
    one row per trial, batch and arm, A on host 0 in batch 0 and on host 1 in batch 1."""
    trials = batches.shape[0]
    trial, batch, arm = np.meshgrid(np.arange(trials), np.arange(2), np.arange(2), indexing="ij")
    return MetricSample.from_arrays(
        batches.ravel(),
        arm.ravel(),
        trial=trial.ravel(),
        batch=batch.ravel(),
        host=((arm + batch) % 2).ravel(),
    )
