"""The warmup every sampler shares, done once per data set by the adapter (DESIGN §8).

NUTS is right on raw, unscaled posteriors because its warmup adapts a mass matrix.  Every
pplsamplers kernel gets the same by default: :func:`prepare` turns the model (inspected once)
into the potential the kernel runs on,

1. **mode**: :func:`~pplsamplers.potential.find_map` (full-batch L-BFGS, affine-covariant, so
   raw scales and flat priors converge); a run that did not converge says so;
2. **scale**: the inverse curvature at the mode from full-data passes
   (:func:`~pplsamplers.potential.posterior_scale`: dense up to D = 1000, diagonal beyond),
   or the user's matrix; where the importance weights of Laplace draws show that Laplace
   approximation to be poor (a hierarchical model's joint mode is far from its mass), a
   Gaussian variational fit replaces it (:mod:`pplsamplers.potential.variational`);
3. **control variate** (``"auto"``): anchored at the mode when the mode probe
   (:func:`~pplsamplers.potential.modes.count_modes`) finds one mode; off, with the reason,
   otherwise;
4. **batch size** (``None``): from the gradient-noise probe and a cost model
   (:func:`~pplsamplers.potential.suggest_batch_size`), reported; each minibatch is a
   contiguous block of the data rows, shuffled once before anything else
   (:func:`~pplsamplers.potential.shuffle.shuffled_view`; random rows where an argument
   with N rows is not per-datum; sharded data are shuffled in place);
5. **whitening**: the kernel samples z with x = x* + L z
   (:func:`~pplsamplers.potential.with_preconditioner`), where the posterior has about unit
   scale, so each kernel's unit-scale defaults and warmup targets hold on any problem;
6. the kernel's starting tunables (``KernelSpec.default_params``) for that potential.

Chains start in the Laplace approximation (z ~ N(0, I)).  Draws, ``sample_stats`` and ArviZ
output stay in the model's parameters (the adapter maps z back); :attr:`Prepared.notes`
says what was chosen and why."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers.infer.metric import refinement
from pplsamplers.infer.options import PRECONDITIONERS, SamplerOptions, user_factor
from pplsamplers.infer.spec import KernelSpec
from pplsamplers.potential import (
    SubsampledPotential,
    check_position,
    edge_error,
    find_map,
    flatten_init_params,
    full_data_model,
    inspect,
    is_concrete,
    leaf_identity,
    make_postprocess,
    make_potential,
    posterior_scale,
    suggest_batch_size,
    validate_data,
    with_batch_size,
    with_control_variate,
    with_preconditioner,
)
from pplsamplers.potential.modes import count_modes
from pplsamplers.potential.shuffle import shuffled_view
from pplsamplers.potential.subsampled import with_contiguous_blocks
from pplsamplers.potential.variational import laplace_check, refine_laplace
from pplsamplers.types import Array, PRNGKey

PREPARE_SEED = 0
"""The set-up (mode, probes) is deterministic: its keys derive from this seed, not the run's."""


class Prepared(NamedTuple):
    """What :func:`prepare` found, and the potential the kernel runs on."""

    potential: SubsampledPotential
    """What the kernel runs on (whitened, control variate, batch size)."""
    model_potential: SubsampledPotential
    """The model's own full-batch potential in its flat unconstrained x (self-check)."""
    params: Any
    mode: Array | None
    """The Gaussian approximation's center: the polished mode, or the variational fit's mean."""
    notes: dict[str, str]
    postprocess: Callable[[dict], dict]
    full_data_model: Callable | None
    check_start: Callable[[Array], None]
    flatten: Callable[[Any], Array]
    """``init_params`` (a dict of sites or a flat array) -> flat x, checked site by site."""
    whitened: bool
    """Whether the kernel's coordinates are scaled by a posterior-scale estimate."""
    center: Array
    factor: Array
    """x = center + factor z (``factor`` (D,) diagonal or (D, D) lower triangular)."""
    batched: SubsampledPotential
    """``potential`` before whitening (model coordinates x, batch size, control variate)."""
    adapt_metric: bool
    """Whether each chain refines (center, factor) from its warmup draws: with a preconditioner
    the library chose, not already accurate (:func:`pplsamplers.infer.metric.refinement`)."""


def _base(options: SamplerOptions, model_args: tuple, model_kwargs: dict) -> tuple:
    """(full-batch potential, n from the model or the user, view or None, how minibatches
    read the rows)."""
    if options.potential is not None:
        potential = options.potential
        n = options.subsample_size or (potential.n if potential.n < potential.N else None)
        rows = "random rows (a given potential)"
        return with_batch_size(potential, potential.N), n, None, rows
    view = inspect(
        options.model,
        model_args,
        model_kwargs,
        data_plate=options.data_plate,
        **({} if options.init_strategy is None else {"init_strategy": options.init_strategy}),
    )
    if view.info.edge_sites:
        raise edge_error(view.info.edge_sites, "a minibatch sampler")
    validate_data(view)  # one pass over N, before the shuffle: errors name the user's rows
    shuffled, rows_note = shuffled_view(view, jax.random.PRNGKey(PREPARE_SEED + 5))
    potential = make_potential(shuffled or view, check_data=False)
    if shuffled is not None:
        potential = with_contiguous_blocks(potential)
    n = options.subsample_size or view.info.model_subsample_size
    if n is not None and not 0 < n <= potential.N:
        raise ValueError(
            f"subsample_size must satisfy 0 < subsample_size <= N = {potential.N} (the size of "
            f"plate '{view.info.data_plate}'); got {n}."
        )
    return with_batch_size(potential, potential.N), n, view, rows_note


def _mode(potential: SubsampledPotential, notes: dict[str, str]) -> tuple[Array, bool]:
    """(the L-BFGS search's end point, whether it converged), noted in ``notes["mode"]``."""
    result = find_map(jax.random.PRNGKey(PREPARE_SEED), potential)
    converged = bool(result.converged)
    notes["mode"] = (
        f"{'converged' if converged else 'NOT converged'}: distance to the mode "
        f"{float(result.scaled_grad_norm):.2g} posterior sd after "
        f"{int(result.num_iterations)} L-BFGS iterations"
    )
    return result.position, converged


def _warn_unconverged(notes: dict[str, str]) -> None:
    """One warning line when the mode (after its polish, where one ran) is not converged."""
    warnings.warn(
        f"pplsamplers: the mode search did not converge ({notes['mode']}); the "
        "preconditioner and control variate are built there anyway. Check the model for a "
        "flat or unbounded direction (an improper posterior), or pass precondition=None "
        "and control_variate=False.",
        stacklevel=4,
    )


def _control_variate(
    choice: Any,
    base: SubsampledPotential,
    mode: Array | None,
    factor: Array,
    notes: dict[str, str],
    minibatch: bool,
) -> tuple[Array | None, int | None]:
    """(anchor in x or ``None``, mode count or ``None``); the mode probe decides ``"auto"``,
    from Laplace draws around ``mode`` in the posterior scale ``factor``."""
    if choice is False or choice is None:
        notes["control_variate"] = "off (control_variate=False)"
        return None, None
    if choice is True:
        notes["control_variate"] = "on: anchored at the mode"
        return mode, None
    if not isinstance(choice, str):
        anchor = jnp.asarray(choice)
        if anchor.shape != (base.dim,):
            raise ValueError(
                f"control_variate anchor must have shape ({base.dim},); got {anchor.shape}."
            )
        notes["control_variate"] = "on: anchored at the given point"
        return anchor, None
    if not minibatch:
        notes["control_variate"] = "off: full batch (exact gradients)"
        return None, None
    modes = count_modes(jax.random.PRNGKey(PREPARE_SEED + 1), base, mode, scale=factor)
    if modes > 1:
        notes["control_variate"] = (
            f"off: the mode probe found {modes} separated modes, and one anchor is valid near "
            "one mode only"
        )
        return None, modes
    notes["control_variate"] = "on: the mode probe found one mode; anchored at it"
    return mode, modes


_CACHES: dict[str, OrderedDict] = {"mode": OrderedDict(), "prepared": OrderedDict()}
CACHE_SIZE = 4
"""Set-ups kept for reuse: every sampler built on the same model, data and shared options
(AutoSampler's features and candidates, a benchmark's rows) reuses the mode, curvature, mode
probe and compiled full-data passes instead of redoing them.  Entries hold the data alive,
so few."""


def _cached(stage: str, options: SamplerOptions, args: tuple, kwargs: dict, compute: Callable):
    """``compute(options, args, kwargs)``, memoised by :func:`_cache_key` in ``stage``'s cache."""
    key, cache = _cache_key(options, args, kwargs), _CACHES[stage]
    if key is None:
        return compute(options, args, kwargs)
    if key not in cache:
        # the entry keeps the keyed objects alive, so their ids cannot be reused
        cache[key] = (compute(options, args, kwargs), (options, args, kwargs))
        while len(cache) > CACHE_SIZE:
            cache.popitem(last=False)
    cache.move_to_end(key)
    return cache[key][0]


def _cache_key(options: SamplerOptions, model_args: tuple, model_kwargs: dict) -> tuple | None:
    """The inputs' identity (:func:`~pplsamplers.potential.leaf_identity`) and the default float
    precision (NumPy data give float32 or float64 set-ups), or ``None``: uncacheable."""
    if not is_concrete(model_args, model_kwargs):
        return None
    leaves, structure = jax.tree.flatten((model_args, model_kwargs))
    choice, precondition = options.control_variate, options.precondition
    if not isinstance(choice, bool | str | None) or not isinstance(precondition, str | None):
        return None  # arrays: cheap to key by identity, but rare; do not cache
    return (
        id(options.model),
        id(options.potential),
        options.subsample_size,
        options.data_plate,
        choice,
        precondition,
        id(options.init_strategy),
        str(structure),
        tuple(leaf_identity(leaf) for leaf in leaves),
        jax.dtypes.canonicalize_dtype(float),
    )


def prepare(
    options: SamplerOptions, spec: KernelSpec, model_args: tuple, model_kwargs: dict
) -> Prepared:
    """The kernel's potential and starting params for one data set (module docstring).

    The set-up is cached (:data:`CACHE_SIZE` entries) by the identity of the model, the data
    arrays and the shared options; only the sampler's own ``default_params`` run again.
    """
    shared = _cached("prepared", options, model_args, model_kwargs, _prepare_shared)
    potential = shared.potential
    mode = None if shared.mode is None else potential.from_model(shared.mode)
    params = spec.default_params(jax.random.PRNGKey(PREPARE_SEED + 3), potential, mode)
    return shared._replace(params=params)


class ModeStage(NamedTuple):
    """Steps 1-3 of the set-up (module docstring): what AutoSampler's features read too."""

    base: SubsampledPotential
    """The model's full-batch potential in its flat unconstrained x."""
    subsample_size: int | None
    """The user's or the model's batch size; ``None``: automatic (step 4)."""
    view: Any
    """The :class:`~pplsamplers.potential.ModelView`, or ``None`` for a user potential."""
    notes: dict[str, str]
    mode: Array | None
    """The mode (polished in the Laplace metric when a preconditioner is estimated)."""
    center: Array
    factor: Array
    anchor: Array | None
    """The control variate's anchor in x, or ``None`` (off)."""
    mode_count: int | None
    """The mode probe's count of separated optima; ``None`` where it did not run."""
    laplace_misfit: float | None
    """sd of the log importance weights of Laplace draws (step 2's check,
    :func:`~pplsamplers.potential.variational.laplace_misfit`); ``None`` where no
    preconditioner is estimated."""


def mode_stage(options: SamplerOptions, model_args: tuple, model_kwargs: dict) -> ModeStage:
    """Mode, posterior scale and mode probe (steps 1-3), cached like :func:`prepare`.

    Every kernel's :func:`prepare` starts from it, and :class:`~pplsamplers.AutoSampler`
    computes its features on it, so a decision followed by the chosen kernel's run finds the
    mode, curvature and mode probe once.

    Examples
    --------
    >>> from models import linear_gaussian
    >>> args, kwargs = linear_gaussian.load_data(N=2000, D=2)
    >>> stage = mode_stage(SamplerOptions(linear_gaussian.model, subsample_size=100), args, kwargs)
    >>> stage.mode.shape, stage.mode_count, stage.anchor is stage.mode
    ((2,), 1, True)
    """
    return _cached("mode", options, model_args, model_kwargs, _mode_stage)


def _mode_stage(options: SamplerOptions, model_args: tuple, model_kwargs: dict) -> ModeStage:
    base, n, view, rows = _base(options, model_args, model_kwargs)
    notes: dict[str, str] = {"minibatch_rows": rows}
    if view is not None and view.data_plate is not None:
        given = " (given)" if options.data_plate else ""
        notes["data_plate"] = f"'{view.data_plate}', N = {base.N}{given}"
    dtype = base.init_position.dtype
    precondition, choice = options.precondition, options.control_variate
    needs_mode = (
        isinstance(precondition, str)
        or choice is True
        or (isinstance(choice, str) and n != base.N)
        or n is None
    )
    mode, converged = _mode(base, notes) if needs_mode else (None, True)
    center = mode if mode is not None else jnp.zeros(base.dim, dtype)
    if precondition is None:
        factor = jnp.ones(base.dim, dtype)
        notes["precondition"] = "off (precondition=None)"
    elif isinstance(precondition, str):
        factor, scale_info = posterior_scale(base, mode, precondition)
        kind = "dense" if factor.ndim == 2 else "diagonal"
        clipped = int(scale_info.get("num_clipped", 0))
        notes["precondition"] = f"{kind} inverse curvature at the mode" + (
            f" ({clipped} eigenvalues floored)" if clipped else ""
        )
    else:
        factor = user_factor(precondition, base.dim, dtype)
        notes["precondition"] = "the given covariance"
    if factor.ndim == 2 and not bool(jnp.array_equal(factor, jnp.tril(factor))):
        factor = jnp.linalg.cholesky(factor @ factor.T)  # same metric, triangular: traceable
    if mode is not None and isinstance(precondition, str):
        # an exact convergence test in posterior sds, and a polish: a few passes
        # (what decides convergence: a search that stalled in the raw metric but whose
        # polish meets the tolerance has found the mode)
        polished = find_map(jax.random.PRNGKey(PREPARE_SEED), base, mode, scale=factor)
        mode = center = polished.position
        converged = bool(polished.converged)
        notes["mode"] += (
            f"; polished in the Laplace metric to {float(polished.scaled_grad_norm):.2g} sd"
            f" ({'converged' if converged else 'NOT converged'})"
        )
    if not converged:
        _warn_unconverged(notes)
    minibatch = base.N > 1 and (n is None or n < base.N)
    anchor, mode_count = _control_variate(choice, base, mode, factor, notes, minibatch)
    misfit = None
    if mode is not None and isinstance(precondition, str):  # step 2b's check
        misfit = laplace_check(jax.random.PRNGKey(PREPARE_SEED + 4), base, center, factor)
    return ModeStage(base, n, view, notes, mode, center, factor, anchor, mode_count, misfit)


def _prepare_shared(options: SamplerOptions, model_args: tuple, model_kwargs: dict) -> Prepared:
    """Everything of :func:`prepare` but the sampler's params (which are ``None`` here)."""
    stage = mode_stage(options, model_args, model_kwargs)
    base, n, view, notes = stage.base, stage.subsample_size, stage.view, dict(stage.notes)
    mode, center, factor, anchor = stage.mode, stage.center, stage.factor, stage.anchor
    precondition, dtype = options.precondition, base.init_position.dtype
    if n is None:
        probe = base if anchor is None else with_control_variate(base, anchor)
        n, reason = suggest_batch_size(jax.random.PRNGKey(PREPARE_SEED + 2), probe, center, factor)
        notes["subsample_size"] = f"{n} (automatic): {reason}"
    else:
        notes["subsample_size"] = f"{n}" + (" (full batch)" if n == base.N else "")
    batched = with_batch_size(base, n)
    if anchor is not None and n == base.N:
        anchor = None
        notes["control_variate"] = "off: full batch (exact gradients)"
    if anchor is not None:
        batched = with_control_variate(batched, anchor)
    if mode is not None and isinstance(precondition, str):  # step 2b: a poor Laplace fit
        center, factor, fit_note = refine_laplace(
            jax.random.PRNGKey(PREPARE_SEED + 4),
            batched,
            center,
            factor,
            exact=base,
            misfit=stage.laplace_misfit,
        )
        notes["precondition"] += "; " + fit_note
        mode = center
    refine, how = refinement(stage.laplace_misfit)  # the chains' windows (infer.metric)
    if isinstance(precondition, str):
        notes["precondition"] += "; " + how
    potential = with_preconditioner(batched, center, factor)
    if view is None:  # a user potential: no model to constrain, replay or name sites of
        postprocess, model_view, check = (lambda z: z), None, (lambda x: check_position(base, x))
        flatten = lambda p: jnp.asarray(p, dtype).reshape(-1)
    else:
        postprocess, model_view = make_postprocess(view), full_data_model(view)
        check = lambda x: check_position(base, x, view)
        flatten = lambda p: flatten_init_params(view, p)
    return Prepared(
        potential,
        base,
        None,  # the sampler's own params, set by prepare
        mode,
        notes,
        postprocess,
        model_view,
        check,
        flatten,
        precondition is not None,
        center,
        factor,
        batched,
        isinstance(precondition, str) and refine,
    )


def starting_point(
    rng_key: PRNGKey, init_params: Any, prepared: Prepared, spec: KernelSpec
) -> Array:
    """A chain's start in the kernel's coordinates z: ``init_params`` if given, else the
    sampler's own start if it declares one, else a draw of the Laplace approximation
    z ~ N(0, I) (whitened), or of the init strategy when there is no mode."""
    potential = prepared.potential
    if init_params is not None:
        x = prepared.flatten(init_params)
        if is_concrete(x):
            prepared.check_start(x)
        return potential.from_model(x)
    own = spec.start(rng_key, potential, prepared.params) if spec.start is not None else None
    if own is not None:
        z = jnp.asarray(own)
    elif prepared.mode is not None:
        zero = jnp.zeros(potential.dim, potential.init_position.dtype)
        if not prepared.whitened:
            return zero  # no scale to draw with: start at the mode
        z = jax.random.normal(rng_key, (potential.dim,), zero.dtype)
        if is_concrete(z):
            try:
                prepared.check_start(potential.to_model(z))
            except RuntimeError:  # a Laplace draw outside a parameter-dependent support
                return zero
        return z
    elif potential.draw_init is not None:
        z = potential.draw_init(rng_key)
    else:
        z = potential.init_position
    x = potential.to_model(z)
    if is_concrete(x):
        prepared.check_start(x)
    return z


__all__ = [
    "PRECONDITIONERS",
    "ModeStage",
    "Prepared",
    "SamplerOptions",
    "mode_stage",
    "prepare",
    "starting_point",
]
