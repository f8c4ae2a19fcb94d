"""NumPyro adapter for the Boomerang sampler (:mod:`pplsamplers.kernels.boomerang`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.infer.base import InitFn, StepFn
from pplsamplers.infer.bps import (
    PDMPAdaptState,
    _PDMPAdapter,
    adapt_tuning,
    init_adapt,
)
from pplsamplers.kernels import boomerang as boomerang_kernel
from pplsamplers.kernels.boomerang_reference import (
    GaussianReference,
    build_reference,
    gaussian_reference,
)
from pplsamplers.pdmp.interpolation import PDMPTuning
from pplsamplers.potential import SubsampledPotential, find_map
from pplsamplers.types import Array, PRNGKey

_STARTS = ("reference", "map", "model")


class Boomerang(_PDMPAdapter):
    """The Boomerang sampler with adaptive interpolation thinning, as a NumPyro kernel.

    Goan et al. §2.3 / Bierkens et al. (2020) with the errata of DESIGN §5: elliptical flow
    around x*, velocities N(0, Σ*) refreshed at rate λ_ref, rate [v·∇E]_+ and reflection in
    the Σ* metric with ∇E = ∇Ũ − Σ*⁻¹(x − x*); event times by Alg. 2.

    The reference N(x*, Σ*) is built automatically (``reference="auto"``): x* is the MAP
    (:func:`~pplsamplers.potential.find_map`, or the control-variate anchor when
    ``control_variate=True``, which is that same MAP) and Σ* = γ diag(curvature at x*)⁻¹ with
    ``curvature="hessian"`` (exact diagonal, D Hessian-vector products) or ``"fisher"``
    (summed squared per-example gradients plus the prior's curvature).  ``reference=(mean,
    covariance)`` gives it instead: a vector of variances, or a full covariance matrix (used
    through its Cholesky factor).  A covariance that is not positive definite raises
    ``ValueError``.  The reference is available as ``kernel.reference`` after ``init``, with
    the one-time cost of building it in ``kernel.setup_seconds`` and
    ``kernel.setup_data_evals`` (a lower bound: MAP search, curvature and control-variate
    anchor passes; L-BFGS line searches may evaluate more).

    Gradients: full batch without ``subsample_size`` (exact up to bound violations),
    minibatch with ``subsample_size=n`` (the paper's approximate scheme), control variates
    anchored at x* with ``control_variate=True`` too (far less noise near x*).

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    reference
        ``"auto"`` or ``(mean, covariance)`` in the flat unconstrained space.
    curvature
        ``"hessian"`` or ``"fisher"`` for the automatic diagonal Σ* (Goan et al.), or
        ``"full_hessian"`` for the dense inverse Hessian of the original Boomerang
        (Bierkens et al. 2020; D² memory).
    gamma
        γ > 0, the paper's scale of Σ* (eq. 5).
    refresh_rate
        λ_ref ≥ 0 (time is in radians of the flow; one turn is 2π).
    alpha
        α ≥ 1 of eq. (12).
    sample_interval
        Δ > 0; ``None`` adapts it during warmup to ``target_evals_per_sample``.
    target_evals_per_sample
        Rate evaluations one sample should cost (warmup target for Δ).
    t_init, max_extrapolation
        Envelope start offset and horizon cap, in radians.  The horizon cap matters more than
        α: a long extrapolation can step over an event (no proposal, no violation counted).
    max_evaluations, max_events_per_sample, min_gap, noise_margin
        As in :class:`~pplsamplers.infer.bps.BPS`.
    start
        ``"reference"`` (default): chains start at draws of N(x*, Σ*); ``"map"``: at x*;
        ``"model"``: NumPyro's ``init_strategy``.  ``init_params`` always wins.
    map_seed
        Seed of the MAP search.
    **kwargs
        ``subsample_size``, ``control_variate``, ``data_plate``, ``potential``,
        ``init_strategy``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> mcmc = MCMC(Boomerang(model, subsample_size=20, control_variate=True),
    ...             num_warmup=50, num_samples=100, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> mcmc.get_samples()["mu"].shape
    (100,)
    """

    def __init__(
        self,
        model: Callable | None = None,
        *,
        reference: str | tuple[Array, Array] = "auto",
        curvature: str = "hessian",
        gamma: float = 1.0,
        refresh_rate: float = 1.0,
        alpha: float = 1.5,
        sample_interval: float | None = None,
        target_evals_per_sample: float = 20.0,
        t_init: float = 0.25,
        max_extrapolation: float = 0.5,
        max_evaluations: int = 1000,
        max_events_per_sample: int = 10_000,
        min_gap: float | None = None,
        noise_margin: float | None = None,
        start: str = "reference",
        map_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        self._store_pdmp_options(
            refresh_rate=refresh_rate,
            alpha=alpha,
            sample_interval=sample_interval,
            target_evals_per_sample=target_evals_per_sample,
            t_init=t_init,
            max_extrapolation=max_extrapolation,
            max_evaluations=max_evaluations,
            max_events_per_sample=max_events_per_sample,
            min_gap=min_gap,
            noise_margin=noise_margin,
        )
        if t_init is None or max_extrapolation is None:
            raise ValueError(
                "t_init and max_extrapolation must be given for the Boomerang "
                "(finite positive times in radians of its flow)."
            )
        if curvature not in ("hessian", "fisher", "full_hessian"):
            raise ValueError(
                f"curvature must be 'hessian', 'fisher' or 'full_hessian'; got {curvature!r}."
            )
        if (
            isinstance(gamma, bool)
            or not isinstance(gamma, int | float)
            or not (np.isfinite(gamma) and gamma > 0)
        ):
            raise ValueError(f"gamma must be a finite positive number; got {gamma!r}.")
        if start not in _STARTS:
            raise ValueError(f"start must be one of {_STARTS}; got {start!r}.")
        if isinstance(reference, str):
            if reference != "auto":
                raise ValueError(
                    f"reference must be 'auto' or (mean, covariance); got {reference!r}."
                )
            self._user_reference = None
        else:
            try:
                mean, covariance = reference
            except (TypeError, ValueError):
                raise ValueError("reference must be 'auto' or a pair (mean, covariance).") from None
            gaussian_reference(mean, covariance)  # validates now, before any compilation
            self._user_reference = (mean, covariance)
        super().__init__(model, **kwargs)
        self.curvature = curvature
        self.gamma = float(gamma)
        self.start = start
        self.map_seed = int(map_seed)
        self.reference: GaussianReference | None = None
        self.setup_seconds = 0.0
        self.setup_data_evals = 0
        self._pre_cv_potential: SubsampledPotential | None = None

    def _apply_control_variate(self, potential: SubsampledPotential) -> SubsampledPotential:
        # the "fisher" curvature needs the per-example gradients of the plain potential
        self._pre_cv_potential = potential
        started = time.perf_counter()
        out = super()._apply_control_variate(potential)
        self._cv_seconds = time.perf_counter() - started if out is not potential else 0.0
        return out

    def _make_reference(self, potential: SubsampledPotential) -> GaussianReference:
        started = time.perf_counter()
        evals = 0
        if self._user_reference is not None:
            reference = gaussian_reference(*self._user_reference, dim=potential.dim)
        else:
            plain = self._pre_cv_potential or potential
            mean = potential.anchor
            if mean is None:
                mean = find_map(jax.random.PRNGKey(self.map_seed), plain).position
                evals += 500 * plain.n + 50 * plain.N  # find_map defaults (lower bound)
            reference = build_reference(
                jax.random.PRNGKey(self.map_seed),
                plain,
                curvature=self.curvature,
                gamma=self.gamma,
                mean=mean,
            )
            evals += plain.N if self.curvature == "fisher" else plain.dim * plain.N
        if potential.anchor is not None:
            evals += potential.N + (
                500 * potential.n + 50 * potential.N
                if not isinstance(self._control_variate, jax.Array | np.ndarray)
                else 0
            )
        self.setup_seconds = time.perf_counter() - started + getattr(self, "_cv_seconds", 0.0)
        self.setup_data_evals = int(evals)
        return reference

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        reference = self._make_reference(potential)
        self.reference = reference
        if self.start == "map":
            self._start_position = reference.mean
        elif self.start == "reference":
            self._start_position = lambda key: reference.mean + reference.draw(key)
        else:
            self._start_position = None
        kernel = boomerang_kernel.build_kernel(
            potential,
            reference,
            refresh_rate=self.refresh_rate,
            alpha=self.alpha,
            max_evaluations=self.max_evaluations,
            max_events_per_sample=self.max_events_per_sample,
            **self._noise_handling(potential),
        )
        tuning0 = (self.sample_interval or 1.0, self.t_init, self.max_extrapolation)
        adapt_kwargs = dict(
            target_evals=self.target_evals_per_sample, adapt_interval=self.sample_interval is None
        )

        def init(rng_key: PRNGKey, position: Array):
            state = boomerang_kernel.init(rng_key, position, reference)
            dtype = state.position.dtype
            tuning = PDMPTuning(*(jnp.asarray(t, dtype) for t in tuning0))
            return state._replace(tuning=tuning), init_adapt(state.position)

        def step(
            rng_key: PRNGKey,
            state: boomerang_kernel.BoomerangState,
            adapt: PDMPAdaptState,
            iteration: Array,
        ):
            new_state, info = kernel(rng_key, state)
            tuning, new_adapt = adapt_tuning(new_state.tuning, adapt, info, **adapt_kwargs)
            warm = iteration < num_warmup
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(warm, a, b), new, old)
            return (
                new_state._replace(tuning=keep(tuning, new_state.tuning)),
                keep(new_adapt, adapt),
                info,
            )

        return init, step


__all__ = ["Boomerang"]
