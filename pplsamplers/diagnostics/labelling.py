"""R-hat and ESS of an unordered mixture, judged on what its labelling does not change.

The posterior of a mixture whose components are not ordered has K! symmetric copies
(:mod:`pplsamplers.model._components`).  Two chains in two copies, or one chain that moves
between them, are right, yet R-hat and the bulk ESS of ``mu[0]`` say they are not: they
compare values that mean another component in each copy.  :class:`Labelling` orders the
components in every draw by one labelled site (the first on the real line, by its first
element per component) and permutes every labelled site alike.  Any function of the ordered
draws is invariant under relabelling, so its R-hat and ESS judge convergence to the
posterior itself: a chain that misses (another mode, a wrong scale) still differs from the
others after ordering, and still fails.  The Stein identities hold draw by draw and need no
ordering; the run's draws themselves are not changed.

Examples
--------
Two chains in the two labellings of a two-component mixture pass once ordered:

>>> import numpy as np
>>> from numpyro.distributions.transforms import IdentityTransform
>>> from pplsamplers.model import LabelledSite
>>> mu = LabelledSite("mu", axis=0, size=2, transform=IdentityTransform(), real=True)
>>> rng = np.random.default_rng(0)
>>> chain = np.array([-2.0, 2.0]) + 0.1 * rng.normal(size=(2, 500, 2))
>>> draws = np.stack([chain[0], chain[1][:, ::-1]])       # chain 1 in the other labelling
>>> ordered = Labelling((mu,), {"mu": (2,)})(draws)
>>> bool(np.all(np.diff(ordered, axis=-1) > 0)), np.allclose(np.sort(draws, -1), ordered)
(True, True)
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np


class Labelling(NamedTuple):
    """Orders the components of every draw (call it on ``(..., D)`` flat draws).

    Attributes
    ----------
    sites : the labelled sites (:class:`~pplsamplers.model.LabelledSite`).
    shapes : every latent site's shape in the flat draws, whose coordinates are the sites
        in sorted name order (``ravel_pytree``'s), C order within a site.
    constrained : the draws are the constrained values (else the unconstrained ones, mapped
        through each labelled site's transform and back).
    """

    sites: tuple[Any, ...]
    shapes: dict[str, tuple[int, ...]]
    constrained: bool = False

    def __call__(self, draws: np.ndarray) -> np.ndarray:
        draws = np.asarray(draws, dtype=float)
        lead, out = draws.shape[:-1], draws.copy()
        where, start = {}, 0
        for name in sorted(self.shapes):
            size = math.prod(self.shapes[name])
            where[name], start = slice(start, start + size), start + size
        if start != draws.shape[-1]:
            raise ValueError(
                f"the sites' shapes give {start} coordinates; draws have {draws.shape}"
            )
        for size in sorted({site.size for site in self.sites}):
            group = [site for site in self.sites if site.size == size]
            values = {site.name: self._components(draws, where, site) for site in group}
            pivot = next((site for site in group if site.real), group[0])
            key = values[pivot.name].reshape(lead + (-1, size))[..., 0, :]
            order = np.argsort(key, axis=-1, kind="stable")
            moved = np.any(order != np.arange(size), axis=-1)[..., None]  # keep exact values
            for site in group:
                y = values[site.name]
                index = order.reshape(lead + (1,) * (y.ndim - len(lead) - 1) + (size,))
                y = np.moveaxis(np.take_along_axis(y, index, axis=-1), -1, len(lead) + site.axis)
                x = y if self.constrained else np.asarray(site.transform.inv(jnp.asarray(y)))
                x = x.reshape(lead + (-1,))
                out[..., where[site.name]] = np.where(moved, x, draws[..., where[site.name]])
        return out

    def _components(self, draws: np.ndarray, where: dict, site: Any) -> np.ndarray:
        """The site's constrained values with its component axis last: ``(..., rest, K)``."""
        x = draws[..., where[site.name]].reshape(draws.shape[:-1] + tuple(self.shapes[site.name]))
        y = x if self.constrained else np.asarray(site.transform(jnp.asarray(x)), dtype=float)
        return np.moveaxis(y, draws.ndim - 1 + site.axis, -1)


def labelling_of(kernel: Any) -> Labelling | None:
    """The :class:`Labelling` of the model a kernel was set up for (a pplsamplers kernel's
    ``setup.view``, or the ``labelling`` a :class:`~pplsamplers.infer.checked_nuts.CheckedNUTS`
    found at init), in its flat unconstrained coordinates; ``None`` where nothing is labelled."""
    view = getattr(getattr(kernel, "setup", None), "view", None)
    if view is None:
        return getattr(kernel, "labelling", None)
    sites = view.info.labelled
    return Labelling(sites, view.unconstrained_shapes) if sites else None


def view_labels(info: Any) -> tuple[tuple, tuple, tuple]:
    """``(enumerated, ordered_sites, labelled)`` of a model's ``SiteInfo``: the arguments of
    :func:`~pplsamplers.diagnostics.fixes.model_hints`."""
    return info.enumerated, info.ordered_sites, info.labelled


__all__ = ["Labelling", "labelling_of", "view_labels"]
