"""The control variate's anchor (step 3 of the shared warmup): the user's choice, or, for
``"auto"``, the mode where the mode probe finds one mode; where the variational fit of step 4
replaced the Laplace Gaussian, the fit's mean for ``"auto"``, and a second-order control
variate at whichever anchor."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from pplsamplers.estimator import Estimator, likelihood_hessian, with_control_variate
from pplsamplers.types import Array
from pplsamplers.warmup.mode import MAX_DENSE_DIM
from pplsamplers.warmup.modes import count_modes
from pplsamplers.warmup.options import SEED


def choose_control_variate(
    choice: Any,
    estimator: Estimator,
    mode: Array | None,
    factor: Array,
    notes: dict,
    minibatch: bool,
    *,
    subset: Estimator | None = None,
) -> tuple[Array | None, int | None]:
    """(anchor in x or ``None``, mode count or ``None``); the mode probe decides ``"auto"``,
    from Laplace draws around ``mode`` in the posterior scale ``factor``, on ``subset`` (the
    mode search's, :func:`~pplsamplers.warmup.modes.count_modes`) where given."""
    if choice is False or choice is None:
        notes["control_variate"] = "off (control_variate=False)"
        return None, None
    if choice is True:
        notes["control_variate"] = "on: anchored at the mode"
        return mode, None
    if not isinstance(choice, str):
        anchor = jnp.asarray(choice)
        if anchor.shape != (estimator.dim,):
            raise ValueError(
                f"control_variate anchor must have shape ({estimator.dim},); got {anchor.shape}."
            )
        notes["control_variate"] = "on: anchored at the given point"
        return anchor, None
    if not minibatch:
        notes["control_variate"] = "off: full batch (exact gradients)"
        return None, None
    modes = count_modes(jax.random.PRNGKey(SEED + 1), estimator, mode, scale=factor, subset=subset)
    if modes > 1:
        notes["control_variate"] = (
            f"off: the mode probe found {modes} separated modes, and one anchor is valid near "
            "one mode only"
        )
        return None, modes
    notes["control_variate"] = "on: the mode probe found one mode; anchored at it"
    return mode, modes


def anchor_in_fit(
    base: Estimator, anchor: Array, center: Array, choice: Any, notes: dict
) -> tuple[Array, Estimator]:
    """(anchor, ``base`` with its control variate) where the set-up's variational fit replaced
    the Laplace Gaussian (step 4 of :func:`~pplsamplers.warmup.setup`).

    The chains start and stay in the fit, not at the joint mode, so with ``"auto"`` the
    anchor moves to the fit's mean (an anchor the user gave stays).  The chains range farther
    from the anchor than Laplace draws would, where a first-order expansion leaves each datum's
    term a large remainder, so the control variate is second order, with the likelihood's
    dense Hessian at the anchor (up to ``MAX_DENSE_DIM`` latents, D Hessian-vector products
    once; a model with group effects has its own arrowhead one).  Called only below the full
    batch."""
    if isinstance(choice, str):
        anchor = center
        notes["control_variate"] = (
            "on: anchored at the variational fit's mean (the mode probe found one mode; "
            "the joint mode is far from the posterior's mass)"
        )
    hessian = None
    if base.dim <= MAX_DENSE_DIM:
        hessian = likelihood_hessian(base, anchor)
        notes["control_variate"] += "; second order (the likelihood's Hessian at the anchor)"
    return anchor, with_control_variate(base, anchor, hessian)


__all__ = ["anchor_in_fit", "choose_control_variate"]
