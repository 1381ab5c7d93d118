"""The distribution functions hairline's statistics use, evaluated on ``scipy.special``.

Why not ``scipy.stats``: importing it builds every distribution it has, 1.5 s on this
project's 2-vCPU VM (2026-11-28), which every ``hairline`` command paid at start (3.5 s in
all; ``scipy.special`` alone is 0.5 s). These are the special functions ``scipy.stats``
evaluates underneath for the same distributions, so the values are the same; each one is
checked against ``scipy.stats`` in tests/stats/test_dist.py. Arrays broadcast; every
function returns float64 arrays for array input and floats for scalars, as numpy does.

Also here: the one-pole recursive filter the warm-up detector smooths with (scipy.signal's
``lfilter`` for that filter), because importing ``scipy.signal`` imports ``scipy.stats``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "beta_ppf",
    "binom_interval",
    "binom_ppf",
    "binom_sf",
    "ema_filter",
    "nct_cdf",
    "nct_sf",
    "norm_cdf",
    "norm_pdf",
    "norm_ppf",
    "norm_sf",
    "skew",
    "t_ppf",
    "t_sf",
]

FloatArray = NDArray[np.float64]
_SQRT_2PI = math.sqrt(2.0 * math.pi)


@functools.cache
def _special() -> Any:
    """``scipy.special``, imported at the first evaluation rather than with this module:
    the import costs 0.35 s (2-vCPU VM, 2026-11-29), which every command that imports the
    statistics without evaluating a distribution (``hairline status``, ``report``, the
    lab's commands' ``--help``) paid at start."""
    import scipy.special

    return scipy.special


def t_ppf(q: ArrayLike, df: ArrayLike) -> Any:
    """Student's t quantile; the normal's where ``df`` is infinite."""
    df_ = np.asarray(df, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(df_), _special().ndtri(q), _special().stdtrit(df_, q))[()]


def t_sf(t: ArrayLike, df: ArrayLike) -> Any:
    """Student's t upper tail, P(T > t); the normal's where ``df`` is infinite."""
    t_ = np.asarray(t, dtype=np.float64)
    df_ = np.asarray(df, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(df_), _special().ndtr(-t_), _special().stdtr(df_, -t_))[()]


def norm_ppf(q: ArrayLike) -> Any:
    return _special().ndtri(q)


def norm_cdf(x: ArrayLike) -> Any:
    return _special().ndtr(x)


def norm_sf(x: ArrayLike) -> Any:
    return _special().ndtr(-np.asarray(x, dtype=np.float64))[()]


def norm_pdf(x: ArrayLike) -> Any:
    x_ = np.asarray(x, dtype=np.float64)
    return (np.exp(-0.5 * x_ * x_) / _SQRT_2PI)[()]


def nct_cdf(x: ArrayLike, df: ArrayLike, nc: ArrayLike) -> Any:
    """The noncentral t's distribution function."""
    return _special().nctdtr(df, nc, x)


def nct_sf(x: ArrayLike, df: ArrayLike, nc: ArrayLike) -> Any:
    """The noncentral t's upper tail, P(T > x)."""
    return (1.0 - np.asarray(_special().nctdtr(df, nc, x), dtype=np.float64))[()]


def beta_ppf(q: float, a: float, b: float) -> float:
    return float(_special().betaincinv(a, b, q))


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X > k) for X ~ Binomial(n, p): 1 for k < 0, 0 for k >= n."""
    if k < 0:
        return 1.0
    if k >= n:
        return 0.0
    return float(_special().bdtrc(k, n, p))


def binom_ppf(q: float, n: int, p: float) -> float:
    """The smallest k with P(X <= k) >= q, for X ~ Binomial(n, p) (``bdtrik`` inverts the
    distribution function continuously; the integer below its ceiling may already do)."""
    if not 0.0 <= q <= 1.0:
        return math.nan
    if q == 0.0:
        return -1.0  # as scipy.stats: the support's lower end, less one
    k = math.ceil(float(_special().bdtrik(q, n, p)))
    if not math.isfinite(k):
        k = n
    k = min(max(k, 0), n)
    below = max(k - 1, 0)
    return float(below if _special().bdtr(below, n, p) >= q else k)


def binom_interval(confidence: float, n: int, p: float) -> tuple[float, float]:
    """The central ``confidence`` range of Binomial(n, p): its (1 - c)/2 and (1 + c)/2
    quantiles."""
    return binom_ppf((1.0 - confidence) / 2.0, n, p), binom_ppf((1.0 + confidence) / 2.0, n, p)


def skew(values: ArrayLike) -> float:
    """The sample skewness m3 / m2^1.5 (biased; NaN when the values are all equal)."""
    x = np.asarray(values, dtype=np.float64)
    d = x - x.mean()
    m2 = float(np.mean(d * d))
    if m2 == 0.0:
        return math.nan
    return float(np.mean(d * d * d)) / (m2 * math.sqrt(m2))


def ema_filter(x: ArrayLike, a: float) -> FloatArray:
    """y[i] = a * x[i] + (1 - a) * y[i - 1], from y[-1] = 0.

    In blocks: within one, y[s + k] = r^k * (r * y[s - 1] + a * sum_{j <= k} r^-j x[s + j])
    with r = 1 - a, a cumulative sum numpy does at once. Each block is short enough that
    r^-k stays below e^600 (float64 ends near e^709); the sum is dominated by its latest
    terms, so its rounding is relative to y itself.
    """
    values = np.asarray(x, dtype=np.float64)
    if not 0.0 < a <= 1.0:
        raise ValueError(f"the smoothing must be in (0, 1], got {a}")
    r = 1.0 - a
    if r == 0.0 or values.size == 0:
        return values.copy()
    block = max(1, int(600.0 / -math.log(r)))
    out = np.empty_like(values)
    carry = 0.0
    for start in range(0, values.size, block):
        seg = values[start : start + block]
        k = np.arange(seg.size, dtype=np.float64)
        grow = r**-k
        y = (r * carry + np.cumsum(a * seg * grow)) / grow
        out[start : start + seg.size] = y
        carry = float(y[-1])
    return out
