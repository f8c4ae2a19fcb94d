"""Competence rules: model features -> ranked candidate samplers with plain-language reasons.

Like PyMC's step-method ``Competence``, every candidate gets a level per rule that applies,
and the ranking is by total score.  The thresholds below are set from the measurements of
``benchmarks/selection_suite.py`` (``docs/benchmarks/selection_suite.md``; the docs' selection
guide).  Candidates carry no scale-dependent settings: every sampler runs on the adapter's
whitened potential with control variates and a batch size chosen by the shared warmup
(:mod:`pplsamplers.warmup`), so its own defaults apply.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from pplsamplers.model import ENUMERATE_FIX
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
HIGH_DIM = 50
"""Latent dimension above which a quadratic misfit alone (a few directions) makes a posterior
hierarchical-like; a poor Laplace fit of the whole posterior (``POOR_LAPLACE``) does at any D:
even a low-dimensional random-intercept model with well-identified groups can send Boomerang
far off its scale parameter, where NUTS is exact."""
NUTS_AFFORDABLE_N = 100_000
"""Up to this N, full-data NUTS is the fallback for hierarchical-like posteriors: on a
high-dimensional random-intercept model every minibatch kernel misses by posterior sds (their
whitening is the Laplace approximation, refined from warmup draws), while NUTS is exact
(measured in ``docs/benchmarks/robustness.md``)."""
POOR_LAPLACE = 1.0
"""sd of the log importance weights of Laplace draws above which the Laplace approximation is
a poor fit everywhere (the shared warmup's own threshold, ``variational.MISFIT_THRESHOLD``).
It weighs every direction at once: a hierarchical model can read far above it at its joint
mode while the eight-direction ``quadratic_misfit`` reads small, and models without groups
read far below it (measured in ``docs/benchmarks/robustness.md``)."""
SKEWED = 0.25
HEAVY_TAILS = 0.8
WILD_GRADIENTS = 50.0
"""Per-example gradient kurtosis above which gradients are 'wild' (heavy-tailed covariates)."""


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


def rank_candidates(
    features: ModelFeatures, candidates: tuple[str, ...] | list[str] | None = None
) -> list[Candidate]:
    """Rank samplers for a model from its :class:`ModelFeatures` (a pure function).

    Parameters
    ----------
    features : ModelFeatures
        From :func:`pplsamplers.select.features.model_features`.
    candidates : tuple of str, list of str or None, default None
        Restrict the ranking to these registry names (default: all of ``PREFERENCE``).

    Returns
    -------
    Candidates sorted best first; incompatible ones are dropped.

    Raises
    ------
    ValueError
        Discrete latent sites with a large data set: no candidate can sample them.

    Examples
    --------
    A near-Gaussian posterior with many data favours the Boomerang; with few data, a
    full-data gradient is cheap and exact NUTS comes first.

    >>> from pplsamplers.datasets.tiny import tiny_features
    >>> f = tiny_features()  # a near-Gaussian posterior with N = 10⁴ data
    >>> best = rank_candidates(f)[0]
    >>> best.name, best.score
    ('boomerang', 3.0)
    >>> rank_candidates(f._replace(num_data=1_000))[0].name
    'nuts'
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

    def full_data_only(why_not: str, why_nuts: str, **extra: object) -> list[Candidate]:
        """No minibatch kernel can sample this model: NUTS (with ``extra``) is the candidate."""
        for name in names:
            if SAMPLERS[name].minibatch:
                rule(name, INCOMPATIBLE, why_not)
        rule("nuts", IDEAL, why_nuts, **extra)
        return _sorted(scores, params, reasons, f)

    if f.discrete_sites:
        sites = ", ".join(f.discrete_sites)
        if f.num_data and f.num_data > SMALL_N:
            raise ValueError(
                f"discrete latent site(s) {sites} not marked for enumeration: pplsamplers' "
                "gradient samplers move continuous latents only, and with a large data set "
                f"NUTS+Gibbs is too slow. To marginalise them datum by datum, {ENUMERATE_FIX}."
            )
        return full_data_only(
            f"cannot move the discrete site(s) {sites}",
            f"discrete site(s) {sites}: NumPyro's DiscreteHMCGibbs around NUTS "
            "updates them exactly",
            discrete=True,
        )

    if f.full_data_reason:  # no latent dimension, a likelihood that cannot be subsampled
        return full_data_only(
            f"cannot run this model: {f.full_data_reason}",
            f"{f.full_data_reason}: no minibatch kernel can run it, NumPyro's NUTS runs it "
            "on the full data",
        )

    full_data_cases = (  # (sites, why no minibatch kernel, why NUTS, NUTS's options)
        (
            f.local_sites,
            "cannot subsample the per-datum latent site(s) {}",
            "per-datum latent site(s) {} inside the data plate: no minibatch kernel can "
            "subsample them; NUTS samples them with the rest on the full data",
            {},
        ),
        (
            f.edge_sites,
            "the support of {} depends on the latents",
            "the support of observed site(s) {} depends on the latent values: a hard edge at "
            "the data that only full-data steps see; NUTS runs with support checks",
            {"check_support": f.edge_sites},
        ),
    )
    for sites, why_not, why_nuts, extra in full_data_cases:
        if sites:
            listed = ", ".join(sites)
            return full_data_only(why_not.format(listed), why_nuts.format(listed), **extra)

    if not f.has_data_plate or f.num_data <= SMALL_N:
        why = (
            "the model has no data plate to subsample"
            if not f.has_data_plate
            else f"N = {f.num_data} ≤ {SMALL_N}: a full-data gradient is cheap"
        )
        rule("nuts", IDEAL, f"{why}; NUTS is exact and needs no tuning")
        for name in names:
            if SAMPLERS[name].minibatch:
                rule(name, COMPATIBLE, f"{why}; subsampling adds bias for little saving")
        return _sorted(scores, params, reasons, f)

    # a poor Laplace fit of the whole posterior (the importance weights of its draws) is a
    # ridge or funnel at any D; a misfit along a few directions only counts in high D
    far_from_laplace = f.laplace_weight_sd > POOR_LAPLACE or (
        f.quadratic_misfit > NON_GAUSSIAN_MISFIT and f.dim > HIGH_DIM
    )
    structured = bool(f.group_structure)  # the group effects are modelled, not a misfit
    hierarchical_like = far_from_laplace and not structured and f.num_data <= NUTS_AFFORDABLE_N
    if hierarchical_like:
        rule(
            "nuts",
            IDEAL,
            f"D = {f.dim} latents and a posterior far from its Laplace approximation "
            f"(quadratic misfit {_fmt(f.quadratic_misfit)}, limit {NON_GAUSSIAN_MISFIT}; "
            f"log-weight sd of Laplace draws {_fmt(f.laplace_weight_sd)}, limit "
            f"{POOR_LAPLACE:g}), as in hierarchical models: the minibatch kernels mix too "
            f"slowly there, and at N = {f.num_data} ≤ {NUTS_AFFORDABLE_N} exact NUTS is "
            "affordable",
        )
    else:
        rule(
            "nuts",
            LAST_RESORT,
            f"exact, but every gradient touches all N = {f.num_data} data "
            "(last or nearly last per epoch on every large-N model of the selection suite)",
        )
    if structured:
        rule(
            "boomerang",
            IDEAL + 0.5,
            f"group effects ({f.group_structure}): the shared warmup's Gaussian has their "
            "arrowhead precision and sits at the globals' Laplace-marginal mode, and the "
            "Boomerang's flow is exact on it (measured: benchmarks/hierarchical.py)",
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
        if non_gaussian:  # suite: HAMCMC's pairs diverge on the hyperboloid
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
        # second to SGBD when skewed, so that the pilot measures both (on the suite's
        # skew-normal toy SBPS measures best per epoch)
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
            dict(params[name]),
            tuple(reasons[name]) or ("compatible; no rule favours it for these features",),
        )
        for name in ranked
        if scores[name] > INCOMPATIBLE
    ]


__all__ = ["Candidate", "rank_candidates"]
