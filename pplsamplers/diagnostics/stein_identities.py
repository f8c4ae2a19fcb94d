"""The full-data Stein identities read on thinned draws: the engine of the self-check's
Stein check (:mod:`pplsamplers.diagnostics.checks`, whose module docstring justifies the
thresholds).

For a target π whose boundary terms vanish, E_π[s] = 0 and E_π[(x − E x) sᵀ] = −I with
s = −∇U the exact (full-data) score.  :func:`stein_errors` turns both into a mean error and
a scale error per coordinate, in posterior sds, plus the scale error averaged over the
coordinates, each with its MCSE.  With S the covariance and x̄ the mean of *all* draws, each
thinned draw i contributes

    g_i = S s_i + (x_i − x̄),  mean_err_j = −mean_i(g_ij) / (sd_j r_j),
    scale_err_j = −mean_i(g_ij (x_ij − x̄_j)) / S_jj,   r_j = √(1 + scale_err_j),

after removing, per coordinate, the least-squares fit on the control variates
z_j = (x_j − x̄_j)/sd_j and z_j² − 1, whose mean over *all* draws is exactly 0.  For exact
draws E[g] = 0 and E[g_j (x − x̄)_j] = 0 for any fixed S (the Stein identities).  For a
Gaussian posterior N(μ, Σ) and draws with mean μ + δ and covariance c²Σ the check reads
mean_err = δ/σ, r = c and scale_err = c² − 1.  S must not contain the checked draw: its own
share c cᵀ/N has E[c_j² (c·s)] = −(D + 2) S_jj, which biases scale_err by (D + 2)/N (times
the summed squared autocorrelations of correlated draws).  So the scale term of draw i uses
S₋ᵢ, the covariance without the draws of its chain within 3 autocorrelation times (ArviZ
bulk ESS) of it; the mean term keeps S (its own share there has mean 0).  A dense S makes
the check sharp for correlated posteriors; a diagonal S (D > 1000, or fewer than 2D draws)
is unbiased but noisier; where the set-up's Gaussian x = c + L z is known (``metric``), the
mean term uses S = L diag(v) Lᵀ instead, v the draws' variances in z: the posterior's
correlations without a D × D matrix (an arrowhead L costs O(D) per product), so that on a
correlated posterior of D > 1000 (raw covariates) the mean error keeps both its scale (δ/σ)
and a small Monte Carlo error.  Any fixed S keeps the identities exact.  The MCSEs use the
ArviZ ESS of the per-draw terms.

Examples
--------
>>> import jax, jax.numpy as jnp, numpy as np
>>> from pplsamplers.estimator import build_potential
>>> terms = lambda x, idx: (0.0, 0.5 * jnp.sum(x**2) * jnp.ones(idx.shape) / 4)
>>> pot = build_potential(terms, dim=2, N=4)
>>> draws = 1.2 * np.random.default_rng(0).normal(size=(2, 1000, 2))  # every sd 20% wide
>>> values, how, bad = stein_errors(draws, pot, 200, None, "auto")
>>> how, bad, round(values.coherent_scale_err, 1)  # it reads c² − 1 = 0.44
('dense', 0, 0.4)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.estimator import Estimator, Potential
from pplsamplers.types import Array, PRNGKey


class SteinErrors(NamedTuple):
    """What :func:`stein_errors` reads, per coordinate (arrays of D) or over all of them."""

    mean_err: np.ndarray
    mean_mcse: np.ndarray
    sd_ratio: np.ndarray
    sd_mcse: np.ndarray
    scale_err: np.ndarray
    scale_mcse: np.ndarray
    coherent_scale_err: float
    """The scale error averaged over the coordinates."""
    coherent_scale_mcse: float
    num_draws: int
    """Thinned draws checked (one full-data pass each)."""
    potential: np.ndarray
    """U at every draw (chains, n): the full-data pass's at the checked draws, NaN elsewhere
    and where the scores were given."""

    @classmethod
    def missing(cls, dim: int) -> SteinErrors:
        """NaN everywhere and no draw checked: the check was skipped."""
        nan = np.full(dim, np.nan)
        return cls(nan, nan, nan, nan, nan, nan, np.nan, np.nan, 0, np.full((0, 0), np.nan))


@partial(jax.jit, static_argnums=0)
def _scores(estimator: Estimator, xs: Array) -> tuple[Array, Array]:
    return jax.lax.map(estimator.full_value_and_grad, xs, batch_size=8)


def scores_fn(potential: Potential) -> Callable[[Array], tuple[Array, Array]]:
    """``(m, D) -> (U (m,), ∇U (m, D))`` over the full data, compiled once per estimator."""
    return partial(_scores, potential.estimator)


def mcse_of_mean(terms: np.ndarray) -> np.ndarray:
    """MCSE of the mean of ``terms`` (chains, k, P) from ArviZ's ESS (capped at the count)."""
    count = terms.shape[0] * terms.shape[1]
    flat = terms.reshape(count, -1)
    sd = np.std(flat, axis=0, ddof=1) if count > 1 else np.full(flat.shape[1], np.inf)
    ess = np.full(flat.shape[1], float(count))
    if terms.shape[1] >= 4:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            est = np.asarray(az.ess(terms, method="mean"), float)
        ess = np.where(np.isfinite(est), np.clip(est, 1.0, count), ess)
    tiny = sd <= 1e-10 * (1.0 + np.abs(np.mean(flat, axis=0)))
    return np.where(tiny, 0.0, sd / np.sqrt(ess))


def control_variate_adjust(terms: np.ndarray, controls: np.ndarray) -> np.ndarray:
    """Per coordinate, ``terms − β·controls`` with β the least-squares slope on the thinned
    draws: the same mean in expectation (the controls have mean 0 over all draws), less noise.
    """
    c = controls - controls.mean(0)
    t = terms - terms.mean(0)
    gram = np.einsum("mjp,mjq->jpq", c, c) + 1e-12 * np.eye(c.shape[-1])
    beta = np.linalg.solve(gram, np.einsum("mjp,mj->jp", c, t)[..., None])[..., 0]
    return terms - np.einsum("mjp,jp->mj", controls, beta)


def autocorrelation_time(draws: np.ndarray) -> float:
    """The largest integrated autocorrelation time, draws per effective draw, over the
    coordinates of ``draws`` (chains, n, D): ``chains·n / bulk ESS`` (ArviZ), at least 1."""
    chains, n, _ = draws.shape
    if n < 4:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ess = np.asarray(az.ess(draws, method="bulk"), float)
    ess = ess[np.isfinite(ess) & (ess > 0)]
    return max(1.0, float(np.max(chains * n / ess))) if ess.size else 1.0


def leave_window_out_scores(
    centred: np.ndarray,
    rows: np.ndarray,
    scores: np.ndarray,
    cov: np.ndarray,
    dense: bool,
    half_width: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``S₋ᵢ sᵢ`` and ``diag S₋ᵢ`` per checked draw i, with S₋ᵢ the covariance of all draws
    but those of draw i's chain within ``half_width`` steps of it.

    ``centred`` (chains, n, D) are the draws minus their mean, ``cov`` = Σ c cᵀ / (chains·n)
    (dense or diagonal), ``rows`` (m, 2) the (chain, step) of each checked draw and ``scores``
    (m, D) its s = −∇U.  A rank-|W| update of ``cov``: no matrix is formed per draw.
    """
    chains, n, dim = centred.shape
    total = chains * n
    var = np.diag(cov) if dense else np.asarray(cov)
    base = scores @ cov.T if dense else scores * var
    out, diag = np.empty_like(scores), np.empty_like(scores)
    for i, (chain, step) in enumerate(rows):
        window = centred[chain, max(0, step - half_width) : step + half_width + 1]
        kept = total - len(window)
        sq = np.sum(window**2, axis=0)
        diag[i] = (total * var - sq) / kept
        if dense:
            out[i] = (total * base[i] - window.T @ (window @ scores[i])) / kept
        else:
            out[i] = diag[i] * scores[i]
    diag = np.where(diag > 1e-12 * var, diag, var)  # a window that held all of the variance
    return out, diag


def metric_scores(metric: Any, draws: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``S s`` per row of ``scores`` (m, D) with S = L diag(v) Lᵀ: L the factor of ``metric``
    (x = c + L z, a :class:`~pplsamplers.estimator.Whitening` or an arrowhead one), v the
    variances of ``draws`` (M, D) in z.  One compiled program per metric type and shapes
    (the metric is an argument), not one per array operation."""
    dtype = jnp.asarray(metric.center).dtype
    as_array = lambda a: jnp.asarray(a, dtype)
    return np.asarray(_metric_scores(metric, as_array(draws), as_array(scores)), float)


@jax.jit
def _metric_scores(metric: Any, draws: Array, scores: Array) -> Array:
    center = metric.center
    variances = jnp.var(metric.to_z(draws), axis=0)

    def apply_factor(u: Array) -> Array:
        return metric.to_x(u) - center

    _, transpose = jax.vjp(apply_factor, jnp.zeros_like(center))
    lt_scores = jax.vmap(lambda row: transpose(row)[0])(scores)
    return jax.vmap(apply_factor)(variances * lt_scores)


def potential_at(values: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    """(chains, n): ``values`` (chains, k) at the columns ``idx``, NaN elsewhere."""
    out = np.full((values.shape[0], n), np.nan)
    out[:, idx] = values
    return out


def stein_errors(
    draws: np.ndarray,
    potential: Potential | None,
    thin_to: int,
    key: PRNGKey | None,
    whiten: str,
    scores: np.ndarray | None = None,
    metric: Any = None,
) -> tuple[SteinErrors | None, str, int]:
    """Stein mean and scale errors on ``thin_to`` evenly thinned draws (the derivation:
    :mod:`pplsamplers.diagnostics.checks`).

    Returns ``(values or None, how, number of draws with a non-finite potential)``; ``values``
    is a :class:`SteinErrors` and ``how`` is ``"dense"``, ``"diag"`` or
    ``"skipped: <reason>"``.  ``key`` offsets the thinning grid at random; ``whiten`` is
    ``"auto"``, ``"dense"`` or ``"diag"`` (:func:`~pplsamplers.diagnostics.checks.self_check`).
    Each checked draw is whitened with the covariance of the draws outside a window of
    ``3 × autocorrelation_time`` steps around it (:func:`leave_window_out_scores`): a
    covariance that contains the draw itself biases the scale error by about +D / ESS.
    ``scores`` (same shape as ``draws``), unbiased estimates of s = −∇U at every draw, replace
    the full-data scores: every draw is then checked and ``potential`` is not read.
    ``metric`` (the set-up's Gaussian, or ``None``) shapes the mean term where S is not dense
    (:func:`metric_scores`; ``how`` is then ``"structured"``).
    """
    chains, n, dim = draws.shape
    flat = draws.reshape(-1, dim)
    xbar = flat.mean(0)
    use_dense = whiten == "dense" or (whiten == "auto" and dim <= 1000 and flat.shape[0] >= 2 * dim)
    cov = np.cov(flat, rowvar=False, bias=True).reshape(dim, dim) if use_dense else flat.var(0)
    var = np.diag(cov).copy() if use_dense else cov.copy()
    if np.any(~(var > 0)):
        return None, "skipped: a coordinate has zero variance", 0
    if scores is not None:
        k, idx = n, np.arange(n)
        thin, grad = draws.reshape(-1, dim), -np.asarray(scores, float).reshape(-1, dim)
        bad, u_val = ~np.all(np.isfinite(grad), -1), np.full(len(thin), np.nan)
    else:
        k = min(n, max(2, -(-thin_to // chains)))
        start = 0.0 if key is None else float(jax.random.uniform(key))
        idx = np.floor((start + np.arange(k)) * (n / k)).astype(int)  # evenly spread, < n
        thin = draws[:, idx].reshape(-1, dim)
        padded = np.concatenate([thin, np.repeat(thin[:1], (-len(thin)) % 32, 0)])
        u_val, grad = scores_fn(potential)(jnp.asarray(padded, potential.init_position.dtype))
        u_val, grad = np.asarray(u_val, float)[: len(thin)], np.asarray(grad, float)[: len(thin)]
        bad = ~(np.isfinite(u_val) & np.all(np.isfinite(grad), -1))
    if np.any(bad):
        return None, f"skipped: non-finite potential at {int(np.sum(bad))} draws", int(np.sum(bad))
    centred = thin - xbar
    rows = np.stack(np.meshgrid(np.arange(chains), idx, indexing="ij"), -1).reshape(-1, 2)
    half_width = min(math.ceil(3.0 * autocorrelation_time(draws)), n // 4)
    s_part, s_var = leave_window_out_scores(draws - xbar, rows, -grad, cov, use_dense, half_width)
    sd = np.sqrt(var)
    z = centred / sd
    # control variates z_j and z_j² − 1: their mean over *all* draws is exactly 0
    controls = np.stack([z, z**2 - 1.0], -1)  # (m, D, 2)
    # mean term −g_i/sd with g_i = S s_i + (x_i − x̄): draw i's own share of S, c_i (c_i·s_i)/N,
    # has mean 0 (a Stein identity), so the full S keeps the mean check exact for a Gaussian.
    # Scale term −(S₋ᵢ s_i)_j c_ij / S₋ᵢ,jj − z_ij²: here that share has mean −(D + 2) S_jj / N.
    structured = metric is not None and not use_dense
    if use_dense:
        s_full = -grad @ cov.T
    elif structured:
        s_full = metric_scores(metric, flat, -grad)
    else:
        s_full = -grad * var
    t_mean = control_variate_adjust(-(s_full + centred) / sd, controls).reshape(chains, k, dim)
    t_scale = control_variate_adjust(-s_part * centred / s_var - z**2, controls)
    t_scale = t_scale.reshape(chains, k, dim)
    # the last column: each draw's scale term averaged over the coordinates (coherent error)
    coherent = t_scale.mean(-1, keepdims=True)
    mcse = mcse_of_mean(np.concatenate([t_mean, t_scale, coherent], -1)) * np.sqrt(
        k * chains / max(k * chains - 3, 1)
    )
    scale_err = t_scale.mean((0, 1))
    ratio = np.sqrt(np.maximum(1.0 + scale_err, 0.0))
    r = np.maximum(ratio, 0.5)
    out = SteinErrors(
        mean_err=t_mean.mean((0, 1)) / r,
        mean_mcse=mcse[:dim] / r,
        sd_ratio=ratio,
        sd_mcse=mcse[dim : 2 * dim] / (2.0 * r),
        scale_err=scale_err,
        scale_mcse=mcse[dim : 2 * dim],
        coherent_scale_err=float(coherent.mean()),
        coherent_scale_mcse=float(mcse[-1]),
        num_draws=len(thin),
        potential=potential_at(u_val.reshape(chains, k), idx, n),
    )
    return out, "dense" if use_dense else "structured" if structured else "diag", 0


__all__ = [
    "SteinErrors",
    "autocorrelation_time",
    "control_variate_adjust",
    "leave_window_out_scores",
    "mcse_of_mean",
    "metric_scores",
    "scores_fn",
    "stein_errors",
]
