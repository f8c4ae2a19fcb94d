"""Group effects written centred, and NumPyro's ``LocScaleReparam`` to sample them otherwise.

A latent site drawn from a location-scale family on the real line whose location or scale is
computed from other latents, ``theta ~ Normal(mu, tau)``, is a *centred* group effect.  It
can be sampled in partly non-centred coordinates θ̃ with θ = μ + τ^(1−c) (θ̃ − c μ) and
θ̃ ~ Normal(c μ, τ^c): c = 1 is the model as written, c = 0 the non-centred θ = μ + τ z.
NumPyro's :class:`~numpyro.infer.reparam.LocScaleReparam` implements the family, element by
element when c is an array; :func:`reparameterised` applies it, and the reparameterised
model records θ as a deterministic site, so the output keeps the user's names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.infer.reparam import LocScaleReparam

from pplsamplers.model._support import is_real
from pplsamplers.types import Array

LOC_SCALE_FAMILIES: Mapping[type, tuple[str, ...]] = MappingProxyType(
    {dist.Normal: (), dist.Laplace: (), dist.Cauchy: (), dist.Logistic: (), dist.StudentT: ("df",)}
)
"""The families whose constructor takes ``loc`` and ``scale`` (and these shape parameters),
as :class:`~numpyro.infer.reparam.LocScaleReparam` needs."""


def _base(fn: Any) -> Any:
    """The distribution under ``.expand(...)`` and ``.to_event(...)``."""
    while isinstance(fn, dist.ExpandedDistribution | dist.Independent):
        fn = fn.base_dist
    return fn


def centred_sites(
    model: Callable, model_args: tuple, model_kwargs: dict, latent_values: dict[str, Array]
) -> dict[str, tuple[str, ...]]:
    """``{name: shape parameters}`` of the latent sites written centred (module docstring).

    The model is traced abstractly (``jax.eval_shape``) with the latent values as tracers: a
    location or scale that is a tracer is computed from the latents.  A model that cannot be
    traced so reports none.

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 5))
    ...     tau = numpyro.sample("tau", dist.HalfNormal(1))
    ...     z = numpyro.sample("z", dist.Normal(0, 1).expand([3]).to_event(1))  # non-centred
    ...     with numpyro.plate("groups", 3):
    ...         theta = numpyro.sample("theta", dist.Normal(mu, tau))  # centred
    ...     numpyro.sample("y", dist.Normal(theta + z, 1).to_event(1), obs=y)
    >>> values = {"mu": 0.0, "tau": 1.0, "z": jnp.zeros(3), "theta": jnp.zeros(3)}
    >>> centred_sites(model, (jnp.zeros(3),), {}, values)
    {'theta': ()}
    """
    found: dict[str, tuple[str, ...]] = {}

    def probe(values: dict[str, Array]) -> Array:
        trace = handlers.trace(handlers.substitute(model, data=values)).get_trace(
            *model_args, **model_kwargs
        )
        for name, site in trace.items():
            if site["type"] != "sample" or site["is_observed"] or name not in values:
                continue
            if name.endswith("_decentered"):  # LocScaleReparam's own site: loc 0, scale 1
                continue
            base = _base(site["fn"])
            family = LOC_SCALE_FAMILIES.get(type(base))
            if family is None or not is_real(site["fn"].support):
                continue
            if any(isinstance(v, jax.core.Tracer) for v in (base.loc, base.scale)):
                found[name] = family
        return jnp.zeros(())

    try:
        jax.eval_shape(probe, latent_values)
    except Exception:  # noqa: BLE001 - an untraceable model keeps its parameterisation
        return {}
    return found


def prior_precisions(
    model: Callable, model_args: tuple, model_kwargs: dict, values: dict[str, Array], names: Any
) -> dict[str, Array]:
    """``{name: −∂² log p(value | loc, scale) / ∂value²}``, elementwise, of the sites ``names``
    found by :func:`centred_sites`, at the latent ``values``: each site's own prior precision
    (1 / scale² for a normal), whatever else reads the site."""
    seeded = handlers.seed(model, 0)  # a plate that subsamples draws its indices
    trace = handlers.trace(handlers.substitute(seeded, data=values)).get_trace(
        *model_args, **model_kwargs
    )
    found = {}
    for name in names:
        site = trace[name]
        base, value = _base(site["fn"]), jnp.asarray(site["value"])
        shape = LOC_SCALE_FAMILIES[type(base)]
        params = [base.loc, base.scale] + [getattr(base, key) for key in shape]
        params = [jnp.broadcast_to(p, value.shape).reshape(-1) for p in params]

        def log_density(t: Array, loc: Array, scale: Array, *extra: Array, family=type(base),
                        keys=shape) -> Array:  # fmt: skip
            return family(loc=loc, scale=scale, **dict(zip(keys, extra, strict=True))).log_prob(t)

        second = jax.vmap(jax.grad(jax.grad(log_density)))(value.reshape(-1), *params)
        found[name] = -second.reshape(value.shape)
    return found


def reparameterised(
    model: Callable, centredness: dict[str, tuple[Array, tuple[str, ...]]]
) -> Callable:
    """``model`` with each named site sampled as ``{name}_decentered`` at centredness c (an
    array of the site's shape; 1 keeps an element as written, 0 makes it non-centred)."""
    config = {
        name: LocScaleReparam(centered=c, shape_params=shape)
        for name, (c, shape) in centredness.items()
    }
    return handlers.reparam(model, config=config)


__all__ = ["LOC_SCALE_FAMILIES", "centred_sites", "prior_precisions", "reparameterised"]
