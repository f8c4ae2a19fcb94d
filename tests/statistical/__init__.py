"""MCSE-scaled statistical tests, and the non-Gaussian target that several of them share."""

import jax.numpy as jnp

QUARTIC_SECOND_MOMENT = 0.675978
"""E[x²] under exp(−x⁴/4): 4^(1/2) Γ(3/4) / Γ(1/4) (scipy.integrate.quad gives the same)."""


def quartic_potential(dim: int = 2):
    """U = Σ x⁴/4 with exact gradients (one datum, full batch): a rate that is cubic along
    every line, which a linear envelope or band extrapolates below the truth.  A
    :class:`~pplsamplers.estimator.Potential` (kernels take its ``.estimator``)."""
    from pplsamplers.estimator import build_potential

    terms = lambda x, idx: (jnp.sum(x**4) / 4.0, jnp.zeros(idx.shape[0]))
    return build_potential(terms, dim=dim, N=1, n=1, init_position=jnp.zeros(dim))
