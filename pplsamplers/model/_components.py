"""The per-component latents of a mixture, whose labels the posterior cannot tell apart.

A model that enumerates an assignment zᵢ ∈ {0, …, K−1} and reads component parameters
``mu[z]``, ``w`` (a K-simplex) has a posterior invariant under every permutation of the K
components applied to all of them at once: K! copies of each mode.  A chain may sit in one
copy (the minibatch kernels, which start every chain in the set-up's Gaussian) or move
between them (NUTS on overlapping components), and two right chains in two copies look
unconverged to R-hat.  :func:`labelled_sites` finds the sites such a permutation acts on;
:mod:`pplsamplers.diagnostics.labelling` orders the components in every draw before R-hat
and ESS, so that those judge quantities the labelling does not change.

A latent on an ordered vector (``OrderedTransform``, as NumPyro's examples order mixture
means) already picks one copy, and then no site is labelled.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from pplsamplers.model._enumerate import discrete_sites, is_enumerated
from pplsamplers.model._support import is_ordered, is_real


class LabelledSite(NamedTuple):
    """A continuous latent with one value per mixture component along ``axis`` of its
    constrained value; ``transform`` maps its unconstrained value to the constrained one."""

    name: str
    axis: int
    size: int
    transform: Any
    real: bool  # an unconstrained support: the preferred site to order the components by


def support_size(support: Any) -> int:
    """K for a categorical support {0, …, K−1}, 0 for any other.  A Bernoulli's {0, 1} is
    not counted: a flag's two states (a structural zero, a regime) mean different things, so
    no permutation of them is a symmetry of the posterior.

    >>> import numpyro.distributions as dist, jax.numpy as jnp
    >>> categorical = dist.Categorical(jnp.ones(3) / 3)
    >>> support_size(categorical.support), support_size(dist.Bernoulli(0.5).support)
    (3, 0)
    """
    if isinstance(support, constraints.integer_interval) and np.all(support.lower_bound == 0):
        return int(np.max(support.upper_bound)) + 1
    return 0


def labelled_sites(trace: dict) -> tuple[LabelledSite, ...]:
    """The continuous latent sites of ``trace`` (a NumPyro trace) with exactly one axis of
    the size K ≥ 2 of a categorical site marked for enumeration (:func:`support_size`), in
    name order; none where a latent lies on an ordered vector, or where nothing is
    enumerated."""
    discrete = discrete_sites(trace)
    enumerated = [s for s in discrete.values() if is_enumerated(s)]
    sizes = sorted({support_size(s["fn"].support) for s in enumerated} - {0, 1})
    latent = [
        s
        for name, s in trace.items()
        if s["type"] == "sample" and not s["is_observed"] and name not in discrete
    ]
    if not sizes or any(is_ordered(s["fn"].support) for s in latent):
        return ()
    found = []
    for site in sorted(latent, key=lambda s: s["name"]):
        shape, support = np.shape(site["value"]), site["fn"].support
        for size in sizes:
            axes = [axis for axis, length in enumerate(shape) if length == size]
            if len(axes) == 1:
                transform = biject_to(support)
                found.append(LabelledSite(site["name"], axes[0], size, transform, is_real(support)))
                break
    return tuple(found)


__all__ = ["LabelledSite", "labelled_sites", "support_size"]
