"""Observed sites whose support depends on latent values (``y ~ Uniform(0, θ)``).

Such a likelihood has a hard edge: p(y_i | θ) = 0 for every θ that puts a datum outside the
support.  Two NumPyro facts make the edge invisible by default (probed on NumPyro 0.22):

* ``log_prob`` masks out-of-support values to ``-inf`` only with ``validate_args=True``
  (``numpyro.distributions.util.validate_sample``); otherwise ``Uniform(0, θ).log_prob`` is
  ``-log θ`` for every value, and even NUTS drifts to θ → 0;
* a minibatch sees n of the N rows, so a step that leaves the support of an unseen row looks
  finite.  Only a full-data pass sees the edge, and the Laplace approximation at a mode on
  the edge is meaningless.

So :func:`edge_sites` finds these sites once at set-up, :func:`support_mask` makes the
potential ``+inf`` outside the support whatever ``validate_args`` says, and
:func:`with_support_checks` does the same for NumPyro's NUTS.  The minibatch kernels refuse
such models with an error that names the site; AutoSampler picks NUTS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpyro
from numpyro import handlers
from numpyro.distributions import constraints

from pplsamplers.types import Array


def _constraint_leaves(constraint: Any) -> list[Any]:
    """Every array-like attribute of a constraint, nested constraints included."""
    leaves, stack = [], [constraint]
    while stack:
        current = stack.pop()
        for value in vars(current).values():
            if isinstance(value, constraints.Constraint):
                stack.append(value)
            else:
                leaves.extend(jax.tree.leaves(value))
    return leaves


def depends_on_values(constraint: Any) -> bool:
    """Whether ``constraint``, read from a staged trace, has a bound computed in the trace (a
    tracer), such as ``Uniform(0, θ)``'s upper bound ``θ``."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in _constraint_leaves(constraint))


def edge_sites(
    model: Callable, model_args: tuple, model_kwargs: dict, latent_values: dict[str, Array]
) -> tuple[str, ...]:
    """Names of the observed sites whose support changes with the latent values.

    The model is traced abstractly (``jax.eval_shape``) with the latent sites substituted by
    tracers; a support bound that is a tracer depends on them.  A model that cannot be
    traced abstractly (Python control flow on a latent value) reports none.
    """
    found: list[str] = []

    def probe(values: dict[str, Array]) -> Array:
        trace = handlers.trace(handlers.substitute(model, data=values)).get_trace(
            *model_args, **model_kwargs
        )
        for name, site in trace.items():
            if site["type"] == "sample" and site["is_observed"]:
                if depends_on_values(site["fn"].support):
                    found.append(name)
        return jnp.zeros(())

    try:
        jax.eval_shape(probe, latent_values)
    except Exception:  # noqa: BLE001 - an untraceable model is reported as having no edge
        return ()
    return tuple(dict.fromkeys(found))


def is_real(support: Any) -> bool:
    """True for an unconstrained support (real, possibly with event dimensions)."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return isinstance(support, type(constraints.real))


def is_ordered(support: Any) -> bool:
    """Whether a latent lives on an ordered vector (a mixture whose labels cannot switch)."""
    return support in (constraints.ordered_vector, constraints.positive_ordered_vector)


def support_mask(site: dict, log_prob: Array) -> Array:
    """``log_prob`` with ``-inf`` where the site's value lies outside its support."""
    inside = jnp.asarray(site["fn"].support(site["value"]))
    extra = inside.ndim - jnp.ndim(log_prob)
    if extra > 0:
        inside = jnp.all(inside.reshape(inside.shape[: inside.ndim - extra] + (-1,)), -1)
    return jnp.where(inside, log_prob, -jnp.inf)


def with_support_checks(model: Callable, sites: tuple[str, ...]) -> Callable:
    """``model`` plus a ``numpyro.factor`` that is ``-inf`` when an observed value of one of
    ``sites`` leaves its support (for NumPyro's NUTS, which does not check by default)."""
    if not sites:
        return model

    def checked(*args: Any, **kwargs: Any) -> Any:
        with handlers.trace() as trace:
            result = model(*args, **kwargs)
        for name in sites:
            site = trace[name]
            inside = jnp.all(site["fn"].support(site["value"]))
            numpyro.factor(f"_{name}_in_support", jnp.where(inside, 0.0, -jnp.inf))
        return result

    return checked


def edge_error(sites: tuple[str, ...], sampler: str) -> ValueError:
    """The refusal of a minibatch kernel, naming the sites and the fix."""
    names = ", ".join(f"'{name}'" for name in sites)
    return ValueError(
        f"observed site(s) {names} have a support that depends on the latent values (as "
        "y ~ Uniform(0, theta)): the posterior has a hard edge at the data, which a minibatch "
        f"of the rows cannot see and a Laplace warmup cannot scale, so {sampler} would end "
        "in a zero-density region. Use AutoSampler (it picks full-data NUTS and checks the "
        "support), or NumPyro's NUTS with validate_args=True and an init value inside the "
        "support."
    )


__all__ = [
    "edge_error",
    "edge_sites",
    "is_ordered",
    "is_real",
    "support_mask",
    "with_support_checks",
]
