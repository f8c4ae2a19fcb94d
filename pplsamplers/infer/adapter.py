"""The one NumPyro ``MCMCKernel`` adapter for every pplsamplers sampler (DESIGN §3.3).

:class:`SubsampledKernel` drives any sampler declared by a
:class:`~pplsamplers.infer.spec.KernelSpec`.  It owns everything NumPyro-facing, once:

* the model is inspected once and turned into a potential, and the shared warmup of
  :mod:`pplsamplers.infer.warmup` (mode, preconditioner, control variate, batch size) runs
  once per data set;
* the state is a NamedTuple with ``rng_key`` (``post_warmup_state`` and ``last_state`` work),
  the three chain methods, ``postprocess_fn`` to constrained values, and the full-data
  ``model`` view that ArviZ reads ``observed_data`` and ``log_likelihood`` from;
* a step whose result is not finite (a NaN, or a step into a region of zero density) is
  rejected: the chain stays where it was, ``diverging`` flags the draw (NumPyro's
  ``print_summary`` counts it) and ``num_reverted`` counts it for the self-check;
* the sampler's own warmup moves its ``params`` during warmup and is not called afterwards,
  which freezes them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from pplsamplers import validation
from pplsamplers.cache import enable_compilation_cache
from pplsamplers.infer import metric as metrics
from pplsamplers.infer.spec import DIVERGENT_JUMP, KernelSpec, WarmupWindow, gradient_clip_norm
from pplsamplers.infer.warmup import (
    Prepared,
    SamplerOptions,
    prepare,
    starting_point,
)
from pplsamplers.potential import (
    SubsampledPotential,
    is_concrete,
    mesh_sharded,
    same_objects,
    whiten,
    with_clipped_gradient,
)
from pplsamplers.potential.sharding import chain_sharding
from pplsamplers.types import Array, PRNGKey


class SamplerState(NamedTuple):
    """State of every pplsamplers NumPyro kernel.

    ``z`` is the unconstrained sample (a dict of the model's sites), ``kernel_state`` the
    kernel's state (in the kernel's, possibly whitened, coordinates), ``params`` its
    tunables, ``info`` its last ``Info``, whose fields are readable as attributes of the
    state itself (``state.data_evals``): that is how NumPyro's ``extra_fields`` and ArviZ's
    ``sample_stats`` find them.  ``reverted`` flags a draw in which a step's result was not
    finite (or, for the step-size kernels, divergent) and was therefore rejected
    (``diverging`` is the same flag under NumPyro's name); ``num_reverted`` counts such
    draws.  ``metric`` is the chain's own whitening x = c + L z,
    which warmup refines from the chain's draws (``metric_stats``: the current window's).
    """

    z: Any
    kernel_state: Any
    params: Any
    adapt_state: Any
    info: Any
    iteration: Array
    reverted: Array
    num_reverted: Array
    rng_key: Array
    metric: metrics.Metric
    metric_stats: metrics.MetricStats | None

    @property
    def diverging(self) -> Array:
        """NumPyro's name for a rejected non-finite step (``print_summary`` counts it)."""
        return self.reverted

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(tuple.__getitem__(self, 4), name)


def _finite(tree: Any) -> Array:
    leaves = [
        jnp.all(jnp.isfinite(leaf))
        for leaf in jax.tree.leaves(tree)
        if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _zeros(shapes: Any) -> Any:
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def model_time_averages(info: Any, center: Array, factor: Array) -> Any:
    """A PDMP's exact interval averages of z and z² (SBPS eq. 19) mapped to x = c + L z.

    The mean maps exactly.  The average of x² needs the interval's cross moments of z when L
    is dense, which the kernels do not keep, so it is NaN then (diagonal L maps exactly).
    """
    if not hasattr(info, "time_average"):
        return info
    mean_z, square_z = info.time_average, info.time_average_sq
    if factor.ndim == 1:
        mean_x = center + factor * mean_z
        square_x = center**2 + 2 * center * factor * mean_z + factor**2 * square_z
    else:
        mean_x = center + factor @ mean_z
        square_x = jnp.full_like(mean_x, jnp.nan)
    return info._replace(time_average=mean_x, time_average_sq=square_x)


class SubsampledKernel(MCMCKernel):
    """The NumPyro ``MCMCKernel`` of every pplsamplers sampler.

    Sampler classes (:class:`~pplsamplers.SBPS`, :class:`~pplsamplers.SGLD`, ...) are short
    declarations: their constructor validates the sampler's own options once and passes a
    :class:`~pplsamplers.infer.spec.KernelSpec` here.

    Parameters
    ----------
    model
        A NumPyro model with a data plate (or ``None`` when ``potential`` is given).
    spec
        The sampler's declaration.
    subsample_size
        Minibatch size n.  ``None`` (default): the model plate's own size if it has one,
        else chosen automatically from the gradient-noise probe and reported.
    data_plate
        Name of the data plate if it cannot be found automatically.
    potential
        A ready :class:`~pplsamplers.potential.SubsampledPotential` instead of a model.
    control_variate
        ``"auto"`` (default): anchor a control-variate gradient at the mode when the mode
        probe finds one mode; ``True``/``False``; or an anchor (flat unconstrained array).
    precondition
        ``"auto"`` (default), ``"dense"``, ``"diag"``, ``None``, or a covariance matrix
        (``(D, D)``) or variance vector (``(D,)``) in the unconstrained coordinates: the
        kernel runs on x = x* + L z with L Lᵀ the posterior covariance estimate (DESIGN §8).
    init_strategy
        NumPyro init strategy, used when there is no mode to start from.
    steps_per_sample
        Kernel steps per draw (NumPyro sample); ``None`` (default): the sampler's own
        default (:attr:`~pplsamplers.infer.spec.KernelSpec.steps_per_sample`: 10 for the
        step-size kernels, more in high D for those whose automatic step shrinks there,
        1 for the PDMPs).  ``sample_stats.data_evals`` counts every step.
    """

    sample_field = "z"

    def __init__(
        self,
        model: Callable | None,
        spec: KernelSpec,
        *,
        subsample_size: int | None = None,
        data_plate: str | None = None,
        potential: SubsampledPotential | None = None,
        control_variate: bool | str | Array = "auto",
        precondition: str | Array | None = "auto",
        init_strategy: Callable = init_to_uniform,
        steps_per_sample: int | None = None,
    ) -> None:
        if steps_per_sample is not None:
            validation.positive_int("steps_per_sample", steps_per_sample)
            spec = spec._replace(steps_per_sample=int(steps_per_sample), steps_per_sample_at=None)
        self.options = SamplerOptions(
            model=model,
            subsample_size=subsample_size,
            data_plate=data_plate,
            potential=potential,
            control_variate=control_variate,
            precondition=precondition,
            init_strategy=init_strategy,
        )
        self.spec = spec
        self.prepared: Prepared | None = None
        self._prepared_for: Any = None
        self._sample_fn: Callable | None = None

    # ------------------------------------------------------------ NumPyro API
    @property
    def model(self) -> Callable | None:
        """The model with its data plate un-subsampled (all N data), for ArviZ."""
        if self.prepared is None or self.prepared.full_data_model is None:
            return self.options.model
        return self.prepared.full_data_model

    @property
    def potential(self) -> SubsampledPotential | None:
        """The potential the kernel runs on (whitened, batched; ``None`` before ``init``)."""
        return None if self.prepared is None else self.prepared.potential

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "diverging") + tuple(self.spec.diagnostic_fields)

    def get_diagnostics_str(self, state: SamplerState) -> str:
        text = self.spec.describe(state.info) if self.spec.describe is not None else ""
        reverted = int(jnp.sum(state.num_reverted))  # summed over chains when vectorised
        extra = f"{reverted} rejected" if reverted else ""
        return ", ".join(part for part in (text, extra) if part)

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable:
        if self.options.model is None:
            return lambda z: z
        return self._prepare(model_args, model_kwargs or {}).postprocess

    def sample(self, state: SamplerState, model_args: tuple, model_kwargs: dict) -> SamplerState:
        return self._sample_fn(state)

    def init(
        self,
        rng_key: PRNGKey,
        num_warmup: int,
        init_params: Any,
        model_args: tuple,
        model_kwargs: dict,
    ) -> SamplerState:
        enable_compilation_cache()  # persistent, per user; PPLSAMPLERS_NO_COMPILATION_CACHE=1
        traced = not is_concrete(rng_key)  # inside NumPyro's pmap of parallel chains
        if traced and mesh_sharded((model_args, model_kwargs)):
            raise ValueError(
                "chain_method='parallel' cannot take data sharded over a device mesh (NumPyro's "
                "pmap traces the chains in a mesh of its own, and JAX refuses the model's X[idx] "
                "on the data's mesh). Use chain_method='vectorized': the chains share the "
                "sharded data, and with pplsamplers.shard_data(args, chains=k) they are split "
                "over k devices of a ('chain', 'data') mesh too. Or 'parallel' with unsharded data."
            )
        prepared = self._prepare(model_args, model_kwargs or {}, traced=traced)
        sample_chains = self.make_step(prepared, int(num_warmup))
        init_kernel = jax.jit(lambda key, x, p: self.spec.init(key, x, prepared.potential, p))
        if is_prng_key(rng_key):  # one chain (sequential or parallel): a batch of one
            self._sample_fn = lambda state: jax.tree.map(
                lambda leaf: leaf[0], sample_chains(jax.tree.map(lambda leaf: leaf[None], state))
            )
            return self.init_chain(rng_key, init_params, prepared, init_kernel)
        self._sample_fn = sample_chains
        chains: list[SamplerState] = []
        for i, key in enumerate(rng_key):
            start = None if init_params is None else jax.tree.map(lambda p, i=i: p[i], init_params)
            # the zero Info of the first chain serves all: its shapes cost a trace of the step
            info = chains[0].info if chains else None
            chains.append(self.init_chain(key, start, prepared, init_kernel, info))
        state = jax.tree.map(lambda *xs: jnp.stack(xs), *chains)
        on_devices = chain_sharding((model_args, model_kwargs), len(chains))  # chains on the mesh
        return state if on_devices is None else jax.device_put(state, on_devices)

    # ----------------------------------------------------------- the driver
    def _prepare(self, model_args: tuple, model_kwargs: dict, traced: bool = True) -> Prepared:
        """The shared warmup's result for these arguments (computed once).

        ``traced``: called inside a trace (NumPyro's ``pmap`` of parallel chains), where the
        set-up runs under ``jax.ensure_compile_time_eval`` to stay concrete.  Outside one
        that context is left off: under it, the operations on the data inside the set-up's
        compiled programs run eagerly, one small program each.
        """
        signature = (model_args, tuple(sorted(model_kwargs.items())))
        if self.prepared is None or not same_objects(self._prepared_for, signature):
            with jax.ensure_compile_time_eval() if traced else contextlib.nullcontext():
                self.prepared = prepare(self.options, self.spec, model_args, model_kwargs)
            self._prepared_for = signature
        return self.prepared

    def init_chain(
        self,
        rng_key: PRNGKey,
        init_params: Any,
        prepared: Prepared,
        init_kernel: Callable,
        info: Any = None,
    ) -> SamplerState:
        """The state of one chain: start, kernel state, params and a zero ``Info``.

        ``init_kernel(key, position, params)`` is the kernel's ``init`` compiled once for all
        chains (run eagerly, it would evaluate the model one small program per operation).
        ``info``: another chain's zero ``Info`` to reuse; ``None`` traces the kernel's step
        abstractly for its shapes.
        """
        start_key, kernel_key, chain_key = jax.random.split(rng_key, 3)
        potential, spec = prepared.potential, self.spec
        position = starting_point(start_key, init_params, prepared, spec)
        params = prepared.params
        metric = metrics.Metric(prepared.center, prepared.factor)
        kernel_state = init_kernel(kernel_key, position, params)
        if info is None:
            kernel = spec.build_kernel()
            shapes = jax.eval_shape(
                lambda k, s, p: kernel(k, s, potential, p), kernel_key, kernel_state, params
            )
            info = _zeros(shapes[1])
        return SamplerState(
            z=potential.unravel(spec.position(kernel_state)),
            kernel_state=kernel_state,
            params=params,
            adapt_state=spec.warmup_init(kernel_state, params),
            info=info,
            iteration=jnp.asarray(0),
            reverted=jnp.asarray(False),
            num_reverted=jnp.asarray(0),
            rng_key=chain_key,
            metric=metric,
            metric_stats=metrics.init_stats(metric) if prepared.adapt_metric else None,
        )

    def make_step(
        self, prepared: Prepared, num_warmup: int
    ) -> Callable[[SamplerState], SamplerState]:
        """One MCMC step of a batch of chains (leading axis; they share ``iteration``).

        Each chain moves by the kernel, and a step that is not finite is rejected (for the
        step-size kernels also a jump past ``DIVERGENT_JUMP`` √D, which in warmup halves
        the step size: ``KernelSpec.stabilize``).  During
        warmup the sampler's own warmup updates its params, and at window ends each chain's
        metric is refined from its draws (:mod:`pplsamplers.infer.metric`).  The stages are
        ``lax.cond`` on the shared iteration *outside* the ``vmap`` over chains, so after
        warmup no warmup work is computed (a ``cond`` inside ``vmap`` runs both branches).
        """
        spec = self.spec
        kernel = spec.build_kernel()
        warmup = spec.warmup if num_warmup > 0 else None
        cost = prepared.potential.cost_per_datum
        ends = metrics.window_ends(num_warmup) if prepared.adapt_metric else ()
        first_draw = metrics.window_start(num_warmup)
        guard = spec.stabilize is not None and prepared.whitened
        jump_limit = DIVERGENT_JUMP * math.sqrt(prepared.potential.dim)
        gradient_limit = gradient_clip_norm(prepared.potential)
        steps = spec.steps_per_sample
        if spec.steps_per_sample_at is not None:
            steps = spec.steps_per_sample_at(prepared.potential.dim)

        def potential_of(metric: metrics.Metric) -> SubsampledPotential:
            # a state's refined metric holds after warmup too (post_warmup_state, resume)
            potential = prepared.potential
            if prepared.adapt_metric:
                potential = whiten(prepared.batched, metric.center, metric.factor)
            # a step-size kernel's step is bounded where the gradient runs away (whitened)
            return with_clipped_gradient(potential, gradient_limit) if guard else potential

        def step(
            potential: SubsampledPotential, iteration: Array, carry: tuple, step_key: Array
        ) -> tuple:
            """One kernel step from ``carry = (kernel state, params, evals, rejected)``."""
            kernel_state, params, evals, rejected = carry
            new_state, info = kernel(step_key, kernel_state, potential, params)
            finite = _finite(new_state)
            if guard:  # a divergent step is rejected; in warmup it also halves the step size
                origin = (spec.moved_point or spec.position)(kernel_state)
                jump = jnp.linalg.norm(spec.position(new_state) - origin)
                divergent = ~(finite & (jump <= jump_limit))
                finite = finite & ~divergent
                shrink = divergent & (iteration < num_warmup)
                params = jax.tree.map(
                    lambda a, b: jnp.where(shrink, a, b), spec.stabilize(params), params
                )
            new_state = jax.tree.map(lambda a, b: jnp.where(finite, a, b), new_state, kernel_state)
            rejected = rejected + (~finite).astype(jnp.int32)
            return (new_state, params, evals + info.data_evals, rejected), info

        def move(state: SamplerState) -> tuple[SamplerState, Array]:
            rng_key, step_key, *stage_keys = jax.random.split(state.rng_key, 4)
            potential = potential_of(state.metric)
            one_step = lambda carry, key: step(potential, state.iteration, carry, key)
            start = (state.kernel_state, state.params, 0, jnp.zeros((), jnp.int32))
            if steps == 1:
                carry, info = one_step(start, step_key)
            else:  # the draw is the last of `steps` steps; the kernel is traced once, in the
                # loop (a first step peeled off for Info's shapes doubled the compiled program)
                body = lambda i, loop: one_step(loop[0], jax.random.fold_in(step_key, i))
                no_info = _zeros(jax.eval_shape(one_step, start, step_key)[1])
                carry, info = jax.lax.fori_loop(0, steps, body, (start, no_info))
            new_state, params, evals, rejected = carry
            # control variates evaluate each datum at x and at the anchor
            info = info._replace(data_evals=evals * cost)
            moved = state._replace(
                z=potential.unravel(spec.position(new_state)),
                kernel_state=new_state,
                params=params,
                info=info,
                iteration=state.iteration + 1,
                reverted=rejected > 0,
                num_reverted=state.num_reverted + (rejected > 0).astype(jnp.int32),
                rng_key=rng_key,
            )
            return moved, jnp.stack(stage_keys)

        def adapt(state: SamplerState, keys: Array) -> SamplerState:
            window = WarmupWindow(state.iteration - 1, num_warmup, ends[-1] + 1 if ends else 0)
            kernel_state, params, adapt_state = warmup(
                keys[0],
                state.kernel_state,
                state.params,
                state.adapt_state,
                state.info,
                potential_of(state.metric),
                window,
            )
            return state._replace(kernel_state=kernel_state, params=params, adapt_state=adapt_state)

        def in_model_coordinates(state: SamplerState) -> SamplerState:
            return state._replace(info=model_time_averages(state.info, *state.metric))

        def collect(state: SamplerState, keys: Array) -> SamplerState:
            stats = metrics.accumulate(state.metric_stats, spec.position(state.kernel_state))
            return state._replace(metric_stats=stats)

        def refine(state: SamplerState, keys: Array) -> SamplerState:
            metric, shift, root, _ = metrics.refine(state.metric, state.metric_stats)
            position = metrics.map_position(spec.position(state.kernel_state), shift, root)
            kernel_state = spec.init(keys[1], position, potential_of(metric), state.params)
            # the sampler's own warmup statistics (e.g. pSGLD's RMSprop average) carry over:
            # restarting them from one draw left pSGLD's frozen metric noisy
            return state._replace(
                kernel_state=kernel_state,
                metric=metric,
                metric_stats=metrics.init_stats(metric),
            )

        def stage(when: Array, update: Callable, states: SamplerState, keys: Array):
            return jax.lax.cond(when, jax.vmap(update), lambda s, k: s, states, keys)

        def sample_chains(states: SamplerState) -> SamplerState:
            iteration = states.iteration[0]  # the chains step together
            states, keys = (
                jax.lax.map(move, states) if spec.chains_in_turn else jax.vmap(move)(states)
            )
            if warmup is not None:
                states = stage(iteration < num_warmup, adapt, states, keys)
            states = jax.vmap(in_model_coordinates)(states)
            if ends:
                collecting = (iteration >= first_draw) & (iteration <= ends[-1])
                states = stage(collecting, collect, states, keys)
                states = stage(jnp.isin(iteration, jnp.asarray(ends)), refine, states, keys)
            return states

        return sample_chains


__all__ = ["SamplerState", "SubsampledKernel"]
