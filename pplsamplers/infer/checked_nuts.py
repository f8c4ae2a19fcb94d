"""NumPyro's NUTS with the self-check inside ``MCMC.run``, as the pplsamplers kernels have it.

A run that AutoSampler (or ``--sampler nuts``) hands to NUTS can miss too: a chain caught in a
minor mode, a funnel's neck it cannot enter.  :class:`CheckedNUTS` is ``numpyro.infer.NUTS``
whose state also carries a :class:`~pplsamplers.infer.monitor.Monitor`: after warmup every
``stride``-th draw is kept with its score, and at the run's last draw the kept draws are
checked (:func:`~pplsamplers.diagnostics.checks.self_check`) and a failed check warns in one
line, before ``get_samples``, ``print_summary`` or ``az.from_numpyro`` can read the run.

NUTS computes the exact full-data gradient of the potential at every draw (``z_grad``), so the
scores cost nothing and the Stein identities are checked exactly; divergent transitions after
warmup are counted.  Where the density has a hard edge at the data (``check_support``), the
Stein identities do not hold, and every trajectory that crosses the edge diverges although the
draws are right: only convergence and chain health are checked.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.infer import NUTS
from numpyro.infer.hmc import HMCState
from numpyro.util import is_prng_key

from pplsamplers.diagnostics.labelling import Labelling
from pplsamplers.diagnostics.names import site_names
from pplsamplers.infer.monitor import (
    Monitor,
    Reporter,
    RunPlan,
    driving_mcmc,
    empty_monitor,
    plan_exact,
    report_at_last_draw,
)
from pplsamplers.model import labelled_sites

CheckedState = namedtuple("CheckedState", HMCState._fields + ("monitor",))
"""NumPyro's ``HMCState`` and the run's :class:`~pplsamplers.infer.monitor.Monitor` (``None``
when the run is not checked): every field NumPyro reads (``z``, ``diverging``, ...) is there."""


class CheckedNUTS(NUTS):
    """``numpyro.infer.NUTS`` that checks its own run and warns when it missed.

    Parameters
    ----------
    model : callable or None, default None
        The NumPyro model.
    exact_scores : bool, default True
        Check the Stein identities with NUTS's gradients (``False`` where the density has a
        hard edge at the data: convergence and chain health only).
    self_check : bool, default True
        Check the run at its last draw (``False``: NumPyro's NUTS exactly).
    **options : Any
        ``numpyro.infer.NUTS``'s options.

    Examples
    --------
    >>> import jax, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> def model():
    ...     numpyro.sample("x", dist.Normal(0.0, 1.0))
    >>> mcmc = MCMC(CheckedNUTS(model), num_warmup=200, num_samples=400, progress_bar=False)
    >>> mcmc.run(jax.random.PRNGKey(0))
    >>> mcmc.sampler.self_check_result.passed
    True
    """

    def __init__(
        self,
        model: Callable | None = None,
        *,
        exact_scores: bool = True,
        self_check: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(model, **options)
        self.exact_scores = exact_scores
        self.self_check = self_check
        self.check_alternatives: tuple[str, ...] = ("another sampler", "AutoSampler")
        self.self_check_result = None
        self._plan: RunPlan | None = None
        self._report: Reporter | None = None
        self.labelling: Labelling | None = None  # a mixture's components, ordered before R-hat

    def init(
        self,
        rng_key: Any,
        num_warmup: int,
        init_params: Any = None,
        model_args: tuple = (),
        model_kwargs: dict | None = None,
    ) -> CheckedState:
        mcmc = driving_mcmc()
        state = super().init(rng_key, num_warmup, init_params, model_args, model_kwargs or {})
        chains = () if is_prng_key(rng_key) else (jnp.shape(state.i)[0],)
        one = jax.tree.map(lambda a: a[0], state.z) if chains else state.z
        flat = ravel_pytree(one)[0]
        plan = plan_exact(mcmc, flat.size) if self.self_check else None
        if plan != self._plan or self._report is None:  # one Reporter for the run's chains
            shapes = {site: jnp.shape(v) for site, v in one.items()}
            names = site_names(shapes)
            self.labelling = _labelling(self.model, model_args, model_kwargs or {}, shapes)
            self._report = Reporter(plan, tuple(names), self) if plan is not None else None
        self._plan, monitor = plan, None
        if plan is not None:
            empty = empty_monitor(plan, flat.size, flat.dtype)
            monitor = jax.tree.map(lambda a: jnp.broadcast_to(a, chains + a.shape), empty)
        return CheckedState(*state, monitor)

    def sample(self, state: CheckedState, model_args: tuple, model_kwargs: dict) -> CheckedState:
        hmc_state = HMCState(*state[: len(HMCState._fields)])
        new = super().sample(hmc_state, model_args, model_kwargs)
        plan, monitor = self._plan, state.monitor
        if plan is None or monitor is None:
            return CheckedState(*new, monitor)
        chains = jnp.ndim(new.i) > 0  # NumPyro's vectorized chains step together
        keep = partial(_keep, plan)
        monitor = (jax.vmap(keep) if chains else keep)(new, monitor)
        post = (new.i[0] if chains else new.i) - 1 - plan.num_warmup
        batched = monitor if chains else jax.tree.map(lambda a: a[None], monitor)
        last = report_at_last_draw(plan, post, batched, batched.rejected, self._report_draws)
        return CheckedState(*new, monitor._replace(rejected=jnp.where(last, 0, monitor.rejected)))

    def _report_draws(
        self, draws: Any, scores: Any, values: Any, noise: Any, divergent: Any, capped: Any
    ) -> None:
        if self._report is None:
            return
        if self.exact_scores:
            self._report(draws, scores, values, noise, divergent, capped, counted="divergent")
        else:  # a trajectory that crosses the edge diverges by construction: not counted
            self._report(draws, None, None, None, divergent, capped, counted=None)


def _labelling(model: Any, model_args: tuple, model_kwargs: dict, shapes: dict) -> Any:
    """The :class:`~pplsamplers.diagnostics.labelling.Labelling` of an unordered mixture's
    components in NUTS's unconstrained coordinates (``None``: nothing labelled, or no model)."""
    if model is None:
        return None
    try:
        seeded = handlers.seed(model, jax.random.key(0))
        sites = labelled_sites(handlers.trace(seeded).get_trace(*model_args, **model_kwargs))
    except Exception:  # noqa: BLE001 - a model NUTS runs but a plain trace cannot: no ordering
        return None
    return Labelling(sites, shapes) if sites else None


def _keep(plan: RunPlan, state: HMCState, monitor: Monitor) -> Monitor:
    """Keep one chain's draw, exact score (s = −∇U) and U at every ``stride``-th draw after
    warmup, and count its divergent transitions."""
    post = state.i - 1 - plan.num_warmup
    kept = (post >= 0) & (post % plan.stride == plan.stride - 1)
    slot = (jnp.maximum(post, 0) // plan.stride) % plan.kept
    x, score = ravel_pytree(state.z)[0], -ravel_pytree(state.z_grad)[0]
    draws = monitor.draws.at[slot].set(jnp.where(kept, x, monitor.draws[slot]))
    scores = monitor.scores.at[slot].set(jnp.where(kept, score, monitor.scores[slot]))
    u = state.potential_energy.astype(monitor.values.dtype)
    values = monitor.values.at[slot].set(jnp.where(kept, u, monitor.values[slot]))
    rejected = monitor.rejected + ((post >= 0) & state.diverging).astype(jnp.int32)
    return monitor._replace(draws=draws, scores=scores, values=values, rejected=rejected)


__all__ = ["CheckedNUTS", "CheckedState"]
