"""The warmup every sampler shares: :func:`setup` turns a model and its data into one frozen
:class:`Setup`, once per data set.

NUTS is right on raw, unscaled posteriors because its warmup adapts a mass matrix.  Every
pplsamplers kernel gets the same by default, in stages:

1. **mode**: :func:`~pplsamplers.warmup.mode.find_map` (full-batch L-BFGS, affine-covariant,
   so raw scales and flat priors converge), polished in the Laplace metric; a search that
   did not converge says so;
2. **scale**: the inverse curvature at the mode from full-data passes
   (:func:`~pplsamplers.warmup.scale.posterior_scale`: dense up to D = 1000, diagonal beyond),
   or the user's matrix;
3. **control variate** (``"auto"``): anchored at the mode when the mode probe
   (:func:`~pplsamplers.warmup.modes.count_modes`) finds one mode;
4. **Laplace check**: where importance weights of Laplace draws show the Gaussian to be poor
   (a hierarchical model's joint mode is far from its mass), a Gaussian variational fit
   replaces it (:mod:`~pplsamplers.warmup.variational`).  The fit reads gradients at the
   batch size the noise target asks for (or the user's, where larger), and the control
   variate moves to the fit's mean, where the chains are.  Where the scale's floor narrowed
   a direction, the check is repeated along it at its own width, and a mode far from
   Gaussian there (a funnel's neck) is noted as ``degenerate_mode`` and warned about before
   sampling;
5. **batch size** (``None``): from the gradient-noise probe at the final Gaussian and
   anchor, and a cost model (:func:`~pplsamplers.warmup.scale.suggest_batch_size`); a
   batch size the user gave is checked by the same probe.  Each minibatch is a contiguous
   block of rows shuffled once (:func:`~pplsamplers.model.shuffled_view`);
6. **whitening**: the kernel samples z with x = c + L z, where the posterior has about unit
   scale, so each kernel's unit-scale defaults hold on any problem.

A model with group effects takes a structured path through steps 1, 2 and 4
(:mod:`~pplsamplers.warmup.structured`): the centre is the globals' nested-Laplace mode, the
Gaussian has an arrowhead precision, and a group effect written centred is sampled centred or
non-centred by its data (:mod:`~pplsamplers.warmup.centring`; ``docs/hierarchical.md``).

:func:`mode_stage` computes the mode, the scale, the mode probe and the Laplace check's
misfit, which AutoSampler's features read too; :func:`setup` takes a mode stage computed
before, so a decision followed by the chosen kernel's run does them once.
Chains start in the Gaussian approximation (z ~ N(0, I)); :attr:`Setup.notes` says what was
chosen and why.
"""

from __future__ import annotations

import warnings
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from pplsamplers.diagnostics import SelfCheckWarning, coordinate_names
from pplsamplers.estimator import (
    Potential,
    Whitening,
    check_whitening,
    with_batch_size,
    with_contiguous_blocks,
    with_control_variate,
)
from pplsamplers.model import (
    ModelView,
    edge_error,
    inspect,
    make_potential,
    same_objects,
    shuffled_view,
    validate_data,
)
from pplsamplers.types import Array
from pplsamplers.warmup.anchor import anchor_in_fit, choose_control_variate
from pplsamplers.warmup.centring import recentre
from pplsamplers.warmup.metric import refinement
from pplsamplers.warmup.mode import polish
from pplsamplers.warmup.modes import ModeSearch, search_mode
from pplsamplers.warmup.options import SEED, SetupOptions, user_factor
from pplsamplers.warmup.scale import (
    NOISE_TARGET,
    check_batch_size,
    posterior_scale,
    suggest_batch_size,
)
from pplsamplers.warmup.smoothness import smoothness_check
from pplsamplers.warmup.stage import ModeStage, Setup
from pplsamplers.warmup.structured import STRUCTURED_NOISE_TARGET, StructuredFit, structured_fit
from pplsamplers.warmup.variational import (
    MISFIT_THRESHOLD,
    degenerate_mode_note,
    laplace_check,
    refine_laplace,
)


def _potential(options: SetupOptions, model_args: tuple, model_kwargs: dict) -> tuple:
    """(full-batch potential, n from the user or the model, view or None, how rows are read)."""
    if options.potential is not None:
        potential = options.potential
        given = potential.estimator
        n = options.subsample_size or (given.n if given.n < given.N else None)
        full = potential._replace(estimator=with_batch_size(given, given.N))
        return full, n, None, "random rows (a given potential)"
    init = {} if options.init_strategy is None else {"init_strategy": options.init_strategy}
    view = inspect(options.model, model_args, model_kwargs, data_plate=options.data_plate, **init)
    if view.info.edge_sites:
        raise edge_error(view.info.edge_sites, "a minibatch sampler")
    validate_data(view)  # one pass over N, before the shuffle: errors name the user's rows
    shuffled, rows = shuffled_view(view, jax.random.PRNGKey(SEED + 5))
    potential = make_potential(shuffled or view, check_data=False)
    if shuffled is not None:
        potential = potential._replace(estimator=with_contiguous_blocks(potential.estimator))
    n, N = options.subsample_size or view.info.model_subsample_size, potential.N
    if n is not None and not 0 < n <= N:
        raise ValueError(
            f"subsample_size must satisfy 0 < subsample_size <= N = {N} (the size of plate "
            f"'{view.info.data_plate}'); got {n}."
        )
    full = potential._replace(estimator=with_batch_size(potential.estimator, N))
    return full, n, view, rows


def _search_mode(potential: Potential, notes: dict[str, str]) -> ModeSearch:
    """The L-BFGS search from several starts, noted in ``notes["mode"]``."""
    search = result, starts, _, _ = search_mode(
        jax.random.PRNGKey(SEED), potential.estimator, potential.init_position, potential.draw_init
    )
    notes["mode"] = (
        f"{'converged' if bool(result.converged) else 'NOT converged'}: distance to the mode "
        f"{float(result.scaled_grad_norm):.2g} posterior sd after "
        f"{int(result.num_iterations)} L-BFGS iterations" + (f" ({starts})" if starts else "")
    )
    return search


def _check_smooth(potential: Potential, mode: Array, whitening: Any) -> None:
    """Refuse a U that jumps where its gradient is flat (:mod:`~pplsamplers.warmup.smoothness`)."""
    names = coordinate_names(potential)
    key = jax.random.PRNGKey(SEED + 7)
    smoothness_check(potential.estimator, mode, whitening, names, key, potential.N)


def _warn_not_converged(note: str) -> None:
    warnings.warn(
        f"pplsamplers: the mode search did not converge ({note}); the preconditioner and "
        "control variate are built there anyway. Check the model for a flat or unbounded "
        "direction (an improper posterior), or pass precondition=None and "
        "control_variate=False.",
        stacklevel=5,
    )


def _scale_note(factor: Array, info: dict[str, Any]) -> str:
    """The ``precondition`` note of an estimated posterior scale."""
    clipped = int(info.get("num_clipped", 0))
    floored = f" ({clipped} eigenvalues floored)" if clipped else ""
    return f"{'dense' if factor.ndim == 2 else 'diagonal'} inverse curvature at the mode{floored}"


def _batched(base: Any, n: int, probe: Any) -> Any:
    """``base`` at batch size ``n``; below the full batch, ``probe`` (``base`` with the control
    variate, whose full pass at the anchor is then not repeated) at batch size ``n``."""
    return with_batch_size(base if n == base.N else probe, n)


def _warn_degenerate(note: str) -> None:
    warnings.warn(
        f"pplsamplers: the posterior's mode is degenerate, a funnel's neck or a boundary: "
        f"{note}. The sampler's Gaussian reference sits in it, so this run will be slow or "
        "wrong. Try: AutoSampler / NUTS / a non-centred parameterisation.",
        SelfCheckWarning,
        stacklevel=5,
    )


def _structured_stage(
    potential: Potential,
    n: int | None,
    view: ModelView | None,
    rows: str,
    notes: dict[str, str],
    structure: StructuredFit,
    choice: Any,
    arguments: tuple,
) -> ModeStage:
    """The mode stage of a model with group effects: the structured fit's centre and
    whitening; the control variate (second order) anchored at the centre."""
    _check_smooth(potential, structure.center, structure.whitening)
    joint = notes["mode"]
    notes.update(structure.notes)
    notes["mode"] += f" (the joint mode search, not used as the centre: {joint})"
    if not structure.converged:
        _warn_not_converged(notes["mode"])
    center, estimator = structure.center, potential.estimator
    minibatch = potential.N > 1 and (n is None or n < potential.N)
    if isinstance(choice, str) and minibatch:  # "auto"
        anchor = center
    else:
        anchor, _ = choose_control_variate(choice, estimator, center, None, notes, minibatch)
    if anchor is center:  # the set-up's own anchor (the "mode" here is the centre)
        notes["control_variate"] = "on: second order, anchored at the nested Laplace centre"
    elif anchor is not None:  # a given point; the arrowhead Hessian still makes it second order
        notes["control_variate"] += " (second order)"
    misfit = laplace_check(jax.random.PRNGKey(SEED + 4), estimator, structure.whitening)
    return ModeStage(
        potential, n, view, rows, MappingProxyType(notes), center, structure.whitening,
        anchor, None, misfit, arguments, structure,
    )  # fmt: skip


def mode_stage(options: SetupOptions, model_args: tuple, model_kwargs: dict) -> ModeStage:
    """Mode, posterior scale, mode probe and the Laplace check's misfit (module docstring).

    Examples
    --------
    >>> from pplsamplers.datasets import tiny_linear
    >>> linear, (A, x) = tiny_linear()  # theta ~ N(0, I), x_i ~ N(a_i . theta, 3²), 2000 rows
    >>> stage = mode_stage(SetupOptions(linear, subsample_size=100), (A, x), {})
    >>> stage.mode.shape, stage.mode_count, stage.anchor is stage.mode
    ((2,), 1, True)
    """
    model_args, model_kwargs = tuple(model_args), dict(model_kwargs or {})
    arguments = (model_args, model_kwargs)
    potential, n, view, rows = _potential(options, model_args, model_kwargs)
    estimator, N, dim = potential.estimator, potential.N, potential.dim
    notes: dict[str, str] = {"minibatch_rows": rows}
    if view is not None and view.data_plate is not None:
        notes["data_plate"] = f"'{view.data_plate}', N = {N}" + (
            " (given)" if options.data_plate else ""
        )
    dtype = potential.init_position.dtype
    precondition, choice = options.precondition, options.control_variate
    estimated = isinstance(precondition, str)
    needs_mode = (
        options.needs_mode
        or estimated
        or choice is True
        or (isinstance(choice, str) and n != N)
        or n is None
    )
    search = _search_mode(potential, notes) if needs_mode else None
    mode = None if search is None else search.result.position
    converged = search is None or bool(search.result.converged)
    structure = None
    if precondition == "auto" and mode is not None:
        structure, found = structured_fit(potential, mode, jax.random.PRNGKey(SEED + 6))
        notes["structure"] = found if structure is not None else f"none: {found}"
    if structure is not None:
        stage = _structured_stage(potential, n, view, rows, notes, structure, choice, arguments)
        return recentre(stage, options, lambda changed: mode_stage(changed, *arguments))
    center = mode if mode is not None else jnp.zeros(dim, dtype)
    info: dict[str, Any] = {}
    if precondition is None:
        factor = jnp.ones(dim, dtype)
        notes["precondition"] = "off (precondition=None)"
    elif estimated:
        factor, info = posterior_scale(estimator, mode, precondition)
        notes["precondition"] = _scale_note(factor, info)
    else:
        factor = user_factor(precondition, dim, dtype)
        notes["precondition"] = "the given covariance"
    whitening = check_whitening(Whitening(center, factor), dim)
    if mode is not None and estimated:
        # the convergence test in posterior sds, and a polish: a few passes
        infos = [info]

        def rescale(x: Array) -> Array:  # the curvature where the polish found a lower U
            new_factor, new_info = posterior_scale(estimator, x, precondition)
            infos.append(new_info)
            return new_factor

        polished, factor, rebuilt = polish(
            jax.random.PRNGKey(SEED), estimator, mode, whitening.factor, rescale
        )
        info, mode, converged = infos[-1], polished.position, bool(polished.converged)
        whitening = check_whitening(Whitening(mode, factor), dim)
        notes["precondition"] = _scale_note(factor, info)
        notes["mode"] += (
            f"; polished in the Laplace metric to {float(polished.scaled_grad_norm):.2g} sd"
            f" ({'converged' if converged else 'NOT converged'})"
        )
        if rebuilt:
            notes["mode"] += f"; the curvature rebuilt {rebuilt}× where the polish found a lower U"
    if mode is not None:
        _check_smooth(potential, mode, whitening)
    if not converged:
        _warn_not_converged(notes["mode"])
    minibatch = N > 1 and (n is None or n < N)
    subset = None if search is None else search.subset  # the mode probe reuses its programs
    anchor, mode_count = choose_control_variate(
        choice, estimator, mode, whitening.factor, notes, minibatch, subset=subset
    )
    misfit = None
    if mode is not None and estimated:
        key = jax.random.PRNGKey(SEED + 4)
        misfit = laplace_check(key, estimator, whitening)
        if note := degenerate_mode_note(key, estimator, whitening, info):
            notes["degenerate_mode"] = note
    stage = ModeStage(
        potential, n, view, rows, MappingProxyType(notes), mode, whitening, anchor,
        mode_count, misfit, arguments,
    )  # fmt: skip
    return recentre(stage, options, lambda changed: mode_stage(changed, *arguments))


def setup(
    options: SetupOptions,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    *,
    stage: ModeStage | None = None,
) -> Setup:
    """The shared warmup for one data set (module docstring): one frozen :class:`Setup`.

    ``stage``: :func:`mode_stage` already computed for these arguments and options.

    Examples
    --------
    >>> from pplsamplers.datasets import tiny_linear
    >>> linear, (A, x) = tiny_linear()  # theta ~ N(0, I), x_i ~ N(a_i . theta, 3²), 2000 rows
    >>> result = setup(SetupOptions(linear), (A, x), {})
    >>> result.estimator.n < result.estimator.N, result.anchor is not None
    (True, True)
    """
    model_args, model_kwargs = tuple(model_args), dict(model_kwargs or {})
    if stage is None or not same_objects(stage.arguments, (model_args, model_kwargs)):
        stage = mode_stage(options, model_args, model_kwargs)
    potential, n, notes = stage.potential, stage.subsample_size, dict(stage.notes)
    if "degenerate_mode" in notes:
        _warn_degenerate(notes["degenerate_mode"])
    base, whitening, anchor = potential.estimator, stage.whitening, stage.anchor
    estimated = isinstance(options.precondition, str)
    structure = stage.structure
    hessian = None if structure is None else structure.likelihood_hessian
    if structure is not None:  # per-example gradient moments from the groups: O((p + k) n)
        base = base._replace(blocks=structure.blocks)
    target = NOISE_TARGET if structure is None else STRUCTURED_NOISE_TARGET
    probe = base if anchor is None else with_control_variate(base, anchor, hessian)
    batch_key = jax.random.PRNGKey(SEED + 2)
    mode, start_misfit = stage.mode, stage.laplace_misfit
    refine, suggested = False, None
    if structure is not None:
        notes["precondition"] += (
            f"; Laplace check: log-weight sd {stage.laplace_misfit:.2g}; kept by the chains"
        )
    elif mode is not None and estimated:  # step 4: a poor Laplace fit
        fitting = base
        if stage.laplace_misfit > MISFIT_THRESHOLD and (n is None or n < base.N):
            # the fit reads gradients at the batch size the noise target asks for at the
            # Laplace draws, or at the kernel's batch size where that is larger
            suggested = suggest_batch_size(batch_key, probe, whitening, target=target)
            fitting = _batched(base, max(suggested[0], n or 0), probe)
        center, factor, start_misfit, note = refine_laplace(
            jax.random.PRNGKey(SEED + 4), fitting, whitening, exact=base,
            misfit=stage.laplace_misfit,
        )  # fmt: skip
        notes["precondition"] += "; " + note
        refine, how = refinement(stage.laplace_misfit)
        notes["precondition"] += "; " + how
        replaced = center is not whitening.center  # the fit replaced the Laplace Gaussian
        suggested = None if replaced else suggested
        if replaced and anchor is not None and (n is None or n < base.N):
            anchor, probe = anchor_in_fit(base, anchor, center, options.control_variate, notes)
        whitening, mode = Whitening(center, factor), center
    if n is None:
        n, reason = suggested or suggest_batch_size(batch_key, probe, whitening, target=target)
        notes["subsample_size"] = f"{n} (automatic): {reason}"
    else:
        notes["subsample_size"] = f"{n}" + (" (full batch)" if n == base.N else "")
        if n < base.N and stage.mode is not None and options.precondition is not None:
            notes["subsample_size"] += check_batch_size(batch_key, probe, whitening, n, target)
    estimator = _batched(base, n, probe)
    if anchor is not None and n == base.N:
        anchor = None
        notes["control_variate"] = "off: full batch (exact gradients)"
    return Setup(
        potential=potential,
        estimator=estimator,
        whitening=whitening,
        whitened=options.precondition is not None,
        refine_metric=refine,
        mode=mode,
        anchor=anchor,
        mode_count=stage.mode_count,
        laplace_misfit=stage.laplace_misfit,
        notes=MappingProxyType(notes),
        view=stage.view,
        options=options,
        arguments=stage.arguments,
        structure=structure,
        start_misfit=start_misfit,
    )


__all__ = ["SEED", "ModeStage", "Setup", "mode_stage", "setup"]
