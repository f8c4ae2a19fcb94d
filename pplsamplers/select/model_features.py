"""The record of what the selector knows about a model (:class:`ModelFeatures`)."""

from __future__ import annotations

from typing import NamedTuple

from pplsamplers.types import Array


class ModelFeatures(NamedTuple):
    """What the selector knows about a model; each field says why it matters.

    Structural fields come from one trace of the model, probe fields from the shared warmup's
    mode stage and a few minibatch gradients at the MAP (:func:`pplsamplers.select.model_features`).
    A probe that cannot be read is NaN.

    Parameters
    ----------
    num_data : int
        N.  Below a few thousand data a full-batch NUTS gradient is cheap and exact, so
        subsampling buys little and costs bias.
    subsample_size : int
        n; with N it fixes the cost of a minibatch evaluation (``cost_ratio``).
    dim : int
        D, the number of unconstrained dimensions; dense-curvature methods cost O(D²).
    has_data_plate : bool
        Without a data plate there is nothing to subsample, and NUTS is the right tool.
    discrete_sites : tuple of str
        Discrete latent sites not marked for enumeration, which no gradient-based sampler can
        move.
    constrained_sites : tuple of str
        Sites sampled through a bijection (e.g. a positive scale), whose Jacobian skews the
        unconstrained posterior near the boundary.
    cost_ratio : float
        n/N, the cost of a minibatch gradient relative to a full-data one.
    curvature_spread : float
        max/min of the diagonal Hessian at the MAP.  Large spreads hurt isotropic samplers
        (SGLD, SBPS, BPS) and call for diagonal preconditioning (pSBPS, σBPS, pSGLD) or
        per-coordinate steps (SGBD).
    correlation_condition : float
        Condition number of the Hessian's correlation matrix: large values mean correlations
        that only a dense metric (HAMCMC) or a Gaussian reference (Boomerang) removes.
    gradient_noise_ratio : float
        Median over coordinates of sd(minibatch gradient noise) / √H_jj at the MAP, the noise
        relative to the gradient one posterior sd from the mode; large ratios make minibatch
        PDMP rates and SGLD noisy, and control variates remove most of it.
    quadratic_misfit : float
        Worst relative error of the Laplace prediction t²/2 of U along random directions at
        t = ±1, ±2, ±3 posterior sds (0 for a Gaussian), after discounting twice the float
        rounding of U's sum (read from two probes 0.1 and 0.15 sd out, at most 0.25 nats);
        the Boomerang's reference and control variates pay off when it is small.
    skewness : float
        Worst abs(ΔU(t) − ΔU(−t)) / (ΔU(t) + ΔU(−t)) along the probe directions; SGBD's Barker
        moves beat Langevin on skewed posteriors (Mauri & Zanella §5).
    tail_growth : float
        Smallest (ΔU(3) + ΔU(−3)) / 9: 1 for Gaussian tails, below 1 for heavier ones.
    gradient_kurtosis : float
        Largest kurtosis of the per-example gradients at the MAP: heavy-tailed covariates give
        wild gradients that destabilise SGLD (SGBD's bounded moves tolerate them).
    max_curvature : float, default NaN
        Largest eigenvalue of the Hessian at the MAP: 1/λ_max is the squared width of the
        narrowest direction, which bounds every explicit step size (SGLD, HAMCMC's start).
    mode_count : int, default 1
        Separated optima found (:func:`~pplsamplers.warmup.modes.count_modes`).  Every other
        probe is local to one mode; above 1, a Laplace reference (Boomerang) and control
        variates anchored at the MAP describe only part of the posterior.
    map_position : Array or None, default None
        The MAP (flat, unconstrained) used by the probes.
    curvature_diagonal : Array or None, default None
        Diagonal Hessian at the MAP: 1/√H_jj is a coordinate's conditional posterior sd, the
        natural per-coordinate step scale (SGBD's σ_j).
    gradient_noise_sd : Array or None, default None
        Per-coordinate sd of the minibatch gradient at the MAP (SGBD's τ_j), which caps the
        Barker step where the noise correction stays valid (τ_j σ_j < 1.702).
    edge_sites : tuple of str, default ()
        Observed sites whose support depends on the latents (``y ~ Uniform(0, θ)``): a hard
        edge at the data that no minibatch sees.  The probes are skipped (NaN).
    laplace_weight_sd : float, default NaN
        sd of the log importance weights of Laplace draws (the shared warmup's check,
        :func:`~pplsamplers.warmup.variational.laplace_misfit`): 0 for a Gaussian, large where
        the joint mode sits away from the mass.  Unlike ``quadratic_misfit`` it weighs every
        direction at once.  NaN where AutoSampler skips the shared warmup.
    local_sites : tuple of str, default ()
        Latent sites inside the data plate (per-datum latents), which no minibatch kernel can
        subsample; the probes are skipped (NaN).
    full_data_reason : str, default ""
        Why only NUTS can run the model (e.g. no latent dimension); empty otherwise.
    group_structure : str, default ""
        The group effects the shared warmup found and modelled (its arrowhead Gaussian at the
        nested Laplace centre, converged); empty otherwise.

    Examples
    --------
    >>> from pplsamplers.datasets.tiny import tiny_features
    >>> f = tiny_features()  # a near-Gaussian posterior with N = 10⁴ data
    >>> f.as_dict()["cost_ratio"], f.mode_count
    (0.01, 1)
    """

    num_data: int
    subsample_size: int
    dim: int
    has_data_plate: bool
    discrete_sites: tuple[str, ...]
    constrained_sites: tuple[str, ...]
    cost_ratio: float
    curvature_spread: float
    correlation_condition: float
    gradient_noise_ratio: float
    quadratic_misfit: float
    skewness: float
    tail_growth: float
    gradient_kurtosis: float
    max_curvature: float = float("nan")
    mode_count: int = 1
    map_position: Array | None = None
    curvature_diagonal: Array | None = None
    gradient_noise_sd: Array | None = None
    edge_sites: tuple[str, ...] = ()
    laplace_weight_sd: float = float("nan")
    local_sites: tuple[str, ...] = ()
    full_data_reason: str = ""
    group_structure: str = ""

    def as_dict(self) -> dict[str, object]:
        """Printable (scalar) features, without the per-coordinate vectors."""
        out = self._asdict()
        for vector in ("map_position", "curvature_diagonal", "gradient_noise_sd"):
            out.pop(vector)
        return out
