"""A Gaussian variational fit that replaces the Laplace approximation where it is poor.

The shared warmup whitens the potential with the Laplace approximation at the joint mode,
x = c + L z.  In a hierarchical model that approximation sits far from the posterior mass: the
joint mode of a random-intercept model puts its scale τ where the posterior has almost no
mass (``docs/benchmarks/robustness.md``), because the mode ignores the volume of the group
effects.  Chains started and preconditioned there spend their warmup getting to the mass,
and their tuning is for the wrong place.

:func:`laplace_misfit` measures the problem with importance weights of Laplace draws:
ζ_k ~ N(0, I) in the whitened coordinates, log w_k = −U_z(ζ_k) + U_z(0) + |ζ_k|²/2 (the log
ratio of the posterior to the Laplace density, up to a constant).  Their standard deviation is
0 for a Gaussian posterior; above :data:`MISFIT_THRESHOLD` the Laplace approximation is a poor
importance proposal, and :func:`fit_gaussian` fits q(ζ) = N(m, S Sᵀ) by maximising the evidence
lower bound

    ELBO(m, S) = E_ε[−U_z(m + S ε)] + log |det S|,      ε ~ N(0, I),                     (1)

with reparameterised gradients (Kucukelbir et al. 2017, ADVI; full rank: S lower triangular
with a positive diagonal, or diagonal when the whitening is), Adam from Optax, started at the
Laplace approximation (m = 0, S = I).  The ELBO includes the entropy log |det S| that the mode
lacks, so q's mean moves into the posterior mass.  The fit is kept only when its ELBO, on
common random numbers, beats the Laplace approximation's.  It needs only gradients of U_z:
full-data ones, or unbiased minibatch ones (with the control variate) for large N.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pplsamplers.estimator import Estimator, Whitening, whiten
from pplsamplers.types import Array, PRNGKey

MISFIT_THRESHOLD = 1.0
"""sd of the log importance weights of Laplace draws above which the Gaussian is fitted."""
MISFIT_DRAWS = 16
"""Laplace draws of :func:`laplace_misfit` (16 full-data passes, one vmapped program)."""
FIT_STEPS = 2000
"""Adam steps of the fit: enough, with ``FIT_LEARNING_RATE``, to bring the log-weight sd of a
high-dimensional hierarchical model well down, where fewer steps or a smaller rate stop short
(measured in ``docs/benchmarks/robustness.md``)."""
FIT_LEARNING_RATE = 0.05


class GaussianFit(NamedTuple):
    """q(ζ) = N(mean, scale scaleᵀ) in the whitened coordinates, and how it did."""

    mean: Array
    """m, shape (D,)."""
    scale: Array
    """S: (D, D) lower triangular, or (D,) diagonal."""
    elbo: Array
    """ELBO (1) of q on common random numbers (``num_check`` draws)."""
    laplace_elbo: Array
    """The same for the Laplace approximation (m = 0, S = I)."""
    improved: Array
    """Whether q is finite and its ELBO beats the Laplace approximation's."""


def laplace_misfit(rng_key: PRNGKey, potential: Estimator, num_draws: int = 16) -> Array:
    """sd of log w_k = −U_z(ζ_k) + U_z(0) + |ζ_k|²/2 over ``num_draws`` Laplace draws ζ_k of
    the whitened ``potential`` (full-data passes; ``inf`` when a draw's U is not finite).

    Examples
    --------
    >>> import jax
    >>> from pplsamplers.datasets import tiny_estimator
    >>> float(laplace_misfit(jax.random.key(0), tiny_estimator(3))) < 1e-6  # a Gaussian
    True
    """
    dim = potential.dim
    dtype = jax.dtypes.canonicalize_dtype(float)
    draws = jax.random.normal(rng_key, (num_draws, dim), dtype)
    # U_z(ζ) − U_z(0) datum by datum: float32 U's rounding error grows with N
    zero = jnp.zeros(dim, dtype)
    rises = jax.vmap(lambda z: potential.full_value_difference(z, zero))(draws)
    log_weights = -rises + 0.5 * jnp.sum(draws**2, axis=1)
    sd = jnp.std(log_weights)
    return jnp.where(jnp.all(jnp.isfinite(log_weights)), sd, jnp.inf)


def _scale(raw: dict[str, Array], dense: bool) -> Array:
    diagonal = jnp.exp(raw["log_diagonal"])
    if not dense:
        return diagonal
    return jnp.tril(raw["lower"], -1) + jnp.diag(diagonal)


def fit_gaussian(
    rng_key: PRNGKey,
    potential: Estimator,
    *,
    dense: bool = True,
    num_steps: int = FIT_STEPS,
    num_samples: int = 4,
    learning_rate: float = FIT_LEARNING_RATE,
    num_check: int = 64,
) -> GaussianFit:
    """Maximise the ELBO (1) of q = N(m, S Sᵀ) for the whitened ``potential`` (one program).

    Each of ``num_steps`` Adam steps (learning rate decaying from ``learning_rate`` to a tenth
    of it) averages ``num_samples`` reparameterised gradients; they are the potential's
    full-data gradients when it is full batch, else its unbiased minibatch gradients (one
    fresh minibatch per sample, so the control variate applies).  The result is compared
    with the Laplace approximation on ``num_check`` common draws with full-data values.

    Examples
    --------
    >>> import jax
    >>> from pplsamplers.datasets import tiny_estimator
    >>> fit = fit_gaussian(jax.random.key(0), tiny_estimator(2), num_steps=50)
    >>> fit.mean.shape, fit.scale.shape
    ((2,), (2, 2))
    """
    dim = potential.dim
    dtype = jax.dtypes.canonicalize_dtype(float)
    full_batch = potential.full_batch

    def gradient(key: PRNGKey, z: Array) -> Array:
        if full_batch:
            return potential.full_value_and_grad(z)[1]
        return potential.grad(z, potential.sample_indices(key))

    def negative_elbo_grad(raw: dict[str, Array], key: PRNGKey) -> dict[str, Array]:
        noise_key, batch_key = jax.random.split(key)
        eps = jax.random.normal(noise_key, (num_samples, dim), dtype)
        scale = _scale(raw, dense)
        points = raw["mean"] + (eps @ scale.T if dense else eps * scale)
        grads = jax.vmap(gradient)(jax.random.split(batch_key, num_samples), points)
        # d/dm E[U] = E[∇U];  d/dS E[U] = E[∇U εᵀ];  minus the entropy term log|det S|
        mean_grad = jnp.mean(grads, axis=0)
        diagonal = jnp.exp(raw["log_diagonal"])
        if dense:
            scale_grad = jnp.tril(grads.T @ eps / num_samples)
            out = {
                "mean": mean_grad,
                "lower": jnp.tril(scale_grad, -1),
                "log_diagonal": jnp.diag(scale_grad) * diagonal - 1.0,
            }
        else:
            out = {"mean": mean_grad, "log_diagonal": jnp.mean(grads * eps, 0) * diagonal - 1.0}
        return out

    raw: dict[str, Any] = {"mean": jnp.zeros(dim, dtype), "log_diagonal": jnp.zeros(dim, dtype)}
    if dense:
        raw["lower"] = jnp.zeros((dim, dim), dtype)
    schedule = optax.cosine_decay_schedule(learning_rate, num_steps, alpha=0.1)
    optimizer = optax.adam(schedule)

    def step(carry: tuple, key: PRNGKey) -> tuple[tuple, None]:
        raw, opt_state = carry
        grads = negative_elbo_grad(raw, key)
        updates, opt_state = optimizer.update(grads, opt_state, raw)
        return (optax.apply_updates(raw, updates), opt_state), None

    fit_key, check_key = jax.random.split(rng_key)
    (raw, _), _ = jax.lax.scan(
        step, (raw, optimizer.init(raw)), jax.random.split(fit_key, num_steps)
    )

    eps = jax.random.normal(check_key, (num_check, dim), dtype)
    # U_z − U_z(0): the ELBOs are compared, and differences keep float32 accurate at large N
    zero = jnp.zeros(dim, dtype)
    value = jax.vmap(lambda z: potential.full_value_difference(z, zero))

    def elbo(mean: Array, scale: Array) -> Array:
        points = mean + (eps @ scale.T if dense else eps * scale)
        log_det = jnp.sum(jnp.log(jnp.diag(scale) if dense else scale))
        return -jnp.mean(value(points)) + log_det

    scale = _scale(raw, dense)
    identity = jnp.eye(dim, dtype=dtype) if dense else jnp.ones(dim, dtype)
    fitted, laplace = elbo(raw["mean"], scale), elbo(jnp.zeros(dim, dtype), identity)
    finite = (
        jnp.isfinite(fitted) & jnp.all(jnp.isfinite(raw["mean"])) & jnp.all(jnp.isfinite(scale))
    )
    return GaussianFit(raw["mean"], scale, fitted, laplace, finite & (fitted > laplace))


def laplace_check(rng_key: PRNGKey, potential: Estimator, whitening: Any) -> float:
    """:func:`laplace_misfit` of the Gaussian x = c + L ζ of ``whitening`` (a
    :class:`~pplsamplers.estimator.Whitening` or any map with ``to_x``), with the key
    :func:`refine_laplace` derives from ``rng_key`` (so it can be handed to it as ``misfit``)."""
    misfit_key, _ = jax.random.split(rng_key)
    return float(_misfit(potential, misfit_key, whitening))


@partial(jax.jit, static_argnums=0)
def _misfit(potential: Estimator, key: PRNGKey, whitening: Any) -> Array:
    """:func:`laplace_misfit` of the whitened ``potential``, compiled once per estimator: the
    shared warmup's check and :func:`refine_laplace`'s check after a fit run one program."""
    return laplace_misfit(key, whiten(potential, whitening), MISFIT_DRAWS)


def narrowed_check(
    rng_key: PRNGKey, potential: Estimator, whitening: Whitening, narrowed: Any
) -> float | None:
    """The Laplace check along the directions the scale's floor narrowed, each widened to the
    sd its own curvature gives: ``None`` where no such direction curves upward.

    :func:`~pplsamplers.warmup.scale.posterior_scale` floors the curvature at 10⁻⁸ of its
    largest value, which narrows a direction flatter than that.  At a funnel's neck (Neal's
    funnel: v ~ N(0, 3), x_i | v ~ N(0, e^v), joint mode v = −40.5) the curvature is e^40.5
    along x and 1/9 along v, so v's sd shrinks from 3 to 10⁻⁵: Laplace draws never leave the
    neck and :func:`laplace_check` reads them as Gaussian.  Drawn with v's own sd of 3, the
    log-weights spread by tens of nats.  A direction that is merely scaled (a raw covariate
    beside an intercept) stays Gaussian at its own width and passes.

    ``narrowed``: (D, k) unit directions (``posterior_scale``'s ``info["narrowed"]``); their
    curvature comes from one batch of Hessian-vector products at the centre.
    """
    narrowed = np.asarray(narrowed, np.float64)
    if narrowed.size == 0:
        return None
    center, factor = whitening
    directions = jnp.asarray(narrowed.T, center.dtype)
    grad = lambda x: potential.full_value_and_grad(x)[1]  # noqa: E731
    curve = jax.jit(jax.vmap(lambda e: e @ jax.jvp(grad, (center,), (e,))[1]))
    curvature = np.asarray(curve(directions), np.float64)
    upward = [(e, c) for e, c in zip(narrowed.T, curvature, strict=True) if c > 0]
    if not upward:
        return None
    factor = np.asarray(factor, np.float64)
    if factor.ndim == 1:  # diagonal: the directions are coordinates
        wide = factor.copy()
        for e, c in upward:
            j = int(np.argmax(np.abs(e)))
            wide[j] = max(wide[j], c**-0.5)
    else:
        cov = factor @ factor.T
        for e, c in upward:
            cov = cov + max(1.0 / c - e @ cov @ e, 0.0) * np.outer(e, e)
        values, vectors = np.linalg.eigh(0.5 * (cov + cov.T))
        root = vectors * np.sqrt(np.maximum(values, 0.0))[None, :]
        wide = np.linalg.qr(root.T, mode="r").T  # lower triangular, wide wideᵀ = cov
    if not np.all(np.isfinite(wide)):
        return None
    return laplace_check(rng_key, potential, Whitening(center, jnp.asarray(wide, center.dtype)))


def degenerate_mode_note(
    rng_key: PRNGKey, potential: Estimator, whitening: Whitening, info: dict[str, Any]
) -> str | None:
    """What the shared warmup notes as ``degenerate_mode``, or ``None``: a mode where the
    directions the scale's floor narrowed are far from Gaussian at their own width
    (:func:`narrowed_check`), a funnel's neck.

    Parameters
    ----------
    rng_key : jax.Array
        Key of the Laplace draws along the narrowed directions.
    potential : Estimator
        The full-batch potential in model coordinates.
    whitening : Whitening
        The Laplace approximation at the mode.
    info : dict
        The ``info`` of :func:`~pplsamplers.warmup.scale.posterior_scale`: ``num_clipped``,
        ``narrowed``, ``curvature_max`` and ``floor``.

    Returns
    -------
    str or None
        The note, or ``None`` where no direction was narrowed or the Gaussian holds there.
    """
    if not info.get("num_clipped"):
        return None
    wide = narrowed_check(rng_key, potential, whitening, info["narrowed"])
    if wide is None or wide <= MISFIT_THRESHOLD:
        return None
    return (
        f"its curvature spans more than {info['curvature_max'] / info['floor']:.0e}, and "
        f"along the {info['num_clipped']} direction(s) the Gaussian set-up narrowed to "
        f"hold it the posterior is far from Gaussian (Laplace log-weight sd {wide:.3g} > "
        f"{MISFIT_THRESHOLD:g} at their own width)"
    )


def refine_laplace(
    rng_key: PRNGKey,
    potential: Estimator,
    whitening: Whitening,
    exact: Estimator | None = None,
    misfit: float | None = None,
) -> tuple[Array, Array, float, str]:
    """The shared warmup's step: check the Laplace approximation x = c + L ζ of ``whitening``,
    ζ ~ N(0, I), of ``potential`` (model coordinates) and, where it is poor, replace it by the
    Gaussian fit.  Returns ``(center, factor, misfit, note)``: ``factor`` keeps its form ((D,)
    or (D, D) lower triangular), ``misfit`` is the log-weight sd of the Gaussian returned, and
    the note says what was measured and done.  Where the Laplace approximation is kept,
    ``center`` and ``factor`` are ``whitening``'s own arrays (the caller tests identity).

    ``exact``: the same U with cheaper full-data passes for the check (the potential before
    its control variate, whose full pass also evaluates every datum at the anchor); the fit
    uses ``potential``'s (minibatch, control-variate) gradients.  ``misfit``: the check's
    value at ``whitening`` if already computed (:func:`laplace_check`, same key).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> center, factor, misfit, note = refine_laplace(
    ...     jax.random.key(0), tiny_estimator(2), Whitening(jnp.zeros(2), jnp.ones(2)))
    >>> note.startswith("Laplace approximation checked")  # a Gaussian: nothing to fit
    True
    """
    misfit_key, fit_key = jax.random.split(rng_key)
    checked = potential if exact is None else exact
    misfit_at = lambda center, factor: _misfit(checked, misfit_key, Whitening(center, factor))
    center, factor = whitening

    if misfit is None:
        misfit = float(misfit_at(center, factor))
    if misfit <= MISFIT_THRESHOLD:
        note = f"Laplace approximation checked (log-weight sd {misfit:.2g} <= 1)"
        return center, factor, misfit, note
    dense = factor.ndim == 2
    whitened = whiten(potential, Whitening(center, factor))
    fit = jax.jit(lambda key: fit_gaussian(key, whitened, dense=dense))(fit_key)
    if not bool(fit.improved):
        return (
            center,
            factor,
            misfit,
            (
                f"Laplace approximation poor (log-weight sd {misfit:.3g} > {MISFIT_THRESHOLD:g}); a "
                "Gaussian variational fit did not improve on it and was not used"
            ),
        )
    if dense:
        center, factor = center + factor @ fit.mean, factor @ fit.scale
    else:
        center, factor = center + factor * fit.mean, factor * fit.scale
    after = float(misfit_at(center, factor))
    kind = "full-rank" if dense else "diagonal"
    return (
        center,
        factor,
        after,
        (
            f"Laplace approximation poor (log-weight sd {misfit:.3g} > {MISFIT_THRESHOLD:g}): "
            f"replaced by a {kind} Gaussian variational fit (ELBO +"
            f"{float(fit.elbo - fit.laplace_elbo):.3g} nats; log-weight sd {after:.3g}); the "
            "chains start in it"
        ),
    )


__all__ = [
    "FIT_STEPS",
    "GaussianFit",
    "MISFIT_THRESHOLD",
    "degenerate_mode_note",
    "fit_gaussian",
    "laplace_check",
    "laplace_misfit",
    "narrowed_check",
    "refine_laplace",
]
