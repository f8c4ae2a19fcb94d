"""The control variate's anchor (step 3 of the shared warmup): the user's choice, or, for
``"auto"``, the mode where the mode probe finds one mode."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from pplsamplers.estimator import Estimator
from pplsamplers.types import Array
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


__all__ = ["choose_control_variate"]
