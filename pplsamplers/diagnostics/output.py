"""Output a user keeps: the end-of-run self-check, and ArviZ's DataTree with pplsamplers'
own attributes (the sampler, its set-up notes, the self-check, AutoSampler's decision)."""

from __future__ import annotations

from typing import Any

import arviz as az
import jax
import numpy as np

from pplsamplers.diagnostics.checks import SelfCheck, default_thin_to, self_check, warn
from pplsamplers.diagnostics.drift import kernel_check_arguments
from pplsamplers.diagnostics.fixes import model_hints
from pplsamplers.diagnostics.labelling import labelling_of, view_labels
from pplsamplers.diagnostics.names import site_names, site_shapes


def _kernel_of(sampler: Any) -> Any:
    """The pplsamplers kernel behind ``sampler`` (AutoSampler's delegate), or ``None``."""
    inner = getattr(sampler, "delegate", None) or sampler
    return inner if getattr(inner, "setup", None) is not None else None


def _rows(model_args: Any, model_kwargs: Any) -> int:
    """The most rows (leading length) of any array among a model's arguments (1 if none)."""
    leaves = jax.tree.leaves((model_args, model_kwargs))
    return max([int(np.shape(leaf)[0]) for leaf in leaves if np.ndim(leaf) >= 1] + [1])


def check_run(mcmc: Any, *, warn_user: bool = True, thin_to: int | None = None) -> SelfCheck | None:
    """Run the self-check (:func:`~pplsamplers.diagnostics.checks.self_check`) on a
    finished ``numpyro.infer.MCMC`` run of a pplsamplers kernel.

    The draws are mapped back to the model's flat unconstrained coordinates and checked with
    the model's full-data potential; rejected (non-finite) steps after warmup are counted per
    chain.  A failed check warns with one line (:class:`SelfCheckWarning`) unless
    ``warn_user=False``.  The result is also kept as ``mcmc.sampler.self_check_result``.
    AutoSampler's runs are checked whichever kernel it chose (full-data NUTS included, with
    NUTS's divergent transitions counted).  Returns ``None`` for any other kernel (NumPyro's
    own NUTS).  Where AutoSampler's NUTS run has no full-data potential to check against (a
    hard edge at the data, per-datum latents), the check is of convergence and chain health
    only, on the constrained draws, and says that the Stein check was skipped.

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        A ``numpyro.infer.MCMC`` that has run.
    warn_user : bool, default True
        Warn when the check fails.
    thin_to : int or None, default None
        Draws for the Stein check (one full-data pass each), spread over the chains; ``None``:
        :func:`~pplsamplers.diagnostics.checks.default_thin_to` of N (of the arguments' rows
        where the model has no data plate and its whole likelihood is one pass).

    Returns
    -------
    SelfCheck or None
        The check's result, or ``None`` for a kernel it does not apply to.

    Examples
    --------
    >>> result = check_run(mcmc)          # doctest: +SKIP
    >>> print("\\n".join(result.summary_lines()))   # doctest: +SKIP
    """
    kernel = _kernel_of(mcmc.sampler)
    full_data = getattr(mcmc.sampler, "full_data_potential", None)  # AutoSampler -> NUTS
    potential = kernel.setup.potential if kernel is not None else full_data and full_data()
    if potential is None and full_data is None:
        return None
    view = getattr(kernel.setup, "view", None) if kernel is not None else None
    samples = mcmc.get_samples(group_by_chain=True)
    first = next(iter(samples.values()))
    chains, draws = np.shape(first)[:2]
    names = None
    if potential is None:  # AutoSampler's NUTS without a full-data check: convergence only
        samples = {k: np.asarray(v) for k, v in sorted(samples.items())}
        names = site_names({k: v.shape[2:] for k, v in samples.items()})
        x = np.concatenate([v.reshape(chains, draws, -1) for v in samples.values()], axis=-1)
    else:
        flat = jax.tree.map(lambda a: a.reshape((chains * draws,) + a.shape[2:]), samples)
        x = jax.vmap(potential.unconstrain)(flat).reshape(chains, draws, potential.dim)
    relabel = labelling_of(kernel or getattr(mcmc.sampler, "delegate", None) or mcmc.sampler)
    if relabel is not None and kernel is None:  # AutoSampler's NUTS: x's layout is ours
        constrained = {k: v.shape[2:] for k, v in samples.items()}
        shapes = constrained if potential is None else site_shapes(potential)
        relabel = relabel._replace(shapes=shapes, constrained=potential is None)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    decision = getattr(mcmc.sampler, "decision", None)
    # a NUTS trajectory that crosses a hard edge at the data diverges by construction
    features = getattr(decision, "features", None)
    at_edge = kernel is None and bool(getattr(features, "edge_sites", ()))
    counts = {}
    if "diverging" in extra and not at_edge:  # NUTS's divergences, or our rejected steps
        key = "rejected" if kernel is not None else "divergent"
        counts[key] = np.asarray(extra["diverging"]).reshape(chains, -1).sum(-1)
    alternatives = ("another sampler", "AutoSampler")
    if decision is not None:  # an AutoSampler run: say what it chose, not "AutoSampler"
        alternatives = (f"another sampler than AutoSampler's choice '{decision.kernel}'",)
        if decision.strategy == "rules":
            alternatives += ("AutoSampler(strategy='pilot')",)
    if thin_to is None and potential is not None and potential.N <= 1:
        # no data plate: one "datum" is the whole data set; budget by its rows instead
        thin_to = default_thin_to(_rows(getattr(mcmc, "_args", ()), getattr(mcmc, "_kwargs", {})))
    result = self_check(
        x,
        potential,
        counts=counts,
        thin_to=thin_to,
        names=names,
        alternatives=alternatives,
        hints={} if view is None else model_hints(*view_labels(view.info)),
        constrained=potential is None,
        **kernel_check_arguments(kernel),
        relabel=relabel,
    )
    mcmc.sampler.self_check_result = result
    if warn_user:
        warn(result, stacklevel=3)
    return result


def to_arviz(mcmc: Any, *, check: bool = True, **kwargs: Any) -> Any:
    """``az.from_numpyro(mcmc)`` plus pplsamplers attributes: the kernel, its set-up notes
    (batch size, control variate, preconditioner, mode), the self-check's values (``check``)
    and AutoSampler's decision.

    ``kwargs`` go to :func:`arviz.from_numpyro` (e.g. ``log_likelihood=True`` for the
    pointwise full-data log-likelihood, which is N values per draw).

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        A ``numpyro.infer.MCMC`` that has run.
    check : bool, default True
        Run :func:`check_run` (which warns when the check fails) and add its values.
    **kwargs : Any
        Passed on to :func:`arviz.from_numpyro`.

    Returns
    -------
    DataTree
        ArviZ's conversion, with the pplsamplers attributes in its ``attrs``.

    Examples
    --------
    >>> idata = to_arviz(mcmc)                      # doctest: +SKIP
    >>> idata.attrs["self_check_passed"]            # doctest: +SKIP
    1
    """
    idata = az.from_numpyro(mcmc, **kwargs)
    sampler = mcmc.sampler
    idata.attrs["pplsamplers_kernel"] = type(sampler).__name__
    kernel = _kernel_of(sampler)
    if kernel is not None:
        idata.attrs.update({f"pplsamplers_{k}": v for k, v in kernel.setup.notes.items()})
    result = check_run(mcmc) if check else None
    if result is not None:
        idata.attrs.update(result.to_attrs())
    decision = getattr(sampler, "decision", None)
    if decision is not None:
        idata.attrs.update(decision.to_attrs())
    return idata


__all__ = ["check_run", "to_arviz"]
