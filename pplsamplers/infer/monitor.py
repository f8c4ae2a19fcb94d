"""The self-check inside NumPyro's own workflow: a run that misses warns as it ends.

NumPyro's ``MCMC.run`` gives a kernel no hook after its last draw, and ``get_samples``,
``print_summary`` and ``az.from_numpyro`` read the collected draws without the kernel.  So the
kernel checks itself from inside the sampling program:

* at ``init`` it finds the ``numpyro.infer.MCMC`` that drives it (:func:`driving_mcmc`: the
  caller's frames) and reads how many draws the run will make (:class:`RunPlan`);
* after warmup, every ``stride``-th draw of each chain is kept in the state with its score,
  an unbiased minibatch estimate of −∇U at the draw (:class:`Monitor`);
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
from pplsamplers.estimator import Estimator, with_batch_size
from pplsamplers.types import Array, PRNGKey

KEPT_DRAWS = 200
"""Draws per chain the check keeps at most (evenly spread over the run)."""
KEPT_VALUES = 4_000_000
"""Numbers (draws and scores of every chain) the check keeps at most: in high dimension it
keeps fewer draws."""
SCORE_BUDGET = 20_000_000
"""Datum evaluations the scores of one run's kept draws may spend."""


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
    """Per chain: the kept draws (model coordinates x), their scores, and the steps rejected
    since warmup."""

    draws: Array
    scores: Array
    rejected: Array


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
    kept = min(KEPT_DRAWS, mcmc.num_samples, max(20, KEPT_VALUES // (2 * dim * chains)))
    kept = max(min(kept, mcmc.num_samples), 4)
    stride = mcmc.num_samples // kept
    kept = mcmc.num_samples // stride
    return RunPlan(int(mcmc.num_warmup), int(mcmc.num_samples), chains, stride, kept, 0)


def empty_monitor(plan: RunPlan, dim: int, dtype: Any) -> Monitor:
    """Nothing kept yet."""
    zeros = jnp.zeros((plan.kept, dim), dtype)
    return Monitor(zeros, zeros, jnp.zeros((), jnp.int32))


def score_estimator(estimator: Estimator, plan: RunPlan) -> Estimator:
    """The estimator of the scores: the run's own (model coordinates, control variate) at the
    plan's batch."""
    return with_batch_size(estimator, plan.score_batch)


def keep_draw(
    monitor: Monitor, plan: RunPlan, estimator: Estimator, x: Array, post: Array, key: PRNGKey
) -> Monitor:
    """``monitor`` with the draw x (post-warmup draw number ``post``) and its score kept."""
    idx = estimator.sample_indices(key)
    score = -estimator.grad(x, idx)
    slot = (post // plan.stride) % plan.kept
    return monitor._replace(
        draws=monitor.draws.at[slot].set(x), scores=monitor.scores.at[slot].set(score)
    )


def report_at_last_draw(
    plan: RunPlan, post: Array, monitor: Monitor, rejected: Array, report: Any
) -> Array:
    """Hand the kept draws, their scores and ``rejected`` (leading chain axis) to ``report``
    from inside the sampling program if ``post`` (the post-warmup draw number) is the run's
    last draw; returns whether it was."""
    last = (post >= 0) & ((post + 1) % plan.num_samples == 0)
    jax.lax.cond(
        last,
        lambda m, r: jax.debug.callback(report, m.draws, m.scores, r),
        lambda m, r: None,
        monitor,
        rejected,
    )
    return last


class Reporter:
    """Runs the self-check on a run's kept draws when the sampling program reports them, and
    warns in one line when it fails.  Chains that report separately (NumPyro's sequential and
    parallel chains) are checked together once all have reported."""

    def __init__(self, plan: RunPlan, names: tuple[str, ...], owner: Any) -> None:
        self.plan, self.names, self.owner = plan, names, owner
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._lock = threading.Lock()

    def __call__(
        self, draws: Array, scores: Array | None, rejected: Array, counted: str | None = "rejected"
    ) -> None:
        """Check the kept ``draws`` (chains, kept, D) with their ``scores`` (``None``: no Stein
        check) once every chain has reported; ``rejected``: per chain, the steps to count as
        ``counted`` (rejected steps, or NUTS's divergent transitions; ``None``: not counted)."""
        scores = np.full_like(draws, np.nan) if scores is None else scores
        with self._lock:
            self._pending.append(tuple(np.asarray(a) for a in (draws, scores, rejected)))
            if sum(len(d) for d, _, _ in self._pending) < self.plan.num_chains:
                return
            blocks, self._pending = self._pending, []
        draws, scores, rejected = (np.concatenate(parts) for parts in zip(*blocks, strict=True))
        result = self_check(
            draws,
            None,
            scores=None if np.isnan(scores).all() else scores,
            names=self.names,
            counts={counted: rejected} if counted else {},
            counted_draws=self.plan.num_samples,
            alternatives=getattr(self.owner, "check_alternatives", ("another sampler",)),
        )
        self.owner.self_check_result = result
        if not result.passed:
            # called from the sampling program: no frame of the user's to point at
            warnings.warn(result.warning, SelfCheckWarning, stacklevel=1)


def last_result(owner: Any) -> SelfCheck | None:
    """The self-check of ``owner``'s last run, or ``None``."""
    return getattr(owner, "self_check_result", None)


__all__ = [
    "KEPT_DRAWS",
    "SCORE_BUDGET",
    "Monitor",
    "Reporter",
    "RunPlan",
    "check_fields",
    "driving_mcmc",
    "empty_monitor",
    "keep_draw",
    "last_result",
    "plan_exact",
    "plan_run",
    "report_at_last_draw",
    "score_estimator",
]
