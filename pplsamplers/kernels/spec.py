"""What a sampler declares to the NumPyro adapter: a :class:`KernelSpec`.

A sampler is a pure kernel in BlackJAX's two levels (``init`` and ``build_kernel``) plus a
:class:`KernelSpec` that says how to start it, which tunables it begins with, and how its own
warmup moves them.  Every callable is pure and traceable; kernels see only an
:class:`~pplsamplers.estimator.Estimator` and a :class:`WarmupContext`, never a model:

* ``init(rng_key, position, estimator, params) -> State``
* ``kernel(rng_key, state, estimator, params) -> (State, Info)``, from ``build_kernel()``
* ``default_params(rng_key, estimator, context) -> Params``: the tunables' starting values;
  the shared warmup has whitened the estimator, so unit-scale defaults are right there;
* ``warmup_init(state, params) -> AdaptState`` and ``warmup(rng_key, state, params,
  adapt_state, info, estimator, window) -> (State, Params, AdaptState)``: one update after each
  warmup step.  The adapter stops calling it when warmup ends, which freezes the params.  It
  may return a new state, for kernels that carry something derived from the params (a PDMP's
  thinning envelope).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp

from pplsamplers.estimator import Estimator
from pplsamplers.types import Array, PRNGKey

Kernel = Callable[[PRNGKey, Any, Estimator, Any], tuple[Any, Any]]


class WarmupWindow(NamedTuple):
    """Where a warmup update happens: ``iteration`` (0-based, traced) of ``num_warmup``;
    ``settled``: the first iteration whose coordinates the chains' metric refinement
    (:mod:`pplsamplers.warmup.metric`) no longer changes (0 when the metric is fixed)."""

    iteration: Array
    num_warmup: int
    settled: int = 0


class WarmupContext(NamedTuple):
    """What the shared warmup tells a kernel's ``default_params`` and ``start``, in the
    kernel's coordinates z (x = c + L z).

    Attributes
    ----------
    init_position
        A valid starting point.
    mode
        The Gaussian approximation's centre (the mode), or ``None`` where none was searched.
    anchor
        The control variate's anchor, or ``None``.
    whitening
        The map x = c + L z from the kernel's coordinates to the model's flat unconstrained
        ones (``to_x``, ``to_z``, ``matrix()`` for L itself).  An option given over the
        model's x maps through it (a metric G becomes Lᵀ G L).
    whitened
        Whether the estimator runs in whitened coordinates, where the posterior has about
        unit scale.
    curvature
        U's curvature along each coordinate z at the centre where the set-up knows it
        cheaply (a structured model), else ``None``: a kernel then computes it, D
        Hessian-vector products.
    """

    init_position: Array
    mode: Array | None
    anchor: Array | None
    whitening: Any
    whitened: bool
    curvature: Array | None = None

    def curvature_at(self, position: Array | None) -> Array | None:
        """:attr:`curvature` where ``position`` is the mode it was computed at, else ``None``."""
        same = position is not None and self.mode is not None
        if same and self.curvature is not None and bool(jnp.array_equal(position, self.mode)):
            return self.curvature
        return None

    @property
    def dtype(self) -> Any:
        return self.init_position.dtype


def no_warmup_init(state: Any, params: Any) -> None:
    """``warmup_init`` of a sampler that adapts nothing."""
    return None


def position_field(state: Any) -> Array:
    """The flat (whitened) position of a kernel state with a ``position`` field."""
    return state.position


class KernelSpec(NamedTuple):
    """A sampler's declaration to the adapter (:class:`~pplsamplers.infer.SubsampledKernel`).

    Attributes
    ----------
    init
        ``(rng_key, position, estimator, params) -> State``.
    build_kernel
        ``() -> kernel`` with the structural options bound.
    default_params
        ``(rng_key, estimator, context) -> Params``.
    warmup
        ``(rng_key, state, params, adapt_state, info, estimator, window) -> (State, Params,
        AdaptState)``, or ``None`` when the sampler adapts nothing of its own.
    warmup_init
        ``(state, params) -> AdaptState``.
    diagnostic_fields
        ``Info`` fields exported to NumPyro's extra fields and ArviZ's ``sample_stats``.
    describe
        ``Info -> str`` for the progress bar (fields may carry a chain axis), or ``None``.
    position
        ``State -> flat position``.
    start
        ``(rng_key, estimator, params, context) -> position`` where the sampler has its own
        starting point (the Boomerang's reference mean), or ``None`` for the adapter's.
    chains_in_turn
        Vectorised chains step one after the other (``lax.map``) instead of as one batched
        program: for event-driven kernels, whose batched step would run both branches of
        every ``cond`` and every chain's loops as long as the slowest's.
    steps_per_sample
        Kernel steps per draw by default.
    steps_per_sample_at
        ``dim -> steps per draw``, the default instead of ``steps_per_sample`` where the
        automatic step shrinks with the dimension; ``None``: the fixed one.
    stabilize
        ``Params -> Params``, warmup's answer to a divergent step (not finite, or a jump of
        more than :data:`~pplsamplers.kernels.sgmcmc.step_size.DIVERGENT_JUMP` √D in whitened
        coordinates): the step is rejected and the params made more cautious.  ``None``: a
        step is rejected only when it is not finite (event-driven kernels travel far).
    moved_point
        ``State -> flat position`` the next step moves, from which its jump is measured;
        ``None``: the state's position (HAMCMC moves θ_{t−M}, another sub-chain's state).
    exact
        The kernel targets the posterior exactly given exact gradients; ``False`` for a
        fixed-step discretisation, whose bias the self-check must see (its ``exact``).
    needs_mode
        ``default_params`` or ``start`` read :attr:`WarmupContext.mode`: the shared warmup
        searches for it whatever the other options.
    """

    init: Callable[[PRNGKey, Array, Estimator, Any], Any]
    build_kernel: Callable[[], Kernel]
    default_params: Callable[[PRNGKey, Estimator, WarmupContext], Any]
    warmup: Callable[..., tuple[Any, Any, Any]] | None = None
    warmup_init: Callable[[Any, Any], Any] = no_warmup_init
    diagnostic_fields: tuple[str, ...] = ("data_evals",)
    describe: Callable[[Any], str] | None = None
    position: Callable[[Any], Array] = position_field
    start: Callable[[PRNGKey, Estimator, Any, WarmupContext], Array | None] | None = None
    chains_in_turn: bool = False
    steps_per_sample: int = 1
    steps_per_sample_at: Callable[[int], int] | None = None
    stabilize: Callable[[Any], Any] | None = None
    moved_point: Callable[[Any], Array] | None = None
    needs_mode: bool = False
    exact: bool = True

    def steps_at(self, dim: int) -> int:
        """Kernel steps per draw in ``dim`` dimensions."""
        return (
            self.steps_per_sample
            if self.steps_per_sample_at is None
            else (self.steps_per_sample_at(dim))
        )


__all__ = [
    "Kernel",
    "KernelSpec",
    "WarmupContext",
    "WarmupWindow",
    "no_warmup_init",
    "position_field",
]
