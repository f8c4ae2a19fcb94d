"""Readable names of the flat unconstrained coordinates of a potential."""

from __future__ import annotations

import jax
import numpy as np

from pplsamplers.estimator import Potential


def site_names(shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """Names like ``"w[3]"`` of the flattened sites ``{site: shape}``, in ravel_pytree order
    (sorted site names, C order within a site)."""
    names = []
    for site in sorted(shapes):
        shape = tuple(shapes[site])
        names += (
            [site] if not shape else [f"{site}[{','.join(map(str, i))}]" for i in np.ndindex(shape)]
        )
    return names


def site_shapes(potential: Potential) -> dict[str, tuple[int, ...]]:
    """``{site: shape}`` of the position ``potential.unravel`` gives (no work is done)."""
    out = jax.eval_shape(potential.unravel, potential.init_position)
    return {site: tuple(leaf.shape) for site, leaf in out.items()}


def coordinate_names(potential: Potential) -> list[str]:
    """Names like ``"w[3]"`` for the D flat coordinates (ravel order of ``unravel``)."""
    try:
        names = site_names(site_shapes(potential))
        if len(names) == potential.dim:
            return names
    except Exception:  # noqa: BLE001 - any unusual unravel falls back to x[j]
        pass
    return [f"x[{j}]" for j in range(potential.dim)]


__all__ = ["coordinate_names", "site_names", "site_shapes"]
