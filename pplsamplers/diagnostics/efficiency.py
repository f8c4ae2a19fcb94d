"""Efficiency and accuracy metrics used everywhere, on top of ArviZ.

* ESS (bulk/tail) and R-hat come from ArviZ; this module only aggregates them.
* One *epoch* is N per-datum likelihood evaluations; ``data_evals`` in ``sample_stats``
  counts them per draw.
* Accuracy against a reference: ``|mean − mean_ref| / sd_ref`` and ``sd / sd_ref − 1`` per
  coordinate, reported by their maximum.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import arviz as az
import numpy as np


def min_ess(idata: Any, method: str = "bulk", var_names: list[str] | None = None) -> float:
    """Smallest ArviZ ESS over every coordinate of the posterior (``method`` = bulk/tail).

    ``idata``: anything ``az.ess`` reads, an ArviZ DataTree or a dict of ``(chain, draw, ...)``
    arrays such as ``mcmc.get_samples(group_by_chain=True)``.

    Parameters
    ----------
    idata : DataTree or dict
        The draws, as above.
    method : str, default "bulk"
        ``az.ess``'s method, such as ``"bulk"`` or ``"tail"``.
    var_names : list of str or None, default None
        The variables to include (``None``: all).

    Returns
    -------
    float
        The smallest ESS over every coordinate of the included variables.

    Examples
    --------
    >>> import numpy as np
    >>> draws = {"mu": np.random.default_rng(0).normal(size=(2, 500))}  # independent draws
    >>> round(min_ess(draws)), round(min_ess(draws, method="tail"))
    (999, 972)
    """
    ess = az.ess(idata, method=method, var_names=var_names)
    return float(min(np.min(np.asarray(ess[name])) for name in ess.data_vars))


def epochs(idata: Any, num_data: int, thinning: int = 1) -> float:
    """Epochs spent on the kept draws: Σ data_evals · thinning / N (all chains).

    For NUTS (no ``data_evals``, but ``n_steps`` from ``extra_fields=("num_steps",)``) every
    leapfrog step is one full-data gradient: Σ n_steps · thinning epochs.
    """
    stats = idata.sample_stats
    if "data_evals" in stats:
        evals = float(np.asarray(stats["data_evals"]).sum())
    elif "n_steps" in stats:
        evals = float(np.asarray(stats["n_steps"]).sum()) * num_data
    else:
        raise ValueError(
            "epochs need `data_evals` (pplsamplers kernels) or `n_steps` (NUTS run "
            "with extra_fields=('num_steps',)) in sample_stats."
        )
    return evals * thinning / num_data


def ess_per_epoch(idata: Any, num_data: int, thinning: int = 1) -> float:
    """min bulk ESS per epoch of data touched.

    Parameters
    ----------
    idata : DataTree
        An ArviZ DataTree of the run, whose ``sample_stats`` hold ``data_evals`` (pplsamplers
        kernels) or ``n_steps`` (NUTS run with ``extra_fields=("num_steps",)``).
    num_data : int
        N, the number of data: one epoch is N datum evaluations.
    thinning : int, default 1
        The run's thinning: each kept draw stands for ``thinning`` iterations' evaluations.

    Returns
    -------
    float
        :func:`min_ess` (bulk) divided by the epochs spent on the kept draws (all chains).

    Examples
    --------
    Two chains of 500 independent draws, each costing 10 datum evaluations of N = 100 data:
    1000 draws over 100 epochs, about 10 effective draws per epoch.

    >>> import arviz as az
    >>> import numpy as np
    >>> idata = az.from_dict({
    ...     "posterior": {"mu": np.random.default_rng(0).normal(size=(2, 500))},
    ...     "sample_stats": {"data_evals": np.full((2, 500), 10)},
    ... })
    >>> round(ess_per_epoch(idata, num_data=100), 1)
    10.0
    """
    return min_ess(idata) / max(epochs(idata, num_data, thinning), 1e-300)


class Accuracy(NamedTuple):
    """Worst-coordinate accuracy against a reference posterior."""

    max_mean_error: float
    """max_j |mean_j − mean_ref_j| / sd_ref_j."""
    max_sd_error: float
    """max_j |sd_j / sd_ref_j − 1|."""


def accuracy(
    draws: Mapping[str, np.ndarray] | np.ndarray,
    reference: Mapping[str, Mapping[str, np.ndarray]] | tuple[np.ndarray, np.ndarray],
) -> Accuracy:
    """Compare draws with a reference ``{site: {"mean", "sd"}}`` (or ``(mean, sd)`` arrays).

    ``draws`` are ``{site: array (..., *site_shape)}`` with every leading axis a sample axis
    matching the reference's site shape, or one flat ``(samples, D)`` array.

    Parameters
    ----------
    draws : Mapping of str to numpy.ndarray, or numpy.ndarray
        The draws, as above.
    reference : Mapping of str to Mapping, or tuple of numpy.ndarray
        ``{site: {"mean": array, "sd": array}}`` per site of ``draws``, or a ``(mean, sd)``
        pair of ``(D,)`` arrays for flat draws.

    Returns
    -------
    Accuracy
        The largest standardised mean error and relative sd error over all coordinates.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> acc = accuracy(rng.normal(1.0, 2.0, (20000, 2)), (np.ones(2), 2 * np.ones(2)))
    >>> acc.max_mean_error < 0.05 and acc.max_sd_error < 0.05
    True
    """
    if isinstance(reference, tuple):
        reference = {"x": {"mean": reference[0], "sd": reference[1]}}
        draws = {"x": np.asarray(draws)}
    mean_errors, sd_errors = [], []
    for site, ref in reference.items():
        ref_mean, ref_sd = np.asarray(ref["mean"]), np.asarray(ref["sd"])
        values = np.asarray(draws[site])
        values = values.reshape((-1,) + ref_mean.shape)
        mean_errors.append(np.max(np.abs(values.mean(0) - ref_mean) / ref_sd))
        sd_errors.append(np.max(np.abs(values.std(0) / ref_sd - 1.0)))
    return Accuracy(float(max(mean_errors)), float(max(sd_errors)))


__all__ = ["Accuracy", "accuracy", "epochs", "ess_per_epoch", "min_ess"]
