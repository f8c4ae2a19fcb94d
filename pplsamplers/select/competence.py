"""Competence rules: model features -> ranked candidate samplers with plain-language reasons.

Like PyMC's step-method ``Competence``, every candidate gets a level per rule that applies,
and the ranking is by total score.  The thresholds below were set from the measurements of
``benchmarks/selection_suite.py`` (see README, "Automatic selection").
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from pplsamplers.registry import SAMPLERS
from pplsamplers.select.features import ModelFeatures

INCOMPATIBLE, COMPATIBLE, PREFERRED, IDEAL = 0.0, 1.0, 2.0, 3.0
LAST_RESORT = 0.5
"""Below COMPATIBLE: NUTS at large N, measured last or nearly last per epoch on every large-N
model of the selection suite, so that it does not take one of the pilot's places."""

SMALL_N = 5_000
"""Below this many data a full-data gradient is cheap: exact NUTS wins (suite: breast cancer)."""
NEAR_GAUSSIAN_MISFIT = 0.15
"""Quadratic misfit under which the Laplace reference of Boomerang is accurate."""
NON_GAUSSIAN_MISFIT = 0.5
"""Quadratic misfit above which a posterior is treated as non-Gaussian (SBPS territory)."""
STRONG_CORRELATION = 20.0
"""Correlation condition number above which a dense metric (HAMCMC) pays off."""
SCALE_SPREAD = 30.0
"""Diagonal-curvature spread above which isotropic samplers need preconditioning."""
SKEWED = 0.25
HEAVY_TAILS = 0.8
WILD_GRADIENTS = 50.0
"""Per-example gradient kurtosis above which gradients are 'wild' (heavy-tailed covariates)."""

SGLD_STEP_FRACTION = 0.1
"""SGLD/pSGLD step as a fraction of min(1/λ_max, 4/max V) (as ``SGLD(step_size="auto")``)."""
SGBD_STEP_FRACTION = 0.5
"""SGBD's σ_j as a fraction of coordinate j's conditional posterior sd 1/√H_jj at the MAP."""
BARKER_NOISE_LIMIT = 1.702 / 1.233
"""σ_j τ_j at most this: the SGBD paper's §4.2 step rule, where the noise correction is valid."""
DENSE_REFERENCE_DIM = 256
"""Up to this D Boomerang's reference uses the full Hessian at the MAP (O(D²) per step): on the
d = 20 logistic regression it raised min ESS from 21 to 370 per 600 draws (N = 10⁴)."""
HAMCMC_STEP = 0.1
"""HAMCMC's ε in the L-BFGS metric; where H ≈ Σ the Euler variance inflation is 1/(1 − ε/2)."""

CONTROL_VARIATE_KERNELS = tuple(
    name for name, spec in SAMPLERS.items() if spec.supports_control_variate
)
"""Kernels given control variates anchored at the MAP when the posterior is unimodal-looking
(quadratic misfit below ``NON_GAUSSIAN_MISFIT``): at large N they cut the minibatch noise by
orders of magnitude (the SBPS and Boomerang benchmarks).  SGBD keeps plain minibatches (its
step rule and noise correction are calibrated for them), and so does pSGLD (its RMSprop metric
would blow up on the small control-variate gradients near the anchor)."""

PREFERENCE = tuple(name for name, spec in SAMPLERS.items() if spec.selectable)
"""Tie-break order, most specialised first (the registry's order)."""


class Candidate(NamedTuple):
    """One ranked sampler: registry name, score, constructor parameters, reasons."""

    name: str
    score: float
    params: dict
    reasons: tuple[str, ...]


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def tuned_params(name: str, features: ModelFeatures) -> dict:
    """Scale-aware constructor parameters for candidate ``name`` from the MAP probes.

    The kernels' own defaults are unit-scale numbers; these follow the posterior's scale so
    that a candidate is compared at a sensible setting, not at an arbitrary one:

    - SGLD: ε = 0.1 · min(1/λ_max, 4/max_j V_j) (curvature and Welling & Teh noise limits;
      V is dropped with control variates, whose noise vanishes at the anchor);
      pSGLD additionally divides by the RMSprop metric at the MAP, min_j(λ + √V_j)⁻¹.
    - SGBD: σ_j = min(0.5/√H_jj, 1.380/τ_j): half the conditional posterior sd, capped by the
      paper's §4.2 rule σ = 1.702/(1.233 τ) so the flip-probability correction stays valid.
    - HAMCMC: H⁰ = I/λ_max and ε = 0.1, so that directions the L-BFGS pairs miss take SGLD's
      step while directions they capture move a tenth of the way to the Newton step.
    - BPS: refreshment rate √median(H_jj), one refresh per typical posterior width.
    - Boomerang: a dense reference covariance (the inverse full Hessian at the MAP) up to
      D = ``DENSE_REFERENCE_DIM``, so that its elliptical flow follows the correlations.
    - Control variates anchored at the MAP for ``CONTROL_VARIATE_KERNELS`` when the quadratic
      misfit is below ``NON_GAUSSIAN_MISFIT`` and the probes found one mode (so one anchor
      serves everywhere).

    Returns ``{}`` when the probes are unavailable (no MAP, discrete sites).
    """
    f = features
    if f.curvature_diagonal is None or not math.isfinite(f.max_curvature):
        return {}
    extra = (
        {"control_variate": True}
        if name in CONTROL_VARIATE_KERNELS
        and f.quadratic_misfit < NON_GAUSSIAN_MISFIT
        and f.mode_count <= 1
        and not f.cost_ratio >= 1
        else {}
    )
    return {**extra, **_scaled(name, f, control_variate=bool(extra))}


def anchor_control_variate(params: dict, features: ModelFeatures) -> dict:
    """``params`` with ``control_variate=True`` replaced by the probes' MAP as the anchor, so
    that the chosen kernel does not search for the MAP again; unchanged without a MAP."""
    if params.get("control_variate") is True and features.map_position is not None:
        return {**params, "control_variate": features.map_position}
    return params


def _scaled(name: str, f: ModelFeatures, control_variate: bool) -> dict:
    diag = np.asarray(f.curvature_diagonal, dtype=float)
    noise_sd = (
        np.zeros_like(diag)
        if f.gradient_noise_sd is None or control_variate
        else np.asarray(f.gradient_noise_sd, dtype=float)
    )  # CV: ~no noise near x*
    if name in ("sgld", "psgld"):
        limit = 1.0 / max(f.max_curvature, 1e-300)
        if noise_sd.max() > 0:
            limit = min(limit, 4.0 / float(np.max(noise_sd**2)))
        step = SGLD_STEP_FRACTION * limit
        if name == "psgld":
            step *= float(np.min(1e-5 + noise_sd))
        return {"step_size": step} if step > 0 else {}
    if name == "sgbd":
        sigma = SGBD_STEP_FRACTION / np.sqrt(diag)
        sigma = np.where(
            noise_sd > 0,
            np.minimum(sigma, BARKER_NOISE_LIMIT / np.maximum(noise_sd, 1e-300)),
            sigma,
        )
        return {"step_size": sigma}
    if name == "hamcmc":
        return {"step_size": HAMCMC_STEP, "initial_scale": 1.0 / max(f.max_curvature, 1e-300)}
    if name == "bps":
        return {"refresh_rate": float(np.sqrt(np.median(diag)))}
    if name == "boomerang" and f.dim <= DENSE_REFERENCE_DIM:
        return {"curvature": "full_hessian"}
    return {}


def rank_candidates(
    features: ModelFeatures, candidates: tuple[str, ...] | list[str] | None = None
) -> list[Candidate]:
    """Rank samplers for a model from its :class:`ModelFeatures` (a pure function).

    Parameters
    ----------
    features
        From :func:`pplsamplers.select.features.model_features`.
    candidates
        Restrict the ranking to these registry names (default: all of ``PREFERENCE``).

    Returns
    -------
    Candidates sorted best first; incompatible ones are dropped.

    Raises
    ------
    ValueError
        Discrete latent sites with a large data set: no candidate can sample them.
    """
    names = list(PREFERENCE if candidates is None else candidates)
    unknown = set(names) - set(PREFERENCE)
    if unknown:
        raise ValueError(f"unknown candidates {sorted(unknown)}; choose from {list(PREFERENCE)}.")
    f = features
    scores = {name: COMPATIBLE for name in names}
    reasons: dict[str, list[str]] = {name: [] for name in names}
    params: dict[str, dict] = {name: {} for name in names}

    def rule(name: str, level: float, why: str, **extra: object) -> None:
        """Raise ``name`` to ``level`` (the highest level of its rules counts); a level below
        COMPATIBLE (INCOMPATIBLE, LAST_RESORT) is set as is."""
        if name in scores:
            scores[name] = max(scores[name], level) if level >= COMPATIBLE else level
            reasons[name].append(why)
            params[name].update(extra)

    if f.discrete_sites:
        sites = ", ".join(f.discrete_sites)
        if f.num_data and f.num_data > SMALL_N:
            raise ValueError(
                f"discrete latent site(s) {sites}: pplsamplers' gradient samplers need continuous "
                "latents, and with a large data set NUTS+Gibbs is too slow. Marginalise them out."
            )
        for name in names:
            if name != "nuts":
                rule(name, INCOMPATIBLE, f"cannot move the discrete site(s) {sites}")
        rule(
            "nuts",
            IDEAL,
            f"discrete site(s) {sites}: NumPyro's DiscreteHMCGibbs around NUTS "
            "updates them exactly",
            discrete=True,
        )
        return _sorted(scores, params, reasons, f)

    if not f.has_data_plate or f.num_data <= SMALL_N:
        why = (
            "the model has no data plate to subsample"
            if not f.has_data_plate
            else f"N = {f.num_data} ≤ {SMALL_N}: a full-data gradient is cheap"
        )
        rule("nuts", IDEAL, f"{why}; NUTS is exact and needs no tuning")
        for name in names:
            if name != "nuts":
                rule(name, COMPATIBLE, f"{why}; subsampling adds bias for little saving")
        return _sorted(scores, params, reasons, f)

    rule(
        "nuts",
        LAST_RESORT,
        f"exact, but every gradient touches all N = {f.num_data} data "
        "(last or nearly last per epoch on every large-N model of the selection suite)",
    )
    multimodal = f.mode_count > 1
    near_gaussian = (
        f.quadratic_misfit < NEAR_GAUSSIAN_MISFIT and f.skewness < SKEWED and not multimodal
    )
    if multimodal:
        why = (
            f"{f.mode_count} separated modes found by the MAP fits from random starts: one "
            "Laplace reference or control-variate anchor covers only one of them"
        )
        rule("boomerang", COMPATIBLE, why)
        rule("sbps", PREFERRED + 0.5, f"{why}; SBPS needs neither, and its bias is controlled by k")
        rule("psbps", PREFERRED, f"{why}: preconditioned SBPS needs neither")
        rule("sgbd", PREFERRED, f"{why}: Barker moves need neither")
    elif near_gaussian:
        rule(
            "boomerang",
            IDEAL,
            f"the posterior is close to its Laplace approximation (quadratic misfit "
            f"{_fmt(f.quadratic_misfit)} < {NEAR_GAUSSIAN_MISFIT}): the Gaussian reference "
            "absorbs most of U and control variates make minibatch rates nearly exact",
            control_variate=True,
        )
    else:
        rule(
            "boomerang",
            COMPATIBLE,
            f"non-Gaussian posterior (misfit {_fmt(f.quadratic_misfit)}): the Laplace "
            "reference is poor",
        )
    non_gaussian = f.quadratic_misfit > NON_GAUSSIAN_MISFIT
    if f.correlation_condition > STRONG_CORRELATION:
        why = (
            f"strong correlations (condition number {_fmt(f.correlation_condition)} after "
            "diagonal scaling)"
        )
        if non_gaussian:  # suite: HAMCMC's pairs diverged on the hyperboloid
            rule(
                "hamcmc",
                COMPATIBLE,
                f"{why}, but the curvature changes across a non-Gaussian "
                "posterior and L-BFGS pairs from one region mislead in another",
            )
        else:
            rule("hamcmc", PREFERRED + 0.5, f"{why}: L-BFGS captures the dense curvature")
        rule("psbps", PREFERRED, f"{why}: preconditioned SBPS tolerates them without tuning")
    if f.curvature_spread > SCALE_SPREAD:
        why = f"coordinate scales differ by {_fmt(f.curvature_spread)}×"
        rule("psbps", PREFERRED, f"{why}: pSBPS rescales them")
        rule("sgbd", PREFERRED, f"{why}: Barker moves are robust to heterogeneous scales")
        rule("sigmabps", PREFERRED, f"{why}: σBPS rescales them")
    skewed = f.skewness > SKEWED or f.tail_growth < HEAVY_TAILS
    if skewed:
        rule(
            "sgbd",
            PREFERRED + 0.5,
            f"skewed or heavy-tailed posterior (skewness {_fmt(f.skewness)}, tail growth "
            f"{_fmt(f.tail_growth)}): Barker moves stay accurate where Langevin is biased",
            variant="corrected",
        )
    if f.gradient_kurtosis > WILD_GRADIENTS:
        why = f"wild per-example gradients (kurtosis {_fmt(f.gradient_kurtosis)})"
        rule(
            "sgbd",
            PREFERRED + 0.5,
            f"{why}: SGBD's bounded moves do not blow up",
            variant="corrected",
        )
        rule(
            "psbps",
            PREFERRED,
            f"{why}: pSBPS's thinning bound absorbs them (best per epoch "
            "on the suite's heavy-tailed logistic regression)",
        )
    if non_gaussian:
        # second to SGBD when skewed, so that the pilot measures both (SBPS was best per epoch
        # on the suite's skew-normal toy)
        rule(
            "sbps",
            PREFERRED if skewed else PREFERRED + 0.5,
            f"non-Gaussian posterior (misfit {_fmt(f.quadratic_misfit)}): SBPS needs no "
            "reference and its bias is controlled by k",
        )
        rule("psbps", PREFERRED, "non-Gaussian posterior: preconditioned SBPS")
    rule("sgld", COMPATIBLE, "baseline: cheap, but biased at any fixed step")
    if not math.isfinite(f.quadratic_misfit):
        rule("sbps", PREFERRED, "probe features unavailable: SBPS makes no Gaussian assumption")
    return _sorted(scores, params, reasons, f)


def _sorted(scores: dict, params: dict, reasons: dict, features: ModelFeatures) -> list[Candidate]:
    order = {name: i for i, name in enumerate(PREFERENCE)}
    ranked = sorted(scores, key=lambda name: (-scores[name], order[name]))
    return [
        Candidate(
            name,
            scores[name],
            {**tuned_params(name, features), **params[name]},
            tuple(reasons[name]) or ("compatible; no rule favours it for these features",),
        )
        for name in ranked
        if scores[name] > INCOMPATIBLE
    ]


__all__ = ["Candidate", "anchor_control_variate", "rank_candidates", "tuned_params"]
