"""Cheap model features that drive sampler selection.

Structural features come from one trace of the model.  Probe features come from a short MAP
fit and a handful of full-data evaluations and minibatch gradients at the MAP: a few dozen
epochs at most, whatever the chain length.  Given the shared warmup's mode stage
(:func:`~pplsamplers.warmup.mode_stage`), the probes read its mode, dense curvature, mode
probe and Laplace check instead of computing their own."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pplsamplers.estimator import Estimator, Potential, gradient_noise_variance, with_batch_size
from pplsamplers.model import (
    FullDataOnlyError,
    LocalLatentError,
    ModelView,
    discrete_latent_sites,
    inspect,
    largest_plate,
    make_potential,
    no_dimension_error,
)
from pplsamplers.select.model_features import ModelFeatures
from pplsamplers.types import Array, PRNGKey
from pplsamplers.warmup import ModeStage, find_map
from pplsamplers.warmup.modes import count_modes

PROBE_STEPS = (-3.0, -2.0, -1.0, 1.0, 2.0, 3.0)
ROUNDING_CAP = 0.25
"""The largest rounding noise of a probe's rise (nats) discounted from the quadratic misfit
(float32 sums of 10⁵–10⁶ per-datum terms read a few hundredths to a tenth): twice it is at
most 11 % of the rise at three sds, so a misfit that grows along a direction still shows."""


def _hessian_diagonal(hvp: Callable[[Array], Array], dim: int, key: PRNGKey, dtype) -> Array:
    if dim <= 256:  # exact: one HVP per unit vector
        return lax.map(lambda e: hvp(e) @ e, jnp.eye(dim, dtype=dtype))
    probes = jax.random.rademacher(key, (64, dim), dtype)  # Hutchinson's estimator
    return jnp.mean(lax.map(lambda z: z * hvp(z), probes), axis=0)


def _power_iteration(matvec: Callable[[Array], Array], v0: Array, steps: int = 40) -> Array:
    """Rayleigh quotient of ``matvec`` after ``steps`` power iterations from unit ``v0``."""
    tiny = jnp.finfo(v0.dtype).tiny  # 1e-300 would underflow to 0 in float32
    normalise = lambda w: w / jnp.maximum(jnp.linalg.norm(w), tiny)
    v = lax.fori_loop(0, steps, lambda _, w: normalise(matvec(w)), v0)
    return v @ matvec(v)


def _extreme_eigenvalues(matvec: Callable[[Array], Array], dim: int, key: PRNGKey, dtype):
    v0 = jax.random.normal(key, (dim,), dtype)
    v0 = v0 / jnp.linalg.norm(v0)
    largest = _power_iteration(matvec, v0)
    smallest = largest - _power_iteration(lambda v: largest * v - matvec(v), v0)
    return largest, smallest


def probe_features(
    rng_key: PRNGKey,
    potential: Potential,
    estimator: Estimator,
    *,
    stage: ModeStage | None = None,
) -> dict[str, float | Array]:
    """The probe features of :class:`ModelFeatures` (one jit-compiled probe) of ``estimator``
    (``potential``'s at the features' batch size).

    With the shared warmup's mode ``stage`` (:func:`~pplsamplers.warmup.mode_stage`), its
    mode and mode-probe count are used instead of a MAP fit and a second mode probe, and its
    dense curvature (where D ≤ 1000) instead of Hessian-vector products: the curvature
    features are then exact eigenvalues rather than power iterations."""
    map_key, probe_key, mode_key = jax.random.split(rng_key, 3)
    if stage is not None and stage.mode is not None:
        x_map = stage.mode
    else:
        x_map = find_map(map_key, estimator, potential.init_position).position
    dense = stage is not None and stage.mode is not None and stage.whitening.dense
    factor = stage.whitening.factor if dense else None  # L Lᵀ = H⁻¹ (floored)
    values = _probe_arrays(probe_key, estimator, x_map, factor)
    vectors = ("curvature_diagonal", "gradient_noise_sd")
    out = {name: float(value) for name, value in values.items() if name not in vectors}
    out.update({name: values[name] for name in vectors})
    out["map_position"] = x_map
    if stage is not None and stage.laplace_misfit is not None:
        out["laplace_weight_sd"] = stage.laplace_misfit
    if stage is not None and stage.structure is not None and stage.structure.converged:
        out["group_structure"] = stage.notes["structure"]
    if stage is not None and stage.mode_count is not None:
        out["mode_count"] = stage.mode_count
    else:
        out["mode_count"] = count_modes(
            mode_key, estimator, x_map, values["curvature_diagonal"], draw_init=potential.draw_init
        )
    return out


def _curvature_probes(hessian: Array) -> tuple[Array, Array, Array]:
    """(diag H, condition number of the correlation matrix, λ_max) of a dense Hessian."""
    diag = jnp.abs(jnp.diagonal(hessian))
    inv_sqrt = 1.0 / jnp.sqrt(jnp.maximum(diag, jnp.finfo(hessian.dtype).tiny))
    eigenvalues = jnp.linalg.eigvalsh(inv_sqrt[:, None] * hessian * inv_sqrt[None, :])
    largest, smallest = eigenvalues[-1], eigenvalues[0]
    condition = jnp.where(smallest > 1e-9 * largest, largest / smallest, 1e9)
    return diag, condition, jnp.linalg.eigvalsh(hessian)[-1]


@partial(jax.jit, static_argnums=1)
def _probe_arrays(
    key: PRNGKey, potential: Estimator, x_map: Array, factor: Array | None = None
) -> dict[str, Array]:
    diag_key, eig_key, noise_key, dir_key = jax.random.split(key, 4)
    dtype = x_map.dtype
    grad = lambda x: potential.full_value_and_grad(x)[1]
    hvp = lambda v: jax.jvp(grad, (x_map,), (v,))[1]
    if factor is not None:  # the shared warmup's dense curvature, H = L⁻ᵀ L⁻¹: no data pass
        eye = jnp.eye(factor.shape[0], dtype=factor.dtype)
        inverse = jax.scipy.linalg.solve_triangular(factor, eye, lower=True)
        hessian = inverse.T @ inverse
        diag, correlation_condition, top_curvature = _curvature_probes(hessian)
        hvp = lambda v: hessian @ v
    else:
        diag = jnp.abs(_hessian_diagonal(hvp, potential.dim, diag_key, dtype))
    tiny = jnp.finfo(dtype).tiny
    diag = jnp.maximum(diag, 1e-12 * jnp.max(diag) + tiny)
    inv_sqrt = 1.0 / jnp.sqrt(diag)
    if factor is None:
        largest, smallest = _extreme_eigenvalues(
            lambda v: inv_sqrt * hvp(inv_sqrt * v), potential.dim, eig_key, dtype
        )
        correlation_condition = jnp.where(smallest > 1e-9 * largest, largest / smallest, 1e9)
        start = jax.random.normal(eig_key, (potential.dim,), dtype)
        top_curvature = _power_iteration(hvp, start / jnp.linalg.norm(start))

    if potential.full_batch:
        noise_ratio = kurtosis = jnp.zeros((), dtype)
        noise = jnp.zeros(potential.dim, dtype)
    else:
        keys = jax.random.split(noise_key, 4)
        noise = jnp.mean(jax.vmap(lambda k: gradient_noise_variance(k, potential, x_map))(keys), 0)
        noise_ratio = jnp.median(jnp.sqrt(noise / diag))
        idx = jax.vmap(potential.sample_indices)(keys).reshape(-1)
        per_example = potential.per_example_grads(x_map, idx)
        centred = per_example - per_example.mean(0)
        var = jnp.mean(centred**2, 0)
        kurt = jnp.mean(centred**4, 0) / jnp.where(var > 0, var**2, 1.0)
        kurtosis = jnp.max(jnp.where(var > 0, kurt, 0.0))

    directions = jax.random.normal(dir_key, (8, potential.dim), dtype) * inv_sqrt
    curvature = jax.vmap(lambda u: u @ hvp(u))(directions)
    directions = directions / jnp.sqrt(jnp.maximum(curvature, tiny))[:, None]
    # U(x) − U(x*) summed datum by datum: at large N, U's own float32 rounding error would
    # swamp the rises of 1/2 to 8 that these probes read
    rise_at = lambda x: potential.full_value_difference(x, x_map)
    steps = jnp.asarray(PROBE_STEPS, dtype)
    rise = lax.map(lambda u: lax.map(lambda t: rise_at(x_map + t * u), steps), directions)
    rise = jnp.where(jnp.isfinite(rise), rise, 1e6)
    quadratic = steps**2 / 2
    # the rounding of each ℓ_i (float32, large |ℓ_i| or N) adds a noise of about the same size
    # to the rise at every step.  Two steps a tenth and 0.15 of an sd out differ by their
    # quadratics, 0.00625, and by that noise: a cubic term moves a thousandth of its size at
    # one sd between them, a kink or a linear term 5 % of its slope.  A deviation within
    # twice the noise so read (at most ROUNDING_CAP) is not counted as a misfit
    pair = lax.map(lambda u: rise_at(x_map + 0.1 * u) - rise_at(x_map + 0.15 * u), directions)
    spread = jnp.abs(pair + 0.00625) / jnp.sqrt(2.0)  # the difference of two roundings
    rounding = jnp.minimum(jnp.max(jnp.where(jnp.isfinite(spread), spread, 0.0)), ROUNDING_CAP)
    misfit = jnp.maximum(jnp.abs(rise - quadratic) - 2.0 * rounding, 0.0) / quadratic
    pos, neg = rise[:, 4], rise[:, 1]  # t = +2, −2
    return dict(
        curvature_spread=jnp.max(diag) / jnp.min(diag),
        correlation_condition=correlation_condition,
        gradient_noise_ratio=noise_ratio,
        quadratic_misfit=jnp.max(misfit),
        skewness=jnp.max(jnp.abs(pos - neg) / jnp.maximum(jnp.abs(pos + neg), 1e-12)),
        tail_growth=jnp.min((rise[:, 5] + rise[:, 0]) / 9.0),
        gradient_kurtosis=kurtosis,
        max_curvature=jnp.maximum(top_curvature, jnp.max(diag)),
        curvature_diagonal=diag,
        gradient_noise_sd=jnp.sqrt(noise),
    )


def _without_probes(**structural: Any) -> ModelFeatures:
    """Structural features only: every probe field NaN (or its neutral value)."""
    nan = float("nan")
    return ModelFeatures(
        curvature_spread=nan,
        correlation_condition=nan,
        gradient_noise_ratio=nan,
        quadratic_misfit=nan,
        skewness=nan,
        tail_growth=nan,
        gradient_kurtosis=nan,
        max_curvature=nan,
        mode_count=1,
        map_position=None,
        curvature_diagonal=None,
        gradient_noise_sd=None,
        **structural,
    )


def _full_data_only(**structural: Any) -> ModelFeatures:
    """Features of a model only full-data NUTS can sample: no data plate, dimension or probe
    is read (``structural`` overrides these defaults)."""
    defaults = dict(num_data=0, subsample_size=0, dim=0, has_data_plate=False, cost_ratio=1.0)
    defaults.update(discrete_sites=(), constrained_sites=())
    return _without_probes(**{**defaults, **structural})


def local_latent_features(error: LocalLatentError) -> ModelFeatures:
    """Features of a model with per-datum latents, from the error that found them (the model
    is not traced again): full-data NUTS only."""
    return _full_data_only(num_data=error.data_size, has_data_plate=True, local_sites=error.sites)


def full_data_features(error: FullDataOnlyError) -> ModelFeatures:
    """Features of a model only NUTS can run, from the refusal that says why."""
    size, reason = error.data_size, error.reason
    return _full_data_only(num_data=size, has_data_plate=size > 0, full_data_reason=reason)


def model_features(
    model: Callable | ModelView,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    *,
    subsample_size: int | None = None,
    data_plate: str | None = None,
    rng_key: PRNGKey | None = None,
    probe: bool = True,
    stage: ModeStage | None = None,
) -> ModelFeatures:
    """Compute :class:`ModelFeatures` for a NumPyro model and its data.

    ``model`` is the model itself or its :class:`~pplsamplers.model.ModelView` from
    :func:`~pplsamplers.model.inspect` (which carries the arguments and data plate, so the model is
    not traced again).  Models with discrete latent sites get only their structural features.

    Parameters
    ----------
    model, model_args, model_kwargs : the model or its view, and the model's arguments (the data).
    subsample_size : minibatch size n (default: the model's own, else N).
    data_plate : name of the data plate where it cannot be found automatically.
    rng_key : key of the MAP fit and the probes (default ``PRNGKey(0)``).
    probe : ``False`` skips the MAP-based probes (NaN fields).
    stage : the shared warmup's :class:`~pplsamplers.warmup.ModeStage`, which lends its
        potential, mode and mode count.

    Returns
    -------
    ModelFeatures

    Examples
    --------
    >>> import jax
    >>> from pplsamplers.datasets.tiny import normal_mean  # mu ~ N(0, 10²), y_i ~ N(mu, 1)
    >>> y = jax.random.normal(jax.random.key(0), (200,))
    >>> f = model_features(normal_mean, (y,), subsample_size=20)
    >>> f.dim, f.num_data, f.quadratic_misfit < 1e-3  # a Gaussian (float32 rounding)
    (1, 200, True)
    """
    if not isinstance(model, ModelView):
        call = (model, model_args, dict(model_kwargs or {}))
        discrete = tuple(discrete_latent_sites(*call))
        if discrete:  # NUTS+Gibbs, or an error above SMALL_N data
            return _full_data_only(discrete_sites=discrete, num_data=largest_plate(*call))
        try:
            model = inspect(model, model_args, model_kwargs, data_plate)
        except LocalLatentError as error:
            return local_latent_features(error)
        except FullDataOnlyError as error:
            return full_data_features(error)
    view, info = model, model.info
    if (refusal := no_dimension_error(info)) is not None:
        return full_data_features(refusal)
    structural = dict(
        has_data_plate=info.data_plate is not None,
        discrete_sites=(),
        constrained_sites=tuple(info.constrained_sites),
    )
    if info.edge_sites:  # a hard edge at the data: no mode-based probe is meaningful
        return _without_probes(
            num_data=info.data_size,
            subsample_size=subsample_size or info.model_subsample_size or info.data_size,
            dim=sum(math.prod(shape) for shape in info.unconstrained_shapes.values()),
            cost_ratio=1.0,
            edge_sites=tuple(info.edge_sites),
            **structural,
        )
    if stage is not None:
        potential = stage.potential
        batch = subsample_size or info.model_subsample_size or potential.N
        estimator = with_batch_size(potential.estimator, min(batch, potential.N))
    else:
        potential = make_potential(view, subsample_size=subsample_size)
        estimator = potential.estimator
    key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    features = _without_probes(
        num_data=estimator.N,
        subsample_size=estimator.n,
        dim=estimator.dim,
        cost_ratio=estimator.n / estimator.N,
        **structural,
    )
    if not probe:
        return features
    return features._replace(**probe_features(key, potential, estimator, stage=stage))


def features_table(features: ModelFeatures) -> str:
    """The features as aligned ``name  value`` lines."""
    rows = []
    for name, value in features.as_dict().items():
        text = f"{value:.3g}" if isinstance(value, float) and np.isfinite(value) else str(value)
        rows.append(f"  {name:<22} {text}")
    return "\n".join(rows)


__all__ = ["ModelFeatures", "count_modes", "features_table", "full_data_features"]
__all__ += ["local_latent_features", "model_features", "probe_features"]
