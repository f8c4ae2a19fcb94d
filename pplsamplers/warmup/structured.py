"""The shared warmup for a model with group effects: a Gaussian approximation with an arrowhead
precision, centred in the posterior's mass.

:func:`structured_fit` finds the groups (:func:`~pplsamplers.warmup.structure.find_blocks`),
centres the approximation at the globals' Laplace-marginal mode with the group effects at
their conditional mode (:func:`~pplsamplers.warmup.laplace.nested_laplace`), checks that the
groups do not couple, and returns

* the whitening x = c + L z with the block-triangular L of
  :class:`~pplsamplers.estimator.blocks.BlockWhitening` (O(D (p + k)) memory and work);
* the full-data likelihood's arrowhead Hessian at c, for the second-order control variate
  (:func:`~pplsamplers.estimator.with_control_variate`), whose noise stays small on groups
  that a minibatch misses;
* the curvature of U along each whitened coordinate at c, which the kernels' step sizes and
  references read instead of D Hessian-vector products.

Every step costs a few data passes per iteration whatever the number of groups.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax

from pplsamplers.estimator import Estimator, Potential
from pplsamplers.estimator.blocks import (
    BlockHessian,
    Blocks,
    BlockWhitening,
    block_hessian,
    block_whitening,
    num_floored,
    whitened_curvature_diagonal,
)
from pplsamplers.types import Array, PRNGKey
from pplsamplers.warmup.laplace import REL_FLOOR, nested_laplace
from pplsamplers.warmup.structure import coupling_check, find_blocks

STRUCTURED_NOISE_TARGET = 1.0
"""The automatic batch size's noise target for a structured model, in posterior sds on the
noisiest coordinate.  With the second-order control variate the noise concentrates on the
few groups whose effects the data barely inform (their posterior is their prior scale, and
the likelihood's third-order terms over it survive the expansion): most coordinates are
far below it.  Measured on ``models/mixed_glm.py`` at N = 10⁵ with 10³ groups, every kernel
is as accurate at n = N/100 (noise up to about 2 sd on two coordinates, a median of 0.03)
as at the full batch (``benchmarks/hierarchical.py``)."""


class StructuredFit(NamedTuple):
    """Result of :func:`structured_fit`.

    Attributes
    ----------
    blocks
        The global and group coordinates.
    whitening
        x = c + L z: N(c, H⁻¹) with the globals' precision from the Laplace marginal.
    likelihood_hessian
        ∇²Σ_i ℓ_i at c (arrowhead), for the second-order control variate.
    curvature
        diag(Lᵀ ∇²U(c) L): U's curvature along each whitened coordinate.
    prior_hessian
        The Hessian of the prior and Jacobian terms at c (arrowhead): with
        ``likelihood_hessian``, how much each group effect learns from its data.
    converged
        Whether the nested Laplace search converged.
    notes
        ``{"structure": …, "mode": …, "precondition": …}`` for the set-up's notes.
    """

    blocks: Blocks
    whitening: BlockWhitening
    likelihood_hessian: BlockHessian
    curvature: Array
    prior_hessian: BlockHessian
    converged: bool
    notes: dict[str, str]

    @property
    def center(self) -> Array:
        return self.whitening.center


@partial(jax.jit, static_argnums=(0, 2))
def _prior_hessian(estimator: Estimator, x: Array, blocks: Blocks) -> BlockHessian:
    """The arrowhead Hessian of the prior and Jacobian terms alone (no data pass)."""
    return block_hessian(estimator.global_grad, x, blocks)


def structured_fit(
    potential: Potential, start: Array, rng_key: PRNGKey
) -> tuple[StructuredFit | None, str]:
    """The structured Gaussian approximation (module docstring) from ``start`` (the joint
    mode search's end point) or the model's initial point, whichever has the lower Laplace
    marginal, or ``None`` and why the model does not qualify.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from pplsamplers.model import make_potential
    >>> def glmm(x, group, y, num_groups=100):  # a logistic regression with random intercepts
    ...     alpha = numpyro.sample("alpha", dist.Normal(0, 10))
    ...     beta = numpyro.sample("beta", dist.Normal(0, 10))
    ...     tau = numpyro.sample("tau", dist.HalfNormal(1))
    ...     z = numpyro.sample("z", dist.Normal(0, 1).expand([num_groups]).to_event(1))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         eta = alpha + beta * x[idx] + tau * z[group[idx]]
    ...         numpyro.sample("y", dist.Bernoulli(logits=eta), obs=y[idx])
    >>> group, x = jnp.repeat(jnp.arange(100), 40), jax.random.normal(jax.random.key(0), (4000,))
    >>> y = jax.random.bernoulli(jax.random.key(1), jax.nn.sigmoid(x + group % 3 - 1)) * 1.0
    >>> potential = make_potential(glmm, (x, group, y))
    >>> fit, why = structured_fit(potential, potential.init_position, jax.random.key(0))
    >>> fit.blocks.num_groups, fit.converged, fit.curvature.shape  # 100 groups, 3 globals
    (100, True, (103,))
    """
    find_key, check_key = jax.random.split(rng_key)
    blocks, found = find_blocks(potential, start, find_key)
    if blocks is None:
        return None, found
    estimator = potential.estimator
    fit = nested_laplace(estimator, blocks, (start, potential.init_position))
    if fit is None:
        return None, "the groups' Laplace marginal is not finite at the mode or the start"
    couples = coupling_check(potential, fit.center, fit.hessian, check_key)
    if couples is not None:
        return None, couples
    prior = _prior_hessian(estimator, fit.center, blocks)
    likelihood = fit.hessian - prior
    whitening = block_whitening(fit.center, fit.hessian, fit.global_precision, REL_FLOOR)
    floored = int(num_floored(fit.hessian.A, REL_FLOOR)) + int(
        num_floored(fit.global_precision, REL_FLOOR)
    )
    decrement, inner = fit.decrement
    state = "converged" if fit.converged else "NOT converged"
    notes = {
        "structure": found,
        "mode": (
            f"nested Laplace {state}: the globals' marginal mode to {decrement:.2g} sd after "
            f"{fit.iterations} iterations, the group effects' conditional mode to {inner:.2g} sd"
        ),
        "precondition": (
            "arrowhead Gaussian at the nested Laplace centre (the globals' marginal precision, "
            "the groups given the globals from the Hessian)"
            + (f"; {floored} eigenvalues floored" if floored else "")
        ),
    }
    curvature = whitened_curvature_diagonal(whitening, fit.hessian)
    return StructuredFit(
        blocks, whitening, likelihood, curvature, prior, fit.converged, notes
    ), found


__all__ = ["STRUCTURED_NOISE_TARGET", "StructuredFit", "structured_fit"]
