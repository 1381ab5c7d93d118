"""The Gaussian process and noisy expected improvement of the "bo" searcher. Pure.

The GP models the objective on the unit cube (``Space.encode``) with a Matern 5/2 kernel
with one length scale per coordinate, its hyperparameters fitted by scikit-learn's
``GaussianProcessRegressor``. Every observation brings its own noise, its A/B's standard
error squared (heteroscedastic ``alpha``), so a precise A/B pins the surface and a vague one
barely moves it. After the fit the posterior is kept as its Cholesky factor here, so that
points can be believed (Kriging believer: a pending point taken at its posterior mean,
without noise) without fitting again.

Noisy expected improvement (Letham et al. 2019, "Constrained Bayesian optimization with
noisy experiments", which Ax uses and the HHVM paper cites): the best observed value is
itself uncertain, so EI is averaged over joint posterior samples of the function at the
observed points, each sample's maximum the incumbent and the candidate's value conditioned
on that sample.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.linalg import cho_solve, solve_triangular
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Kernel, Matern

from hairline.stats import dist

__all__ = ["Posterior", "fit", "noisy_expected_improvement"]

FloatArray = npt.NDArray[np.float64]

# Added to every variance on the diagonal: the default's A/B has a standard error of 0.
JITTER = 1e-6
LENGTH_SCALE_BOUNDS = (0.05, 20.0)
AMPLITUDE_BOUNDS = (0.05, 20.0)
RESTARTS = 2


@dataclass(frozen=True)
class Posterior:
    """The GP conditioned on its points; values are standardised (``y_mean``, ``y_scale``)."""

    kernel: Kernel
    x: FloatArray
    y: FloatArray
    noise: FloatArray
    y_mean: float
    y_scale: float
    chol: FloatArray
    weights: FloatArray

    def mean_var(self, z: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Posterior mean and variance of the (standardised) function at ``z``."""
        k_zx = self.kernel(z, self.x)
        mean = k_zx @ self.weights
        a = solve_triangular(self.chol, k_zx.T, lower=True)
        var = self.kernel.diag(z) - np.sum(a * a, axis=0)
        return mean, np.maximum(var, 1e-12)

    def mean(self, z: FloatArray) -> FloatArray:
        """Posterior mean in the observations' own units."""
        return self.y_mean + self.y_scale * self.mean_var(z)[0]

    def believe(self, z: FloatArray) -> Posterior:
        """The posterior with ``z`` observed exactly at its current mean."""
        mean, _ = self.mean_var(z[None, :])
        return _condition(
            self.kernel,
            np.vstack([self.x, z[None, :]]),
            np.append(self.y, mean[0]),
            np.append(self.noise, JITTER),
            self.y_mean,
            self.y_scale,
        )


def _condition(
    kernel: Kernel, x: FloatArray, y: FloatArray, noise: FloatArray, y_mean: float,
    y_scale: float,
) -> Posterior:  # fmt: skip
    k = kernel(x) + np.diag(noise)
    chol = np.linalg.cholesky(k)
    weights = cho_solve((chol, True), y)
    return Posterior(kernel, x, y, noise, y_mean, y_scale, chol, weights)


def fit(x: FloatArray, y: FloatArray, se: FloatArray, seed: int) -> Posterior:
    """The GP with hyperparameters fitted by maximum marginal likelihood."""
    y_mean = float(np.mean(y))
    spread = float(np.std(y))
    y_scale = spread if spread > 0 else 1.0
    yn = (y - y_mean) / y_scale
    noise = (se / y_scale) ** 2 + JITTER
    kernel = ConstantKernel(1.0, AMPLITUDE_BOUNDS) * Matern(
        length_scale=np.full(x.shape[1], 0.5), length_scale_bounds=LENGTH_SCALE_BOUNDS, nu=2.5
    )
    gpr = GaussianProcessRegressor(
        kernel, alpha=noise, n_restarts_optimizer=RESTARTS, random_state=seed
    )
    with warnings.catch_warnings():
        # Hyperparameters at a bound (few points, a flat direction) are expected here.
        warnings.simplefilter("ignore", ConvergenceWarning)
        gpr.fit(x, yn)
    return _condition(gpr.kernel_, x, yn, noise, y_mean, y_scale)


def noisy_expected_improvement(
    post: Posterior, candidates: FloatArray, rng: np.random.Generator, samples: int
) -> FloatArray:
    """NEI of each candidate (in standardised units): EI against each joint sample's best
    at the posterior's points, averaged over ``samples`` samples."""
    k_ox = post.kernel(post.x)
    k_cx = post.kernel(candidates, post.x)
    a_o = solve_triangular(post.chol, k_ox, lower=True)
    a_c = solve_triangular(post.chol, k_cx.T, lower=True)
    mu_o = k_ox @ post.weights
    mu_c = k_cx @ post.weights
    cov_oo = k_ox - a_o.T @ a_o
    cov_co = k_cx - a_c.T @ a_o
    var_c = post.kernel.diag(candidates) - np.sum(a_c * a_c, axis=0)

    n = len(post.x)
    cov_oo = 0.5 * (cov_oo + cov_oo.T) + np.eye(n) * JITTER
    lower = np.linalg.cholesky(cov_oo)
    draws = mu_o[:, None] + lower @ rng.standard_normal((n, samples))
    # Each candidate given a sample at the observed points: Gaussian, mean moved by the
    # sample, variance the same for every sample.
    gain = cho_solve((lower, True), cov_co.T).T
    mean = mu_c[:, None] + gain @ (draws - mu_o[:, None])
    sd = np.sqrt(np.maximum(var_c - np.sum(gain * cov_co, axis=1), 1e-12))[:, None]
    z = (mean - draws.max(axis=0)[None, :]) / sd
    ei = sd * (z * dist.norm_cdf(z) + dist.norm_pdf(z))
    result: FloatArray = ei.mean(axis=1)
    return result
