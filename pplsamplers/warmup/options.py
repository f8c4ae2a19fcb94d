"""The set-up options every sampler takes, validated once at construction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from numpyro.infer import init_to_uniform

from pplsamplers.estimator import Potential
from pplsamplers.types import Array

PRECONDITIONERS = ("auto", "dense", "diag")
SHARED_OPTIONS = (
    "subsample_size",
    "data_plate",
    "control_variate",
    "precondition",
    "init_strategy",
)
"""The options of :class:`SetupOptions` that a model's sampler takes (all but ``model`` and
``potential``): AutoSampler passes the user's to its features and to the chosen kernel."""

SEED = 0
"""The set-up is deterministic: its keys derive from this seed, not from the run's key."""


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class SetupOptions:
    """What the shared warmup (:func:`~pplsamplers.warmup.setup`) is asked to do, validated
    once, at a sampler's construction.

    Parameters
    ----------
    model : callable or None
        A NumPyro model (or ``None`` when ``potential`` is given).
    subsample_size : int or None, default None
        Minibatch size n; ``None``: the model plate's own, else automatic.
    data_plate : str or None, default None
        Name of the data plate when it cannot be found automatically.
    potential : Potential or None, default None
        A ready :class:`~pplsamplers.estimator.Potential` instead of a model.
    control_variate : bool, "auto" or array_like, default "auto"
        ``"auto"``, ``True``, ``False`` or an anchor (flat unconstrained array).
    precondition : {"auto", "dense", "diag"}, array_like or None, default "auto"
        ``"auto"``, ``"dense"``, ``"diag"``, ``None``, or a covariance matrix or variance
        vector over the flat unconstrained coordinates.
    init_strategy : callable or None, default init_to_uniform
        NumPyro init strategy of the model's traces and starting points.
    needs_mode : bool, default False
        The kernel reads the mode (its automatic step or reference): search for it even where
        neither the preconditioner nor the control variate needs it.
    centring : bool, default True
        With an estimated preconditioner, sample each location-scale site written centred (a
        group effect ``theta ~ Normal(mu, tau)``, a funnel's ``x ~ Normal(0, exp(v / 2))``)
        centred or non-centred by its data where the model as written leaves the Gaussian
        poor (:mod:`~pplsamplers.warmup.centring`); ``False`` keeps the model as written.

    Examples
    --------
    Construction checks the options without tracing the model:

    >>> from pplsamplers.datasets.tiny import normal_mean
    >>> SetupOptions(normal_mean, subsample_size=10).subsample_size
    10
    >>> SetupOptions(normal_mean, subsample_size=0)
    Traceback (most recent call last):
    ...
    ValueError: subsample_size must be a positive integer; got 0.
    """

    model: Callable | None
    subsample_size: int | None = None
    data_plate: str | None = None
    potential: Potential | None = None
    control_variate: bool | str | Array = "auto"
    precondition: str | Array | None = "auto"
    init_strategy: Callable | None = init_to_uniform
    needs_mode: bool = False
    centring: bool = True

    def __post_init__(self) -> None:
        if self.model is None and self.potential is None:
            raise ValueError("give a NumPyro `model` or a ready `potential`.")
        if self.subsample_size is not None and not _is_positive_int(self.subsample_size):
            raise ValueError(
                f"subsample_size must be a positive integer; got {self.subsample_size!r}."
            )
        choice = self.control_variate
        if isinstance(choice, str) and choice != "auto":
            raise ValueError(
                f"control_variate must be 'auto', True, False or an anchor array; got {choice!r}."
            )
        precondition = self.precondition
        if isinstance(precondition, str) and precondition not in PRECONDITIONERS:
            raise ValueError(
                f"precondition must be one of {PRECONDITIONERS}, None, or a covariance matrix "
                f"or variance vector; got {precondition!r}."
            )
        if precondition is not None and not isinstance(precondition, str):
            matrix = np.asarray(precondition, dtype=float)
            if matrix.ndim not in (1, 2) or not np.all(np.isfinite(matrix)):
                raise ValueError(
                    "precondition must be a finite (D,) variance vector or (D, D) covariance "
                    f"matrix; got shape {matrix.shape}."
                )


def user_factor(precondition: Any, dim: int, dtype: Any) -> Array:
    """L with L Lᵀ = the user's covariance (``(D, D)``) or variances (``(D,)``)."""
    matrix = jnp.asarray(precondition, dtype)
    if matrix.shape not in ((dim,), (dim, dim)):
        raise ValueError(
            f"precondition has shape {matrix.shape}; the model has {dim} unconstrained "
            f"dimensions, so give ({dim},) variances or a ({dim}, {dim}) covariance."
        )
    if matrix.ndim == 1:
        if not bool(jnp.all(matrix > 0)):
            raise ValueError("precondition variances must be positive.")
        return jnp.sqrt(matrix)
    factor = jnp.linalg.cholesky(0.5 * (matrix + matrix.T))
    if not bool(jnp.all(jnp.isfinite(factor))):
        raise ValueError("precondition covariance must be symmetric positive definite.")
    return factor


__all__ = ["SEED", "PRECONDITIONERS", "SHARED_OPTIONS", "SetupOptions", "user_factor"]
