"""Centred or non-centred group effects, chosen for each group from its data.

A group effect written centred, ``theta ~ Normal(mu, tau)`` in a plate over the groups, is a
good coordinate for a group whose data say more about θ_g than its prior does: its posterior
is then narrow and nearly independent of (μ, τ).  For a group with few rows it is a bad one:
θ_g follows τ, and together they form a funnel that no linear preconditioner removes.  The
non-centred coordinate z_g = (θ_g − μ) / τ has the opposite properties.

For a normal group effect with data precision d_g and prior precision p_g = 1 / τ², the
partially non-centred coordinate θ̃_g = θ_g − (1 − c_g) μ with

    c_g = d_g / (d_g + p_g)                                              (1)

makes θ̃_g conditionally independent of μ a posteriori (Papaspiliopoulos, Roberts & Sköld
2003, section 3); Gorinova, Moore & Hoffman (2020) use the same weight for the scale, which is
NumPyro's :class:`~numpyro.infer.reparam.LocScaleReparam` at ``centered=c``.
:func:`choose_centring` reads d_g and p_g off the structured fit's arrowhead Hessians at its
centre (the likelihood's and the prior's diagonal blocks), so a group with many rows is
sampled nearly centred and a group with one row nearly non-centred, without any extra pass
over the data.  A model written non-centred (``z ~ Normal(0, 1)``, θ = μ + τ z in the
likelihood) has no centred site and is kept as written: its scale is not visible to the
trace.

The model's own coordinates are kept where the arrowhead Gaussian already fits them (the
Laplace check's log-weight sd at most ``MISFIT_THRESHOLD``): with a likelihood quadratic in
the group effects, as a Gaussian one written centred is, the second-order control variate is
exact and the minibatch gradient has no noise at all, which any reparameterisation would
give up.  Elsewhere :func:`recentre` runs the set-up's mode stage again in the chosen
coordinates and keeps whichever fits the Gaussian better.

A model without group effects gets the same treatment for its centred sites where its Gaussian
is poor: a funnel's ``x ~ Normal(0, exp(v / 2))`` or a shrinkage prior's
``b ~ Normal(0, tau * lam)``, where the local scale plays the group's part.  There d and p are
the diagonals of the likelihood's and the prior's Hessians on those sites' coordinates, from
Hessian-vector products at the mode (at most ``MAX_DENSE`` coordinates).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from types import MappingProxyType
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.estimator import Estimator, Potential
from pplsamplers.model import ModelView, centred_sites, prior_precisions, reparameterised
from pplsamplers.types import Array
from pplsamplers.warmup.options import SetupOptions
from pplsamplers.warmup.stage import ModeStage
from pplsamplers.warmup.structure import site_coordinates
from pplsamplers.warmup.structured import StructuredFit
from pplsamplers.warmup.variational import MISFIT_THRESHOLD

KEEP_CENTRED = 0.9
"""A site whose every group has c ≥ this (1) is kept as written."""
MAX_DENSE = 1000
"""Coordinates of centred sites beyond which a model without group effects is kept as written
(each costs one Hessian-vector product with the data)."""


class Centring(NamedTuple):
    """Result of :func:`choose_centring`.

    Attributes
    ----------
    model
        The model with its centred group effects reparameterised, or ``None`` where every
        group is best sampled as written.
    centredness
        ``{site: c}``, c of the site's shape by (1), for each centred group effect.
    note
        What was chosen, for the set-up's notes.
    """

    model: Callable | None
    centredness: dict[str, np.ndarray]
    note: str


def _diagonal(fit: StructuredFit, dim: int, which: str) -> np.ndarray:
    """The group blocks' diagonal of the likelihood's or the prior's Hessian, over x."""
    hessian = fit.likelihood_hessian if which == "likelihood" else fit.prior_hessian
    values = np.zeros(dim)
    diagonal = np.diagonal(np.asarray(hessian.A), axis1=-2, axis2=-1)
    values[np.asarray(fit.blocks.groups).reshape(-1)] = diagonal.reshape(-1)
    return values


@partial(jax.jit, static_argnums=0)
def _hessian_diagonal(estimator: Estimator, x: Array, coordinates: Array) -> Array:
    """∇²U's diagonal at ``x`` on ``coordinates``: one Hessian-vector product each, 16 at a
    time (a full data pass each: memory bounded whatever the number of coordinates)."""
    grad = lambda y: estimator.full_value_and_grad(y)[1]

    def entry(j: Array) -> Array:
        basis = jax.nn.one_hot(j, x.shape[0], dtype=x.dtype)
        return jax.jvp(grad, (x,), (basis,))[1][j]

    return jax.lax.map(entry, coordinates, batch_size=16)


def _dense_diagonals(
    view: ModelView, potential: Potential, x: Array, sites: dict, coordinates: dict
) -> tuple:
    """(everything but the site's own prior, the site's own prior) Hessian diagonals over x,
    on the centred sites' coordinates (a model without a data plate has all of U in one
    datum, so the prior is read from each site's distribution, not from U's split)."""
    flat = np.concatenate([coordinates[name].reshape(-1) for name in sites])
    total = np.asarray(_hessian_diagonal(potential.estimator, x, jnp.asarray(flat)))
    own = prior_precisions(
        view.model, view.model_args, view.model_kwargs, potential.constrain(x), sites
    )
    data, prior = np.zeros(potential.dim), np.zeros(potential.dim)
    for name in sites:
        prior[coordinates[name].reshape(-1)] = np.asarray(own[name], float).reshape(-1)
    data[flat] = total - prior[flat]
    return data, prior


def centredness(data: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Equation (1), elementwise: d / (d + p) with negative curvatures taken as 0, and 1 (as
    written) where neither informs the element.

    Examples
    --------
    >>> centredness(np.array([100.0, 1.0, 0.0, 0.0]), np.array([1.0, 1.0, 4.0, 0.0])).round(2)
    array([0.99, 0.5 , 0.  , 1.  ])
    """
    data, prior = np.maximum(data, 0.0), np.maximum(prior, 0.0)
    total = data + prior
    return np.where(total > 0, data / np.where(total > 0, total, 1.0), 1.0)


def _describe(name: str, c: np.ndarray) -> str:
    centred, non = int(np.sum(c >= KEEP_CENTRED)), int(np.sum(c <= 1 - KEEP_CENTRED))
    return (
        f"'{name}' sampled as '{name}_decentered' (LocScaleReparam, c = d / (d + p) per "
        f"element: {centred} centred (c ≥ {KEEP_CENTRED:g}), {non} non-centred "
        f"(c ≤ {1 - KEEP_CENTRED:.1g}), {c.size - centred - non} in between)"
    )


def choose_centring(
    view: ModelView, potential: Potential, fit: StructuredFit | Array
) -> Centring | None:
    """Each centred group effect's c by (1), and the model reparameterised by it where some
    group is better sampled otherwise; ``None`` where no group effect is written centred.

    ``fit``: the structured fit of a model with group effects, or, for any other model, the
    point (the mode) where every centred site's c is read from Hessian-vector products.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from pplsamplers.model import inspect, make_potential
    >>> from pplsamplers.warmup.structured import structured_fit
    >>> def model(group, y):  # 20 groups, centred; group g has 2 ** (g % 6) rows
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     tau = numpyro.sample("tau", dist.HalfNormal(1))
    ...     with numpyro.plate("groups", 20):
    ...         theta = numpyro.sample("theta", dist.Normal(mu, tau))
    ...     with numpyro.plate("data", y.shape[0]):
    ...         numpyro.sample("y", dist.Normal(theta[group], 1.0), obs=y)
    >>> group = jnp.concatenate([jnp.full(2 ** (g % 6), g) for g in range(20)])
    >>> y = jax.random.normal(jax.random.key(0), group.shape) + group % 3
    >>> view = inspect(model, (group, y), {})
    >>> potential = make_potential(view)
    >>> fit, _ = structured_fit(potential, potential.init_position, jax.random.key(0))
    >>> centring = choose_centring(view, potential, fit)
    >>> centring.note.startswith("'theta' sampled as 'theta_decentered'")
    True
    >>> c = centring.centredness["theta"]  # 1 row: about 1/2; 32 rows: nearly centred
    >>> bool(c[0] < 0.6 < 0.9 < c[5])
    True
    """
    structured = isinstance(fit, StructuredFit)
    center = fit.center if structured else fit
    values = potential.constrain(center)
    sites = centred_sites(view.model, view.model_args, view.model_kwargs, values)
    if not sites:
        return None
    coordinates = site_coordinates(potential)
    in_groups = np.zeros(potential.dim, bool)
    if structured:
        in_groups[np.asarray(fit.blocks.groups).reshape(-1)] = True
        data = _diagonal(fit, potential.dim, "likelihood")
        prior = _diagonal(fit, potential.dim, "prior")
    elif sum(coordinates[name].size for name in sites) > MAX_DENSE:
        return None
    else:
        for name in sites:
            in_groups[coordinates[name].reshape(-1)] = True
        data, prior = _dense_diagonals(view, potential, center, sites, coordinates)
    dtype = center.dtype
    chosen, found, notes = {}, {}, []
    for name, shape in sites.items():
        flat = coordinates[name]
        if not in_groups[flat].all():  # not a group effect (or not one the fit found)
            continue
        found[name] = c = centredness(data[flat], prior[flat])
        if np.all(c >= KEEP_CENTRED):
            notes.append(f"'{name}' kept centred: every group's data outweigh its prior")
            continue
        chosen[name] = (jnp.asarray(c, dtype), shape)
        notes.append(_describe(name, c))
    if not found:
        return None
    model = reparameterised(view.model, chosen) if chosen else None
    return Centring(model, found, "; ".join(notes))


def recentre(
    stage: ModeStage, options: SetupOptions, rerun: Callable[[SetupOptions], ModeStage]
) -> ModeStage:
    """``stage`` (the mode stage of the model as written), or the stage that ``rerun``
    computes for the model reparameterised by :func:`choose_centring` where the model's own
    coordinates fit the Gaussian poorly and the chosen ones fit it better; the ``centring``
    note says which, with both Laplace log-weight sds."""
    written = stage.laplace_misfit
    if not options.centring or stage.view is None or written is None:
        return stage
    degenerate = "degenerate_mode" in stage.notes
    if stage.structure is None and written <= MISFIT_THRESHOLD and not degenerate:
        return stage  # the Gaussian fits; no Hessian-vector products spent
    point = stage.structure if stage.structure is not None else stage.whitening.center
    centring = choose_centring(stage.view, stage.potential, point)
    if centring is None:
        return stage
    note, chosen = centring.note, stage
    if centring.model is not None and written <= MISFIT_THRESHOLD and not degenerate:
        note = f"kept as written: the Gaussian fits its coordinates (log-weight sd {written:.2g})"
    elif centring.model is not None:
        other = rerun(replace(options, model=centring.model, centring=False))
        misfit = float("inf") if other.laplace_misfit is None else other.laplace_misfit
        worse = ("degenerate_mode" in other.notes, misfit) >= (degenerate, written)
        chosen = stage if worse else other
        note += f"; Laplace log-weight sd {misfit:.2g}, {written:.2g} as written" + (
            "" if chosen is other else ": kept as written"
        )
    return chosen._replace(notes=MappingProxyType({**chosen.notes, "centring": note}))


__all__ = ["KEEP_CENTRED", "MAX_DENSE", "Centring", "centredness", "choose_centring", "recentre"]
