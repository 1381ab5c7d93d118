"""The four experimental designs of distributed benchmarks and their standard errors.

Perflab (perflab-benchmark-design.txt) models one observation of a request ``r`` on host ``h``
in batch ``b`` under arm ``d`` as (Eq. 3 and 4)::

    Y = mu(d) + alpha_r + beta_h + gamma_{r,b} + eta_{h,b} + epsilon

with a request effect ``alpha``, a host effect ``beta``, per-batch effects of the request
(``gamma``) and of the host (``eta``), and noise ``epsilon``. Which request runs on which host
in which batch under which arm is the *design* (section 4.2, Table 2):

- ``unbalanced`` ("live"): one batch; half of the hosts run A, half run B; A and B see
  different requests.
- ``request-balanced`` ("parallel"): one batch; the same requests are replayed to the A hosts
  and to the B hosts.
- ``host-balanced`` ("sequential"): two batches; every host runs A then B, on different
  requests.
- ``fully-balanced`` ("controlled"): two batches; every host runs A then B on the same
  requests.

``R`` is the number of distinct requests per arm and ``T`` the repetitions of each, so that
each arm has ``N = R * T`` observations (section 4.2). The closed-form standard errors of
section 4.2.1 assume each host carries the same number of observations; :func:`schedule`
builds exactly such schedules, and :func:`schedule_standard_error` gives the exact standard
error of any schedule, from which the closed forms follow.

A batch effect of a request (``gamma``) is drawn each time a service instance is initialised,
that is per (request, host, batch): the paper's request-balanced standard error keeps the
``gamma`` term although A and B run in the same batch, which only holds if the A host and the
B host draw their own ``gamma``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DESIGNS",
    "Design",
    "Schedule",
    "StandardError",
    "VarianceComponents",
    "schedule",
    "schedule_standard_error",
    "standard_error",
    "standard_error_grid",
    "standard_error_terms",
]

Design = Literal["unbalanced", "request-balanced", "host-balanced", "fully-balanced"]
DESIGNS: tuple[Design, ...] = get_args(Design)

IntArray = NDArray[np.int64]

# Table 1 of the paper: (mu, sigma_alpha, sigma_beta, sigma_gamma, sigma_eta, sigma_epsilon)
# for the five most trafficked endpoints, in standardised units (footnote 2).
_TABLE1: dict[int, tuple[float, float, float, float, float, float]] = {
    1: (0.06, 1.02, 0.12, 0.10, 0.08, 0.13),
    2: (0.08, 1.08, 0.10, 0.05, 0.06, 0.08),
    3: (0.07, 1.02, 0.11, 0.04, 0.05, 0.06),
    4: (0.08, 1.08, 0.05, 0.05, 0.02, 0.06),
    5: (0.04, 1.08, 0.04, 0.01, 0.02, 0.14),
}


@dataclass(frozen=True)
class VarianceComponents:
    """Standard deviations of the random effects of Perflab's Eq. 3 (section 3.2.1).

    The paper's symbols: ``sigma_request`` is sigma_alpha (the request effect),
    ``sigma_host`` is sigma_beta (the host effect), ``sigma_request_batch`` is sigma_gamma
    (a request's shift for one service initialisation), ``sigma_host_batch`` is sigma_eta
    (a host's shift for one batch) and ``sigma_noise`` is sigma_epsilon. ``mu`` is the grand
    mean of arm A.
    """

    sigma_request: float
    sigma_host: float
    sigma_request_batch: float
    sigma_host_batch: float
    sigma_noise: float
    mu: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "sigma_request",
            "sigma_host",
            "sigma_request_batch",
            "sigma_host_batch",
            "sigma_noise",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite standard deviation >= 0, got {value}")
        if not math.isfinite(self.mu):
            raise ValueError(f"mu must be finite, got {self.mu}")

    @classmethod
    def table1(cls, endpoint: int) -> VarianceComponents:
        """The estimates of Perflab Table 1 for ``endpoint`` 1 to 5 (standardised units)."""
        if endpoint not in _TABLE1:
            raise ValueError(f"endpoint must be one of 1 to 5 (Perflab Table 1), got {endpoint}")
        mu, alpha, beta, gamma, eta, epsilon = _TABLE1[endpoint]
        return cls(
            sigma_request=alpha,
            sigma_host=beta,
            sigma_request_batch=gamma,
            sigma_host_batch=eta,
            sigma_noise=epsilon,
            mu=mu,
        )


@dataclass(frozen=True)
class StandardError:
    """The standard error of the difference in means of one design, split by source.

    ``var_request``, ``var_host`` and ``var_noise`` are the variance contributions of the
    request terms (alpha, gamma), the host terms (beta, eta) and the noise; ``se`` is the
    square root of their sum.
    """

    design: Design
    hosts: int
    requests: int
    repetitions: int
    se: float
    var_request: float
    var_host: float
    var_noise: float


def _validate_design(design: str) -> Design:
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {', '.join(DESIGNS)}; got {design!r}")
    return design  # type: ignore[return-value]


def _validate_sizes(hosts: int, requests: int, repetitions: int, design: Design) -> None:
    for name, value in (("hosts", hosts), ("requests", requests), ("repetitions", repetitions)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if design in ("unbalanced", "request-balanced") and hosts % 2:
        raise ValueError(
            f"the {design} design splits the hosts into an A half and a B half: hosts must be "
            f"even, got {hosts}; use {hosts + 1}"
        )


def _validate_standard_error_terms(
    design: str, components: VarianceComponents, hosts: int, requests: int, repetitions: int
) -> Design:
    checked = _validate_design(design)
    if not isinstance(components, VarianceComponents):
        raise TypeError("components must be a VarianceComponents")
    _validate_sizes(hosts, requests, repetitions, checked)
    return checked


def standard_error_terms(
    design: Design,
    components: VarianceComponents,
    *,
    hosts: int,
    requests: int,
    repetitions: int = 1,
) -> StandardError:
    """The closed-form standard error of one design, split by source (Perflab 4.2.1).

    With ``R`` requests per arm, ``T`` repetitions and ``H`` hosts::

        unbalanced        2 [ (a² + g²)/R + 2/H (b² + e²) + n²/(RT) ]
        request-balanced  2 [       g²/R  + 2/H (b² + e²) + n²/(RT) ]
        host-balanced     2 [ (a² + g²)/R +   1/H e²      + n²/(RT) ]
        fully-balanced    2 [       g²/R  +   1/H e²      + n²/(RT) ]

    where a, b, g, e, n are sigma_alpha, sigma_beta, sigma_gamma, sigma_eta, sigma_epsilon.
    Balancing requests cancels alpha; balancing hosts cancels beta; batch effects never cancel.
    """
    checked = _validate_standard_error_terms(design, components, hosts, requests, repetitions)
    var_request, var_host, var_noise = (
        float(v)
        for v in _variance_terms(
            checked, components, np.float64(hosts), np.float64(requests), np.float64(repetitions)
        )
    )
    return StandardError(
        design=checked,
        hosts=int(hosts),
        requests=int(requests),
        repetitions=int(repetitions),
        se=math.sqrt(var_request + var_host + var_noise),
        var_request=var_request,
        var_host=var_host,
        var_noise=var_noise,
    )


def _variance_terms(
    design: Design,
    c: VarianceComponents,
    h: NDArray[np.float64] | np.float64,
    r: NDArray[np.float64] | np.float64,
    t: NDArray[np.float64] | np.float64,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The request, host and noise variance terms of section 4.2.1, elementwise."""
    request_balanced = design in ("request-balanced", "fully-balanced")
    host_balanced = design in ("host-balanced", "fully-balanced")
    request_var = c.sigma_request_batch**2 + (0.0 if request_balanced else c.sigma_request**2)
    if host_balanced:
        host_var = c.sigma_host_batch**2 / h
    else:
        host_var = 2.0 / h * (c.sigma_host**2 + c.sigma_host_batch**2)
    var_request = np.asarray(2.0 * request_var / r, dtype=np.float64)
    var_host = np.asarray(2.0 * host_var * np.ones_like(r), dtype=np.float64)
    var_noise = np.asarray(2.0 * c.sigma_noise**2 / (r * t), dtype=np.float64)
    return var_request, var_host, var_noise


def standard_error_grid(
    design: Design,
    components: VarianceComponents,
    *,
    hosts: NDArray[np.int64],
    requests: NDArray[np.int64],
    repetitions: NDArray[np.int64],
) -> NDArray[np.float64]:
    """The closed-form standard error over arrays of sizes (broadcast together).

    The vectorised form of :func:`standard_error` for searching many sizes at once; the
    sizes are not checked against the design's divisibility rules.
    """
    checked = _validate_design(design)
    h, r, t = np.broadcast_arrays(
        np.asarray(hosts, dtype=np.float64),
        np.asarray(requests, dtype=np.float64),
        np.asarray(repetitions, dtype=np.float64),
    )
    if np.any(h < 1) or np.any(r < 1) or np.any(t < 1):
        raise ValueError("hosts, requests and repetitions must all be >= 1")
    var_request, var_host, var_noise = _variance_terms(checked, components, h, r, t)
    return np.asarray(np.sqrt(var_request + var_host + var_noise), dtype=np.float64)


def standard_error(
    design: Design,
    components: VarianceComponents,
    *,
    hosts: int,
    requests: int,
    repetitions: int = 1,
) -> float:
    """The closed-form standard error of mean(B) - mean(A) for one design (Perflab 4.2.1)."""
    return standard_error_terms(
        design, components, hosts=hosts, requests=requests, repetitions=repetitions
    ).se


@dataclass(frozen=True)
class Schedule:
    """Which request runs on which host, in which batch, under which arm (Perflab Table 2).

    One row per observation; the columns are parallel arrays. Requests are numbered
    ``0..R-1`` for arm A; designs that do not replay requests give arm B the requests
    ``R..2R-1``. ``repetition`` counts the repeats of one (host, request, arm, batch).
    """

    design: Design
    hosts: int
    requests: int
    repetitions: int
    host: IntArray
    request: IntArray
    arm: NDArray[np.int8]
    batch: IntArray
    repetition: IntArray

    def __len__(self) -> int:
        return len(self.host)


def _validate_schedule(design: str, hosts: int, requests: int, repetitions: int) -> Design:
    checked = _validate_design(design)
    _validate_sizes(hosts, requests, repetitions, checked)
    per_arm = hosts // 2 if checked in ("unbalanced", "request-balanced") else hosts
    if requests % per_arm:
        fit = (requests // per_arm + 1) * per_arm
        raise ValueError(
            f"the {checked} design spreads the {requests} requests of an arm evenly over "
            f"{per_arm} hosts: requests must be a multiple of {per_arm}; use {fit}"
        )
    return checked


def schedule(design: Design, *, hosts: int, requests: int, repetitions: int = 1) -> Schedule:
    """The schedule of ``design`` with ``hosts`` hosts and ``requests`` requests per arm.

    Follows Perflab Table 2: single-batch designs give hosts ``0..H/2-1`` to A and the rest
    to B; two-batch designs run A on every host in batch 0 and B in batch 1. Request ``k`` of
    an arm goes to host ``k mod`` (hosts of that arm), so every host carries the same load.
    """
    checked = _validate_schedule(design, hosts, requests, repetitions)
    k = np.arange(requests, dtype=np.int64)
    if checked in ("unbalanced", "request-balanced"):
        half = hosts // 2
        host = np.concatenate([k % half, half + k % half])
        batch = np.zeros(2 * requests, dtype=np.int64)
    else:
        host = np.concatenate([k % hosts, k % hosts])
        batch = np.repeat(np.array([0, 1], dtype=np.int64), requests)
    replayed = checked in ("request-balanced", "fully-balanced")
    request = np.concatenate([k, k if replayed else k + requests])
    arm = np.repeat(np.array([0, 1], dtype=np.int8), requests)
    t = repetitions
    return Schedule(
        design=checked,
        hosts=int(hosts),
        requests=int(requests),
        repetitions=int(t),
        host=np.repeat(host, t),
        request=np.repeat(request, t),
        arm=np.repeat(arm, t),
        batch=np.repeat(batch, t),
        repetition=np.tile(np.arange(t, dtype=np.int64), 2 * requests),
    )


def _squared_level_sums(codes: IntArray, contrast: NDArray[np.float64]) -> float:
    """sum over levels of (sum of the contrast weights of the level's rows) squared."""
    _, inverse = np.unique(codes, return_inverse=True)
    return float(np.sum(np.bincount(inverse.ravel(), weights=contrast) ** 2))


def _validate_schedule_standard_error(plan: Schedule, components: VarianceComponents) -> None:
    if not isinstance(plan, Schedule):
        raise TypeError("schedule must be a Schedule (see hairline.stats.designs.schedule)")
    if not isinstance(components, VarianceComponents):
        raise TypeError("components must be a VarianceComponents")
    arms = set(np.unique(plan.arm).tolist())
    if arms != {0, 1}:
        raise ValueError(f"column 'arm' of the schedule must hold both 0 and 1, got {arms}")


def schedule_standard_error(plan: Schedule, components: VarianceComponents) -> float:
    """The exact standard error of mean(B) - mean(A) for any schedule under Eq. 3.

    The estimator is a contrast ``sum_i c_i Y_i`` with ``c_i = 1/N_B`` on B rows and
    ``-1/N_A`` on A rows; each independent random effect adds its variance times the squared
    contrast summed within each of its levels (the duplication coefficients of Eq. 5 under
    the sharp null). Effects: request (alpha), host (beta), (request, host, batch) (gamma),
    (host, batch) (eta) and the row itself (epsilon).
    """
    _validate_schedule_standard_error(plan, components)
    is_b = plan.arm == 1
    contrast = np.where(is_b, 1.0 / np.count_nonzero(is_b), -1.0 / np.count_nonzero(~is_b))
    n_hosts = int(plan.host.max()) + 1
    n_batches = int(plan.batch.max()) + 1
    host_batch = plan.host * n_batches + plan.batch
    request_host_batch = plan.request * (n_hosts * n_batches) + host_batch
    c = components
    variance = (
        c.sigma_request**2 * _squared_level_sums(plan.request, contrast)
        + c.sigma_host**2 * _squared_level_sums(plan.host, contrast)
        + c.sigma_request_batch**2 * _squared_level_sums(request_host_batch, contrast)
        + c.sigma_host_batch**2 * _squared_level_sums(host_batch, contrast)
        + c.sigma_noise**2 * float(np.sum(contrast**2))
    )
    return math.sqrt(variance)
