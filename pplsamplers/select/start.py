"""Where AutoSampler's NUTS starts: at the best of several mode searches.

NumPyro's NUTS starts each chain at a random init-strategy point and follows the gradient
into the basin that holds it.  On a mixture that basin is often an optimum with an empty
component or two merged ones, tens of posterior sds from the mass, and the chain stays there
(two NUTS chains on a 2000-point mixture ended 7 sds off while five L-BFGS searches from
random starts all found the right optimum).  The shared warmup's mode search
(:func:`~pplsamplers.warmup.modes.search_mode`) runs from several starts and keeps the best;
AutoSampler starts every NUTS chain there (``init_to_value``), and NUTS's warmup moves the
chains apart from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from numpyro.infer import init_to_value

from pplsamplers.model import ModelView, centred_sites, make_potential
from pplsamplers.warmup.modes import search_mode
from pplsamplers.warmup.options import SEED, SetupOptions
from pplsamplers.warmup.setup import mode_stage


def nuts_start(view: ModelView) -> Callable | None:
    """NUTS's ``init_strategy``: the best mode of several searches, or ``None`` (NUTS's own
    start) where the search did not converge, the mode is a funnel's neck (:func:`in_a_neck`)
    or the model's potential cannot be built.

    Parameters
    ----------
    view : the model with its arguments (:func:`~pplsamplers.model.inspect`).

    Examples
    --------
    >>> from pplsamplers.datasets import tiny_mixture
    >>> from pplsamplers.model import inspect
    >>> mixture, (y,) = tiny_mixture()  # three components, the assignments enumerated
    >>> nuts_start(inspect(mixture, (y,))) is not None
    True
    """
    try:
        potential = make_potential(view)
        search = search_mode(
            jax.random.PRNGKey(SEED),
            potential.estimator,
            potential.init_position,
            potential.draw_init,
        )
    except (ValueError, RuntimeError):  # e.g. no valid start: NUTS reports it its own way
        return None
    if not bool(search.result.converged) or in_a_neck(potential.estimator, search.result.position):
        return None
    return init_to_value(values=potential.constrain(search.result.position))


NECK_CURVATURE = 1e12
"""Curvature of U (nats per unconstrained unit²) along a random direction above which a mode
is a funnel's neck (a posterior sd below 10⁻⁶ there), not a place to start NUTS."""


def in_a_neck(estimator: Any, mode: Any, directions: int = 4) -> bool:
    """Whether U's curvature at ``mode`` along any of a few random unit directions exceeds
    :data:`NECK_CURVATURE`.  A funnel's joint mode lies deep in its neck (Neal's funnel:
    v = −40.5 where the mass is at v = 0 ± 3), and NUTS started there adapts its step to the
    neck's width and never leaves; NUTS's own random start does not have that problem."""
    grad = lambda x: estimator.full_value_and_grad(x)[1]  # noqa: E731
    keys = jax.random.split(jax.random.PRNGKey(SEED + 8), directions)
    for key in keys:
        e = jax.random.normal(key, mode.shape, mode.dtype)
        e = e / jnp.linalg.norm(e)
        curvature = float(e @ jax.jvp(grad, (mode,), (e,))[1])
        if not curvature < NECK_CURVATURE:  # NaN included
            return True
    return False


def recentred_for_nuts(view: Any, options: SetupOptions) -> Any:
    """``view``, or the view of the model the shared warmup re-centres
    (:mod:`~pplsamplers.warmup.centring`): a model written with centred loc-scale sites whose
    Gaussian is poor, such as Neal's funnel, is a funnel for NUTS too (its step adapts to the
    neck or the mouth, not both), and NUTS runs it in the chosen coordinates instead; the
    output keeps the user's sites as deterministic ones.

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from pplsamplers.model import inspect
    >>> def funnel():
    ...     v = numpyro.sample("v", dist.Normal(0.0, 3.0))
    ...     numpyro.sample("x", dist.Normal(jnp.zeros(9), jnp.exp(v / 2)))
    >>> recentred = recentred_for_nuts(inspect(funnel), SetupOptions(funnel, needs_mode=True))
    >>> recentred.latent_names
    ('v', 'x_decentered')
    """
    if not isinstance(view, ModelView) or not options.centring:
        return view
    try:
        potential = make_potential(view)
        values = potential.constrain(potential.init_position)
        if not centred_sites(view.model, view.model_args, view.model_kwargs, values):
            return view
        stage = mode_stage(options, view.model_args, view.model_kwargs)
    except (ValueError, RuntimeError):  # NUTS reports such a model its own way
        return view
    moved = "sampled as" in stage.notes.get("centring", "") and stage.view is not None
    return stage.view if moved else view


def with_nuts_start(options: dict[str, Any], view: Any) -> dict[str, Any]:
    """NUTS's ``options`` with :func:`nuts_start`'s ``init_strategy``, unless the user gave one,
    NUTS runs inside ``DiscreteHMCGibbs`` or ``view`` is not a :class:`ModelView` (a model
    refused before it was inspected)."""
    if not isinstance(view, ModelView) or {"init_strategy", "discrete"} & set(options):
        return options
    return {**options, "init_strategy": nuts_start(view)}  # None: NUTS's own


__all__ = ["NECK_CURVATURE", "in_a_neck", "nuts_start", "recentred_for_nuts", "with_nuts_start"]
