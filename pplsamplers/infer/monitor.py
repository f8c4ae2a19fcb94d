"""The self-check inside NumPyro's own workflow: a run that misses warns as it ends.

NumPyro's ``MCMC.run`` gives a kernel no hook after its last draw, and ``get_samples``,
``print_summary`` and ``az.from_numpyro`` read the collected draws without the kernel.  So the
kernel checks itself from inside the sampling program:

* at ``init`` it finds the ``numpyro.infer.MCMC`` that drives it (:func:`driving_mcmc`: the
  caller's frames) and reads how many draws the run will make (:class:`RunPlan`);
* after warmup, every ``stride``-th draw of each chain is kept in the state with its score,
  an unbiased minibatch estimate of −∇U at the draw, and the same minibatch's estimate of U
  with its sd (:class:`Monitor`; U finds draws outside the typical set,
  :mod:`~pplsamplers.diagnostics.typical_set`);
* a PDMP's sample intervals cut short at its event cap are counted: when most of the first
  :data:`CAPPED_CHECK_DRAWS` warmup draws were, the run warns at once (it will be slow and
  wrong, and the user should not wait for its end), and after warmup they count against it;
* at the last draw of the run a ``jax.debug.callback`` hands the kept draws to
  :class:`Reporter`, which runs :func:`~pplsamplers.diagnostics.checks.self_check` on them and
  warns in one line when the run failed it, before any of the run's results can be read.

The Stein identities E[s] = 0 and E[(x − E x) sᵀ] = −I hold for any unbiased score, so the
minibatch scores keep the check unbiased; their noise widens its Monte Carlo error, which the
check's thresholds scale with.  The scores' batch is sized so that the check spends about
:data:`SCORE_BUDGET` datum evaluations, a small part of a run.
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from pplsamplers.diagnostics.checks import SelfCheck, SelfCheckWarning, self_check
from pplsamplers.diagnostics.drift import kernel_check_arguments
from pplsamplers.diagnostics.fixes import model_hints
from pplsamplers.diagnostics.labelling import labelling_of, view_labels
from pplsamplers.estimator import Estimator, with_batch_size
from pplsamplers.types import Array, PRNGKey

KEPT_DRAWS = 200
"""Draws per chain the check keeps at least, where the run has them (evenly spread over it)."""
KEPT_CHAIN_VALUES = 20_000
"""Coordinates of one chain's kept draws: a model of D < 100 keeps more than
:data:`KEPT_DRAWS` draws, up to every draw, so that its check's Monte Carlo error is that of
the whole run (a small model's few coordinates cost nothing to keep)."""
KEPT_VALUES = 4_000_000
"""Numbers (draws and scores of every chain) the check keeps at most: in high dimension it
keeps fewer draws."""
SCORE_BUDGET = 20_000_000
"""Datum evaluations the scores of one run's kept draws may spend."""
CAPPED_CHECK_DRAWS = 20
"""Warmup draws after which a PDMP run warns if at least half of its sample intervals so far
stopped at the event cap (or at warmup's end, if it is shorter)."""


class RunPlan(NamedTuple):
    """What the driving ``MCMC`` will run, read at ``init`` (static)."""

    num_warmup: int
    num_samples: int
    num_chains: int
    stride: int
    """Draws between two kept ones."""
    kept: int
    """Draws kept per chain and run."""
    score_batch: int
    """Minibatch of each score."""


class Monitor(NamedTuple):
    """Per chain: the kept draws (model coordinates x), their scores, U and its estimate's
    sd at each, the steps rejected since warmup, and a PDMP's capped sample intervals
    (module docstring)."""

    draws: Array
    scores: Array
    values: Array
    noise: Array
    rejected: Array
    capped: Array


def driving_mcmc() -> MCMC | None:
    """The ``numpyro.infer.MCMC`` whose ``run`` or ``warmup`` called this, found in the calling
    frames (NumPyro passes a kernel neither the number of draws nor the ``MCMC``); ``None``
    when the kernel is driven otherwise."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, MCMC):
            return candidate
        frame = frame.f_back
    return None


def check_fields(mcmc: MCMC | None, state_type: type) -> None:
    """Raise a clear error when the run asks NumPyro for ``extra_fields`` that the sampler's
    state lacks (NumPyro's own error does not name them)."""
    frame, asked = sys._getframe(1), ()
    while frame is not None:
        if frame.f_code.co_name in ("run", "warmup") and frame.f_locals.get("self") is mcmc:
            asked = tuple(frame.f_locals.get("extra_fields") or ())
            break
        frame = frame.f_back
    fields = set(state_type._fields)
    unknown = [f for f in asked if not f.startswith("~") and f.split(".")[0] not in fields]
    if mcmc is not None and unknown:
        raise ValueError(
            f"extra_fields {unknown} are not fields of this sampler's state; it has "
            f"{sorted(fields)}."
        )


def plan_run(mcmc: MCMC | None, estimator: Estimator) -> RunPlan | None:
    """The :class:`RunPlan` of ``mcmc`` for an ``estimator`` of D = ``dim`` (``None``: no plan,
    no check)."""
    plan = plan_exact(mcmc, estimator.dim)
    if plan is None:
        return None
    chains, kept = plan.num_chains, plan.kept
    every = estimator.N if estimator.N * kept * chains <= SCORE_BUDGET else 0
    batch = every or min(estimator.N, max(estimator.n, SCORE_BUDGET // (kept * chains)))
    return plan._replace(score_batch=batch)


def plan_exact(mcmc: MCMC | None, dim: int) -> RunPlan | None:
    """The :class:`RunPlan` of ``mcmc`` for a D = ``dim`` sampler whose steps give the exact
    score (NUTS: ``score_batch`` is 0, no minibatch is drawn); ``None``: no plan, no check."""
    if mcmc is None or mcmc.num_samples < 4 or dim < 1:
        return None
    chains = int(mcmc.num_chains)
    wanted = max(KEPT_DRAWS, KEPT_CHAIN_VALUES // dim)
    kept = min(wanted, mcmc.num_samples, max(20, KEPT_VALUES // (2 * dim * chains)))
    kept = max(min(kept, mcmc.num_samples), 4)
    stride = mcmc.num_samples // kept
    kept = mcmc.num_samples // stride
    return RunPlan(int(mcmc.num_warmup), int(mcmc.num_samples), chains, stride, kept, 0)


def empty_monitor(plan: RunPlan, dim: int, dtype: Any) -> Monitor:
    """Nothing kept yet."""
    zeros, count = jnp.zeros((plan.kept, dim), dtype), jnp.zeros((), jnp.int32)
    values = jnp.zeros(plan.kept, dtype)
    return Monitor(zeros, zeros, values, values, count, count)


def score_estimator(estimator: Estimator, plan: RunPlan) -> Estimator:
    """The estimator of the scores: the run's own (model coordinates, control variate) at the
    plan's batch."""
    return with_batch_size(estimator, plan.score_batch)


def keep_draw(
    monitor: Monitor, plan: RunPlan, estimator: Estimator, x: Array, post: Array, key: PRNGKey
) -> Monitor:
    """``monitor`` with the draw x (post-warmup draw number ``post``), its score, and U with
    its estimate's sd kept, all from one minibatch."""
    idx = estimator.sample_indices(key)
    (u, per_datum), gradient = jax.value_and_grad(estimator.value_and_terms, has_aux=True)(x, idx)
    noise = jnp.sqrt(estimator.noise_variance(per_datum))
    slot = (post // plan.stride) % plan.kept
    return monitor._replace(
        draws=monitor.draws.at[slot].set(x),
        scores=monitor.scores.at[slot].set(-gradient),
        values=monitor.values.at[slot].set(u),
        noise=monitor.noise.at[slot].set(noise),
    )


def report_at_last_draw(
    plan: RunPlan, post: Array, monitor: Monitor, rejected: Array, report: Any
) -> Array:
    """Hand the kept draws, their scores, U and its sd, ``rejected`` and the capped intervals
    (leading chain axis) to ``report`` from inside the sampling program if ``post`` (the
    post-warmup draw number) is the run's last draw; returns whether it was."""
    last = (post >= 0) & ((post + 1) % plan.num_samples == 0)
    jax.lax.cond(
        last,
        lambda m, r: jax.debug.callback(report, m.draws, m.scores, m.values, m.noise, r, m.capped),
        lambda m, r: None,
        monitor,
        rejected,
    )
    return last


def count_capped(
    plan: RunPlan, iteration: Array, monitor: Monitor, capped: Array, warn_early: Any
) -> Monitor:
    """``monitor`` (leading chain axis) with this draw's capped intervals ``capped`` (per
    chain) counted: at warmup draw :data:`CAPPED_CHECK_DRAWS` (or warmup's last) the count
    so far and the draws it was counted over (summed over the chains) go to ``warn_early``
    when it is at least half of them, and at warmup's end the count restarts, so that the
    run's check counts only the draws it keeps."""
    count = monitor.capped + capped.astype(jnp.int32)
    check_at = min(CAPPED_CHECK_DRAWS, plan.num_warmup or CAPPED_CHECK_DRAWS) - 1
    mostly = 2 * jnp.sum(count) >= (check_at + 1) * count.shape[0]
    jax.lax.cond(
        (iteration == check_at) & mostly,
        lambda c: jax.debug.callback(warn_early, jnp.sum(c), (check_at + 1) * c.shape[0]),
        lambda c: None,
        count,
    )
    restart = iteration == plan.num_warmup - 1
    return monitor._replace(capped=jnp.where(restart, 0, count))


class Reporter:
    """Runs the self-check on a run's kept draws when the sampling program reports them, and
    warns in one line when it fails.  Chains that report separately (NumPyro's sequential and
    parallel chains) are checked together once all have reported."""

    def __init__(self, plan: RunPlan, names: tuple[str, ...], owner: Any) -> None:
        self.plan, self.names, self.owner = plan, names, owner
        self._pending: list[tuple[np.ndarray, ...]] = []
        self._lock = threading.Lock()

    def __call__(
        self,
        draws: Array,
        scores: Array | None,
        values: Array | None,
        noise: Array | None,
        rejected: Array,
        capped: Array,
        counted: str | None = "rejected",
    ) -> None:
        """Check the kept ``draws`` (chains, kept, D) with their ``scores`` (``None``: no Stein
        check), U at them ``values`` and its estimate's sd ``noise`` (``None``: not known)
        once every chain has reported; ``rejected``: per chain, the steps to count as
        ``counted`` (rejected steps, or NUTS's divergent transitions; ``None``: not counted);
        ``capped``: per chain, a PDMP's sample intervals cut short at its event cap."""
        scores = np.full_like(draws, np.nan) if scores is None else scores
        values = np.full(np.shape(draws)[:2], np.nan) if values is None else values
        noise = np.zeros(np.shape(draws)[:2]) if noise is None else noise
        with self._lock:
            given = (draws, scores, values, noise, rejected, capped)
            self._pending.append(tuple(np.asarray(a) for a in given))
            if sum(len(block[0]) for block in self._pending) < self.plan.num_chains:
                return
            blocks, self._pending = self._pending, []
        draws, scores, values, noise, rejected, capped = (
            np.concatenate(parts) for parts in zip(*blocks, strict=True)
        )
        counts = {counted: rejected} if counted else {}
        if np.any(capped):
            counts["capped"] = capped
        result = self_check(
            draws,
            None,
            scores=None if np.isnan(scores).all() else scores,
            names=self.names,
            counts=counts,
            counted_draws=self.plan.num_samples,
            alternatives=getattr(self.owner, "check_alternatives", ("another sampler",)),
            hints=kernel_hints(self.owner),
            **kernel_check_arguments(self.owner),
            relabel=labelling_of(self.owner),
            values=values,
            value_noise=noise,
        )
        self.owner.self_check_result = result
        if not result.passed:
            # called from the sampling program: no frame of the user's to point at
            warnings.warn(result.warning, SelfCheckWarning, stacklevel=1)

    def warn_capped(self, count: Array, draws: Array) -> None:
        """Warn at once that ``count`` of the first ``draws`` warmup draws' sample intervals
        (summed over the chains) stopped at the event cap (:func:`count_capped`)."""
        name = type(self.owner).__name__
        message = (
            f"pplsamplers: {name}'s sample intervals stopped at the event cap "
            f"(max_events_per_sample) in {int(count)} of the first {int(draws)} warmup draws: the "
            "chains are where the posterior curves far more sharply than the sampler's "
            "reference (a funnel's neck, a degenerate mode), so this run will be slow and its "
            "draws wrong. Try: AutoSampler / NUTS / a non-centred parameterisation"
        )
        warnings.warn(message, SelfCheckWarning, stacklevel=1)


def kernel_hints(kernel: Any) -> dict[str, tuple[str, ...]]:
    """The self-check's fixes that come from the model a pplsamplers ``kernel`` was set up
    for (:func:`~pplsamplers.diagnostics.checks.model_hints`; none before its set-up)."""
    view = getattr(getattr(kernel, "setup", None), "view", None)
    return {} if view is None else model_hints(*view_labels(view.info))


def last_result(owner: Any) -> SelfCheck | None:
    """The self-check of ``owner``'s last run, or ``None``."""
    return getattr(owner, "self_check_result", None)


__all__ = [
    "CAPPED_CHECK_DRAWS",
    "KEPT_CHAIN_VALUES",
    "KEPT_DRAWS",
    "SCORE_BUDGET",
    "Monitor",
    "Reporter",
    "RunPlan",
    "check_fields",
    "count_capped",
    "driving_mcmc",
    "empty_monitor",
    "keep_draw",
    "kernel_hints",
    "last_result",
    "plan_exact",
    "plan_run",
    "report_at_last_draw",
    "score_estimator",
]
