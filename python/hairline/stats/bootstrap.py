"""The clustered bootstrap of Perflab section 5, computed on per-cluster totals.

The statistic is the difference in means of arm B and arm A. A bootstrap replicate gives
every cluster a random mean-one weight ``w_c`` and recomputes each arm's weighted mean
(section 5.1)::

    mean_d* = sum_c w_c S_cd / sum_c w_c N_cd

where ``S_cd`` and ``N_cd`` are the sum and the count of the values of cluster ``c`` in
arm ``d``. Only these cluster totals enter a replicate, so the data is read once
(:func:`cluster_totals`) and each replicate is a product of a weights matrix
(replicates x clusters) with the totals (:func:`bootstrap_replicates`).

Clusters (section 5.2):

- ``"iid"``: one weight per observation; anti-conservative or conservative depending on the
  design, kept as the baseline the paper compares against.
- ``"request"``: one weight per request id; keeps a request's repetitions together but not
  its host, so it is far too narrow for balanced designs (Table 3).
- ``"host"``: one weight per host; the estimator the paper recommends for all designs.
- ``"host-block"``: one weight per block of hosts that executed the same requests, so that
  resampling keeps the request balance of the request-balanced design (Table 3). Blocks come
  from the data (hosts whose sets of request ids coincide form one block) or explicitly
  from ``blocks``, a mapping of host id to block id. In the unbalanced, host-balanced and
  fully-balanced designs every host has its own request set, so this equals ``"host"``.

Weights (section 5.1): ``"poisson"`` (Poisson(1)), ``"uniform"`` (Uniform(0, 2)) and
``"dirichlet"`` (the Bayesian bootstrap: Exponential(1) weights, whose normalisation to a
Dirichlet draw cancels in the ratio of weighted sums).

Few clusters: a host-clustered bootstrap often has only 8 to 32 clusters. Two corrections
keep its false-positive rate at alpha there (measured on Table 1's endpoint 1 with 16 hosts
by bench/stats/table3_bench.py: uncorrected 6.3 to 8.1% at alpha = 5%, corrected 4.1 to
5.4%). Each arm's replicates are rescaled around its sample mean so that their variance
matches ``s^2 / C`` (no factor for Poisson weights, ``(C+1)/(C-1)`` for Dirichlet,
``3C/(C-1)`` for Uniform(0, 2), whose variance is 1/3), and the "clt" interval takes its
quantile from Student's t with ``C - 1`` degrees of freedom instead of the normal, as
cluster-robust standard errors do. With hundreds of clusters both corrections vanish and
this is the paper's CLT interval.

Intervals: ``"clt"`` (the paper's choice) is the estimate plus or minus the t quantile
times the standard deviation of the replicates; its p-value is ``2 * P(T > |z|)`` with
``z = effect / se`` and ``T`` Student's t with ``C - 1`` degrees of freedom. The
``"percentile"`` p-value is twice the smaller share of replicates on either side of zero,
``2 * min(#{d* <= 0} + 1, #{d* >= 0} + 1) / (R + 1)``, capped at 1, and its interval is the
band of order statistics [d*_(k), d*_(R-k+1)] that the same count accepts (k the fewest
replicates on each side for p >= alpha; about the alpha/2 and 1 - alpha/2 quantiles), so it
excludes zero exactly when p < alpha. Both tests are on the difference of means; the
relative interval is the absolute one divided by A's mean, the same test on another scale
(the replicates of the ratio are reported as ``se_rel`` only). Replicates in which an arm
gets zero total weight (possible with Poisson weights and few clusters) are dropped and
reported in the warnings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from hairline.stats._modelkit import agree_with_p, rank_band, rank_p_value, t_decision
from hairline.stats.data import ARM_A, ARM_B, Comparison, MetricSample

__all__ = [
    "CLUSTERS",
    "INTERVALS",
    "WEIGHTS",
    "Cluster",
    "ClusterTotals",
    "Interval",
    "Replicates",
    "Weights",
    "bootstrap_compare",
    "bootstrap_replicates",
    "cluster_totals",
]

Cluster = Literal["iid", "request", "host", "host-block"]
Weights = Literal["poisson", "uniform", "dirichlet"]
Interval = Literal["clt", "percentile"]
CLUSTERS: tuple[Cluster, ...] = ("iid", "request", "host", "host-block")
WEIGHTS: tuple[Weights, ...] = ("poisson", "uniform", "dirichlet")
INTERVALS: tuple[Interval, ...] = ("clt", "percentile")

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Bounds the weights drawn at once (replicates x clusters) to 32 MB of float64.
_MAX_CHUNK_ELEMENTS = 1 << 22
# P(W <= k) for W ~ Poisson(1), k = 0..19; the tail beyond is below 1e-18.
_POISSON1_CDF = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(20)], dtype=np.float64)
# Sorted or grouped rows (as the lab writes them) are summed run by run when there are at
# most this fraction of runs; otherwise a bincount over cluster codes is cheaper.
_MAX_RUN_FRACTION = 1 / 16


@dataclass(frozen=True)
class ClusterTotals:
    """Per-cluster sufficient statistics: value sums and counts by cluster and arm.

    ``sums`` has shape ``(..., C, 2)``: any leading dimensions index independent data sets
    that share the same rows (for example simulated experiments); the last axis is the arm
    (0 = A, 1 = B). ``counts`` has shape ``(C, 2)`` and is shared by all of them. ``labels``
    holds the original id of each cluster (host id, request id, block id, or row number for
    ``"iid"``).
    """

    cluster: Cluster
    sums: FloatArray
    counts: FloatArray
    labels: IntArray

    @property
    def n_clusters(self) -> int:
        return int(self.counts.shape[0])

    def means(self) -> tuple[FloatArray, FloatArray]:
        """The sample means of arm A and arm B (arrays over the leading dimensions)."""
        n_a, n_b = self.counts.sum(axis=0)
        totals = self.sums.sum(axis=-2)
        with np.errstate(divide="ignore", invalid="ignore"):
            return totals[..., ARM_A] / n_a, totals[..., ARM_B] / n_b


@dataclass(frozen=True)
class Replicates:
    """Bootstrap replicates of each arm's mean, shape ``(..., n_replicates)``.

    A replicate where an arm got zero total weight is NaN.
    """

    mean_a: FloatArray
    mean_b: FloatArray
    df: int

    @property
    def effect_abs(self) -> FloatArray:
        """mean_B* - mean_A* per replicate."""
        return self.mean_b - self.mean_a

    @property
    def effect_rel(self) -> FloatArray:
        """(mean_B* - mean_A*) / mean_A* per replicate."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return (self.mean_b - self.mean_a) / self.mean_a


def _arm_codes(sample: MetricSample) -> NDArray[np.int8]:
    arm = sample.arm
    if len(arm) == 0:
        raise ValueError("the sample has no rows; a comparison needs rows of both arms")
    lo, hi = int(arm.min()), int(arm.max())
    if lo < ARM_A or hi > ARM_B:
        bad = int(np.flatnonzero((arm < ARM_A) | (arm > ARM_B))[0])
        raise ValueError(
            f"column 'arm' row {bad}: {int(arm[bad])} is not an arm; use 0 (A) or 1 (B)"
        )
    if lo == hi:
        raise ValueError(
            f"column 'arm' holds only arm {lo} ({'AB'[lo]}); a comparison needs rows of "
            "both arm 0 (A) and arm 1 (B)"
        )
    return arm


def _check_lengths(sample: MetricSample, names: tuple[str, ...]) -> None:
    n = len(sample.value)
    for name in ("arm", *names):
        column = getattr(sample, name)
        if column is not None and len(column) != n:
            raise ValueError(f"column {name!r} has {len(column)} rows, 'value' has {n}")


def _raise_non_finite(value: FloatArray) -> None:
    finite = np.isfinite(value)
    if not finite.all():
        flat = np.flatnonzero(~finite.reshape(-1, value.shape[-1]).all(axis=0))
        row = int(flat[0])
        raise ValueError(
            f"column 'value' row {row} is not a finite number; drop or fix that row "
            "before comparing"
        )


def _weighted_bincount(key: IntArray, weights: FloatArray, size: int) -> FloatArray:
    return np.asarray(np.bincount(key, weights=weights, minlength=size), dtype=np.float64)


def _grouped_totals(
    value: FloatArray, arm: NDArray[np.int8], ids: IntArray
) -> tuple[FloatArray, FloatArray, IntArray] | None:
    """Totals from runs of equal (id, arm), or None when the rows are not grouped.

    One comparison pass finds the runs; the values are then summed run by run with
    ``np.add.reduceat``, which is as fast as a plain sum. Sparse ids cost nothing here
    because only the (few) run ids are factorised.
    """
    n = len(ids)
    if n < 2:
        return None
    change = ids[1:] != ids[:-1]
    change |= arm[1:] != arm[:-1]
    n_runs = int(np.count_nonzero(change)) + 1
    if n_runs > n * _MAX_RUN_FRACTION:
        return None
    starts = np.empty(n_runs, dtype=np.int64)
    starts[0] = 0
    starts[1:] = np.flatnonzero(change)
    starts[1:] += 1
    run_sums = np.add.reduceat(value, starts)
    run_counts = np.diff(starts, append=n).astype(np.float64)
    labels, codes = np.unique(ids[starts], return_inverse=True)
    key = codes.ravel() * 2 + arm[starts]
    size = 2 * len(labels)
    sums = _weighted_bincount(key, run_sums, size).reshape(-1, 2)
    counts = _weighted_bincount(key, run_counts, size).reshape(-1, 2)
    return sums, counts, labels.astype(np.int64)


def _factorise(ids: IntArray) -> tuple[IntArray, IntArray]:
    """Dense codes 0..C-1 for ``ids`` and the id of each code.

    Ids that are already small non-negative integers (max < number of rows) are their own
    codes, which skips the sort that ``np.unique`` needs; unused codes are compacted later.
    """
    n = len(ids)
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < max(n, 1):
        return ids.astype(np.int64, copy=False), np.arange(hi + 1, dtype=np.int64)
    labels, inverse = np.unique(ids, return_inverse=True)
    return inverse.ravel().astype(np.int64), labels.astype(np.int64)


def _coded_totals(
    value: FloatArray, arm: NDArray[np.int8], codes: IntArray, n_codes: int
) -> tuple[FloatArray, FloatArray]:
    """Sums ``(..., C, 2)`` and counts ``(C, 2)`` with one bincount per data set."""
    size = 2 * n_codes
    key = codes * 2
    key += arm
    counts = np.bincount(key, minlength=size).astype(np.float64).reshape(-1, 2)
    if value.ndim == 1:
        sums = _weighted_bincount(key, value, size).reshape(-1, 2)
    else:
        lead = value.shape[:-1]
        flat = value.reshape(-1, value.shape[-1])
        offsets = np.arange(len(flat), dtype=np.int64)[:, None] * size
        sums = _weighted_bincount(
            (key[None, :] + offsets).ravel(), flat.ravel(), size * len(flat)
        ).reshape(*lead, n_codes, 2)
    return sums, counts


def _host_block_ids(
    host: IntArray, request: IntArray, blocks: Mapping[int, int] | None
) -> IntArray:
    """The block id of each row: hosts that executed the same set of requests share one."""
    host_labels, host_codes = np.unique(host, return_inverse=True)
    host_codes = host_codes.ravel()
    if blocks is not None:
        missing = [int(h) for h in host_labels if int(h) not in blocks]
        if missing:
            shown = ", ".join(str(h) for h in missing[:5])
            raise ValueError(
                f"blocks has no entry for host ids {shown}"
                f"{' and more' if len(missing) > 5 else ''}; map every host id to a block id"
            )
        block_of_host = np.array([int(blocks[int(h)]) for h in host_labels], dtype=np.int64)
        return block_of_host[host_codes]
    request_labels, request_codes = np.unique(request, return_inverse=True)
    n_requests = len(request_labels)
    pairs = np.unique(host_codes * n_requests + request_codes.ravel())
    pair_host = pairs // n_requests
    bounds = np.searchsorted(pair_host, np.arange(len(host_labels) + 1))
    pair_request = pairs % n_requests
    block_by_signature: dict[bytes, int] = {}
    block_of_host = np.empty(len(host_labels), dtype=np.int64)
    for h in range(len(host_labels)):
        signature = pair_request[bounds[h] : bounds[h + 1]].tobytes()
        block_of_host[h] = block_by_signature.setdefault(signature, len(block_by_signature))
    return block_of_host[host_codes]


def _validate_cluster_totals(
    sample: MetricSample, cluster: str, values: FloatArray | None
) -> tuple[Cluster, NDArray[np.int8]]:
    if not isinstance(sample, MetricSample):
        raise TypeError("sample must be a MetricSample")
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {', '.join(CLUSTERS)}; got {cluster!r}")
    needed: tuple[str, ...] = {
        "iid": (),
        "request": ("request",),
        "host": ("host",),
        "host-block": ("host", "request"),
    }[cluster]
    sample.require(*needed)
    _check_lengths(sample, needed)
    if values is not None and (values.ndim < 1 or values.shape[-1] != len(sample)):
        raise ValueError(
            f"values has shape {values.shape}; its last axis must have the sample's "
            f"{len(sample)} rows"
        )
    return cluster, _arm_codes(sample)  # type: ignore[return-value]


def cluster_totals(
    sample: MetricSample,
    *,
    cluster: Cluster = "host",
    blocks: Mapping[int, int] | None = None,
    values: FloatArray | None = None,
) -> ClusterTotals:
    """Sum and count of the values per cluster and arm, in one pass over the rows.

    ``values`` optionally replaces ``sample.value`` with an array of shape ``(..., n)``:
    many data sets on the same rows (simulated experiments on one schedule) are then
    reduced together, and the totals carry the same leading dimensions. Raises
    ``ValueError`` naming the column when a column the cluster needs is missing, the arm
    column does not hold both arms, or a value is not finite.
    """
    checked, arm = _validate_cluster_totals(sample, cluster, values)
    data = sample.value if values is None else np.asarray(values, dtype=np.float64)
    n = len(sample)
    if checked == "iid":
        sums = np.zeros((*data.shape[:-1], n, 2))
        rows = np.arange(n)
        sums[..., rows, arm] = data
        counts = np.zeros((n, 2))
        counts[rows, arm] = 1.0
        labels = rows.astype(np.int64)
    else:
        if checked == "host-block":
            assert sample.host is not None and sample.request is not None  # checked above
            ids = _host_block_ids(sample.host, sample.request, blocks)
        else:
            column = sample.request if checked == "request" else sample.host
            assert column is not None  # checked above
            ids = column
        grouped = _grouped_totals(data, arm, ids) if data.ndim == 1 else None
        if grouped is not None:
            sums, counts, labels = grouped
        else:
            codes, labels = _factorise(ids)
            sums, counts = _coded_totals(data, arm, codes, len(labels))
            used = counts.sum(axis=1) > 0
            if not used.all():
                sums, counts, labels = sums[..., used, :], counts[used], labels[used]
    if not np.isfinite(sums).all():
        _raise_non_finite(data)
    return ClusterTotals(cluster=checked, sums=sums, counts=counts, labels=labels)


def _draw_weights(rng: np.random.Generator, kind: Weights, shape: tuple[int, ...]) -> FloatArray:
    if kind == "poisson":
        # Inverse CDF on uniforms: several times faster than rng.poisson for a mean of 1.
        return np.searchsorted(_POISSON1_CDF, rng.random(size=shape), side="right").astype(
            np.float64
        )
    if kind == "uniform":
        return rng.uniform(0.0, 2.0, size=shape)
    return rng.standard_exponential(size=shape)


def _variance_factor(kind: Weights, clusters: NDArray[np.int64]) -> FloatArray:
    """What the replicates' variance of an arm's mean must be multiplied by to match
    ``s^2 / C``, the sampling variance of a mean of ``C`` clusters.

    With Poisson(1) weights the total weight ``W`` is Poisson(C) and ``E[1/W]`` is about
    ``1/(C-1)``, which offsets the ``(C-1)/C`` of the plug-in variance: no factor. The
    Bayesian bootstrap gives ``s^2 (C-1) / (C (C+1))``; Uniform(0, 2) weights have variance
    1/3, giving a third of the plug-in variance.
    """
    c = clusters.astype(np.float64)
    if kind == "poisson":
        return np.ones_like(c)
    if kind == "dirichlet":
        return (c + 1.0) / (c - 1.0)
    return 3.0 * c / (c - 1.0)


def _validate_bootstrap_replicates(
    totals: ClusterTotals, weights: str, n_replicates: int, rng: object
) -> None:
    if not isinstance(totals, ClusterTotals):
        raise TypeError("totals must be a ClusterTotals (see cluster_totals)")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}; got {weights!r}")
    if isinstance(n_replicates, bool) or not isinstance(n_replicates, int) or n_replicates < 2:
        raise ValueError(f"n_replicates must be an integer >= 2, got {n_replicates!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator, e.g. numpy.random.default_rng(0)")


def bootstrap_replicates(
    totals: ClusterTotals,
    *,
    weights: Weights = "poisson",
    n_replicates: int = 2000,
    rng: np.random.Generator,
) -> Replicates:
    """Replicates of each arm's mean from cluster totals (Perflab section 5.1).

    Draws a weights matrix (replicates x clusters) per data set and multiplies it with the
    sums and the counts. Weights are generated in chunks of clusters so that memory stays
    bounded when clusters are many (the iid bootstrap has one per observation). Every data
    set of a batch (the leading dimensions of ``totals.sums``) gets its own weights.
    """
    _validate_bootstrap_replicates(totals, weights, n_replicates, rng)
    lead = totals.sums.shape[:-2]
    n_clusters = totals.n_clusters
    n_sets = math.prod(lead)
    sums = totals.sums.reshape(n_sets, n_clusters, 2)
    numerator = np.zeros((n_sets, n_replicates, 2))
    denominator = np.zeros((n_sets, n_replicates, 2))
    chunk = max(1, _MAX_CHUNK_ELEMENTS // (n_sets * n_replicates))
    for start in range(0, n_clusters, chunk):
        stop = min(start + chunk, n_clusters)
        w = _draw_weights(rng, weights, (n_sets, n_replicates, stop - start))
        numerator += w @ sums[:, start:stop, :]
        denominator += w @ totals.counts[start:stop, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        means = numerator / denominator
        factor = np.sqrt(_variance_factor(weights, np.count_nonzero(totals.counts > 0, axis=0)))
    sample_a, sample_b = totals.means()
    sample = np.stack([np.reshape(sample_a, -1), np.reshape(sample_b, -1)], axis=-1)
    means = sample[:, None, :] + (means - sample[:, None, :]) * factor
    means = means.reshape(*lead, n_replicates, 2)
    return Replicates(mean_a=means[..., ARM_A], mean_b=means[..., ARM_B], df=n_clusters - 1)


def _validate_bootstrap_compare(
    cluster: str,
    weights: str,
    n_replicates: int,
    interval: str,
    alpha: float,
    rng: object,
) -> None:
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {', '.join(CLUSTERS)}; got {cluster!r}")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}; got {weights!r}")
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {', '.join(INTERVALS)}; got {interval!r}")
    if isinstance(n_replicates, bool) or not isinstance(n_replicates, int) or n_replicates < 2:
        raise ValueError(f"n_replicates must be an integer >= 2, got {n_replicates!r}")
    if not (isinstance(alpha, float | int) and 0 < alpha < 1):
        raise ValueError(f"alpha must be between 0 and 1, e.g. 0.05; got {alpha!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator, e.g. numpy.random.default_rng(0)")


def _decision(
    estimate: float, replicates: FloatArray, interval: Interval, alpha: float, df: int
) -> tuple[float, tuple[float, float]]:
    """The p-value and the (1 - alpha) interval of one test on the replicates.

    ``clt``: estimate/se against Student's t(df), and estimate ± t quantile × se. The
    ``percentile`` p-value counts replicates on each side of 0; its interval is the band of
    order statistics that the same count accepts (about the alpha/2 and 1 - alpha/2
    quantiles), so that it excludes 0 exactly when p < alpha.
    """
    nan = (math.nan, math.nan)
    se = float(np.std(replicates, ddof=1)) if replicates.size >= 2 else math.nan
    if not (math.isfinite(estimate) and se > 0):
        return math.nan, nan
    if interval == "clt":
        p, lo, hi = t_decision(estimate, se, float(df), alpha)
        return float(p), (float(lo), float(hi))
    below = int(np.count_nonzero(replicates <= 0))
    above = int(np.count_nonzero(replicates >= 0))
    return rank_p_value(below, above, replicates.size), rank_band(replicates, alpha)


def _relative_interval(
    ci_abs: tuple[float, float], mean_a: float, p_value: float, alpha: float
) -> tuple[float, float]:
    # The test is on the difference of means; its interval divided by A's mean is the
    # relative interval of the same test (the replicates of the ratio would be a second
    # distribution, which could disagree with the p-value about 0).
    if mean_a == 0 or not math.isfinite(mean_a):
        return (math.nan, math.nan)
    lo, hi = sorted((ci_abs[0] / mean_a, ci_abs[1] / mean_a))
    agreed = agree_with_p(lo, hi, p_value, alpha)
    return (float(agreed[0]), float(agreed[1]))


def _degenerate_clusters(totals: ClusterTotals, cluster: str) -> str | None:
    """Why the bootstrap cannot run on these clusters, or None when it can."""
    per_arm = np.count_nonzero(totals.counts > 0, axis=0)
    if totals.n_clusters >= 2 and per_arm.min() >= 2:
        return None
    if cluster == "host-block" and totals.n_clusters == 1:
        return (
            "host-block found a single block (every host ran the same requests): the "
            "bootstrap needs at least 2 blocks; use cluster 'host'"
        )
    return (
        f"the bootstrap needs at least 2 {cluster} clusters in each arm; arm A has "
        f"{per_arm[ARM_A]} and arm B has {per_arm[ARM_B]}"
    )


def bootstrap_compare(
    sample: MetricSample,
    *,
    cluster: str = "host",
    weights: str = "poisson",
    n_replicates: int = 2000,
    interval: str = "clt",
    alpha: float = 0.05,
    rng: np.random.Generator,
    blocks: Mapping[int, int] | None = None,
) -> Comparison:
    """Compare arm B with arm A by the clustered bootstrap (Perflab section 5).

    Returns the model ``"bootstrap-<cluster>"`` with ``effect_abs`` = mean(B) - mean(A),
    ``effect_rel`` = effect_abs / mean(A), intervals from the replicates of the difference
    divided by A's mean, and a p-value from the same test (see the module docstring).
    ``details`` holds ``se_abs`` and ``se_rel`` (standard deviations of the replicates),
    ``n_clusters``, ``df`` and ``n_replicates`` (replicates kept). ``blocks``
    maps host id to block id for ``cluster="host-block"``; without it blocks come from the
    data.

    Degenerate data give NaN with a warning rather than an exception: fewer than two
    clusters in an arm, a zero mean of arm A (no relative effect), or no variation between
    replicates. Invalid input (a missing column, a single arm, non-finite values) raises
    ``ValueError``.
    """
    _validate_bootstrap_compare(cluster, weights, n_replicates, interval, alpha, rng)
    checked_cluster: Cluster = cluster  # type: ignore[assignment]
    checked_weights: Weights = weights  # type: ignore[assignment]
    checked_interval: Interval = interval  # type: ignore[assignment]
    totals = cluster_totals(sample, cluster=checked_cluster, blocks=blocks)
    mean_a_arr, mean_b_arr = totals.means()
    mean_a, mean_b = float(mean_a_arr), float(mean_b_arr)
    n_a, n_b = (int(x) for x in totals.counts.sum(axis=0))
    effect_abs = mean_b - mean_a
    warnings: list[str] = []
    if mean_a != 0:
        effect_rel = effect_abs / mean_a
    else:
        effect_rel = math.nan
        warnings.append("mean of arm A is 0: the relative effect is undefined")

    rep_abs = np.empty(0)
    rep_rel = np.empty(0)
    df = totals.n_clusters - 1
    problem = _degenerate_clusters(totals, checked_cluster)
    if problem is not None:
        warnings.append(problem)
    else:
        replicates = bootstrap_replicates(
            totals, weights=checked_weights, n_replicates=n_replicates, rng=rng
        )
        kept = np.isfinite(replicates.effect_abs)
        rep_abs = replicates.effect_abs[kept]
        dropped = n_replicates - rep_abs.size
        if dropped:
            warnings.append(
                f"{dropped} of {n_replicates} replicates gave an arm zero weight and were dropped"
            )
        if mean_a != 0:
            rep_rel = replicates.effect_rel[kept & np.isfinite(replicates.effect_rel)]

    se_abs = float(np.std(rep_abs, ddof=1)) if rep_abs.size >= 2 else math.nan
    se_rel = float(np.std(rep_rel, ddof=1)) if rep_rel.size >= 2 else math.nan
    if se_abs == 0:
        warnings.append("the replicates do not vary: no interval or p-value")
    p_value, ci_abs = _decision(effect_abs, rep_abs, checked_interval, alpha, df)
    return Comparison(
        model=f"bootstrap-{checked_cluster}",
        mean_a=mean_a,
        mean_b=mean_b,
        effect_abs=effect_abs,
        effect_rel=effect_rel,
        ci_abs=ci_abs,
        ci_rel=_relative_interval(ci_abs, mean_a, p_value, alpha),
        p_value=p_value,
        alpha=float(alpha),
        n_a=n_a,
        n_b=n_b,
        warnings=tuple(warnings),
        details={
            "se_abs": se_abs,
            "se_rel": se_rel,
            "n_clusters": float(totals.n_clusters),
            "df": float(df),
            "n_replicates": float(rep_abs.size),
        },
    )
