"""The NumPyro ``MCMCKernel`` adapter shared by every pplsamplers sampler (DESIGN §3.3).

A subclass supplies two pure functions through :meth:`SubsampledKernel.build`:

* ``init(rng_key, position) -> (kernel_state, adapt_state)``
* ``step(rng_key, kernel_state, adapt_state, iteration) -> (kernel_state, adapt_state, info)``

where ``iteration < num_warmup`` marks warmup (adapt) and later steps are frozen.  This base
class owns everything NumPyro-facing: building the potential from the model, the
NamedTuple state with ``rng_key``, the three chain methods, ``postprocess_fn``, the
full-data ``model`` view for ArviZ, reverting non-finite steps, and ``sample_stats``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from numpyro.infer import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from pplsamplers.potential import (
    SubsampledPotential,
    check_position,
    find_map,
    full_data_model,
    make_postprocess,
    make_potential,
    model_info,
    with_batch_size,
    with_control_variate,
)
from pplsamplers.types import Array, PRNGKey

InitFn = Callable[[PRNGKey, Array], tuple[Any, Any]]
StepFn = Callable[[PRNGKey, Any, Any, Array], tuple[Any, Any, Any]]


class SamplerState(NamedTuple):
    """State of every pplsamplers NumPyro kernel.

    ``z`` is the unconstrained sample (a dict of sites), ``info`` the kernel's last
    ``Info`` NamedTuple.  Its fields are readable as attributes of the state itself
    (``state.data_evals``), which is how NumPyro's ``extra_fields`` and ArviZ's
    ``sample_stats`` find them.  ``reverted`` flags a step whose result was not finite and
    was therefore discarded; ``num_reverted`` counts them.
    """

    z: Any
    kernel_state: Any
    adapt_state: Any
    info: Any
    iteration: Array
    reverted: Array
    num_reverted: Array
    rng_key: Array

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(tuple.__getitem__(self, 3), name)


def _is_concrete(x: Any) -> bool:
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))


class SubsampledKernel(MCMCKernel):
    """Base ``MCMCKernel`` for samplers driven by a :class:`SubsampledPotential`.

    Parameters
    ----------
    model
        A NumPyro model with one data plate (or ``None`` when ``potential`` is given).
    subsample_size
        Minibatch size n; overrides the model plate's own ``subsample_size``.
        ``None`` uses the model's, or the full data set.
    data_plate
        Name of the data plate if it cannot be found automatically.
    potential
        A ready :class:`SubsampledPotential` instead of a model.
    control_variate
        Anchor a control-variate gradient estimator at the MAP (``True``) or at a given
        unconstrained flat position (an array).
    init_strategy
        NumPyro init strategy for the starting points.
    """

    sample_field = "z"
    diagnostic_fields: tuple[str, ...] = ("data_evals",)

    def __init__(
        self,
        model: Callable | None = None,
        *,
        subsample_size: int | None = None,
        data_plate: str | None = None,
        potential: SubsampledPotential | None = None,
        control_variate: bool | Array = False,
        init_strategy: Callable = init_to_uniform,
    ) -> None:
        if model is None and potential is None:
            raise ValueError("give a NumPyro `model` or a ready `potential`.")
        if subsample_size is not None and (
            isinstance(subsample_size, bool)
            or not isinstance(subsample_size, int)
            or subsample_size <= 0
        ):
            raise ValueError(f"subsample_size must be a positive integer; got {subsample_size!r}.")
        self._model = model
        self._subsample_size = subsample_size
        self._data_plate = data_plate
        self._user_potential = potential
        self._control_variate = control_variate
        self._init_strategy = init_strategy
        self._potential: SubsampledPotential | None = None
        self._info = None
        self._built_for: Any = None
        self._sample_fn: Callable | None = None
        self._num_warmup = 0

    # ------------------------------------------------------------------ hooks
    @abstractmethod
    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        """Return the pure ``(init, step)`` pair of this sampler (see module docstring)."""

    def position_of(self, kernel_state: Any) -> Array:
        """The flat unconstrained position held by ``kernel_state``."""
        return kernel_state.position

    # ------------------------------------------------------------ NumPyro API
    @property
    def model(self) -> Callable | None:
        """The model with its data plate un-subsampled (all N data), for ArviZ."""
        if self._model is None or self._info is None:
            return self._model
        return full_data_model(self._model, self._info)

    @property
    def potential(self) -> SubsampledPotential | None:
        """The potential built by the last ``init`` (``None`` before)."""
        return self._potential

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "reverted") + tuple(self.diagnostic_fields)

    def get_diagnostics_str(self, state: SamplerState) -> str:
        reverted = int(jnp.sum(state.num_reverted))  # summed over chains when vectorised
        return f"{reverted} reverted" if reverted else ""

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable:
        if self._model is None:
            return lambda z: z
        info = self._info or model_info(self._model, model_args, model_kwargs, self._data_plate)
        return make_postprocess(self._model, model_args, model_kwargs, info)

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
        potential = self._prepare_potential(model_args, model_kwargs or {})
        self._num_warmup = int(num_warmup)
        init_fn, step_fn = self.build(potential, self._num_warmup)
        sample_one = self._make_sample_one(step_fn)
        vectorized = not is_prng_key(rng_key)
        if vectorized:
            keys = rng_key
            params = init_params
            states = [
                self._init_one(
                    k,
                    None if params is None else jax.tree.map(lambda p, i=i: p[i], params),
                    init_fn,
                    step_fn,
                )
                for i, k in enumerate(keys)
            ]
            self._sample_fn = jax.vmap(sample_one)
            return jax.tree.map(lambda *xs: jnp.stack(xs), *states)
        self._sample_fn = sample_one
        return self._init_one(rng_key, init_params, init_fn, step_fn)

    # --------------------------------------------------------------- internals
    def _prepare_potential(self, model_args: tuple, model_kwargs: dict) -> SubsampledPotential:
        signature = (model_args, tuple(sorted(model_kwargs.items())))
        if (
            self._potential is not None
            and self._built_for is not None
            and _same(self._built_for, signature)
        ):
            return self._potential
        if self._user_potential is not None:
            potential = self._user_potential
            if self._subsample_size is not None:
                potential = with_batch_size(potential, self._subsample_size)
        else:
            self._info = model_info(self._model, model_args, model_kwargs, self._data_plate)
            potential = make_potential(
                self._model,
                model_args,
                model_kwargs,
                self._subsample_size,
                data_plate=self._data_plate,
                init_strategy=self._init_strategy,
            )
        potential = self._apply_control_variate(potential)
        self._potential, self._built_for = potential, signature
        return potential

    def _apply_control_variate(self, potential: SubsampledPotential) -> SubsampledPotential:
        choice = self._control_variate
        if choice is False or choice is None:
            return potential
        if choice is True:
            anchor = find_map(jax.random.PRNGKey(0), potential).position
        else:
            anchor = jnp.asarray(choice)
            if anchor.shape != (potential.dim,):
                raise ValueError(
                    f"control_variate anchor must have shape ({potential.dim},); got {anchor.shape}."
                )
        self.control_variate_anchor = anchor
        return with_control_variate(potential, anchor)

    def _starting_point(self, key: PRNGKey, init_params: Any) -> Array:
        potential = self._potential
        if init_params is not None:
            flat = ravel_pytree(init_params)[0] if isinstance(init_params, dict) else init_params
            flat = jnp.asarray(flat, potential.init_position.dtype).reshape(-1)
            if flat.shape != (potential.dim,):
                raise ValueError(
                    f"init_params has {flat.shape[0]} values; the model has {potential.dim} "
                    "unconstrained dimensions."
                )
        elif potential.draw_init is not None:
            flat = potential.draw_init(key)
        else:
            flat = potential.init_position
        if _is_concrete(flat):
            if self._model is not None and self._info is not None:
                args, kwargs = self._built_for
                check_position(potential, flat, self._model, args, dict(kwargs), self._info)
            else:
                check_position(potential, flat)
        return flat

    def _init_one(self, rng_key: PRNGKey, init_params: Any, init_fn: InitFn, step_fn: StepFn):
        position_key, kernel_key, chain_key = jax.random.split(rng_key, 3)
        position = self._starting_point(position_key, init_params)
        kernel_state, adapt_state = init_fn(kernel_key, position)
        shapes = jax.eval_shape(step_fn, kernel_key, kernel_state, adapt_state, jnp.asarray(0))
        info = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes[2])
        return SamplerState(
            z=self._potential.unravel(self.position_of(kernel_state)),
            kernel_state=kernel_state,
            adapt_state=adapt_state,
            info=info,
            iteration=jnp.asarray(0),
            reverted=jnp.asarray(False),
            num_reverted=jnp.asarray(0),
            rng_key=chain_key,
        )

    def _make_sample_one(self, step_fn: StepFn) -> Callable[[SamplerState], SamplerState]:
        unravel = self._potential.unravel
        position_of = self.position_of
        cost = self._potential.cost_per_datum

        def sample_one(state: SamplerState) -> SamplerState:
            rng_key, step_key = jax.random.split(state.rng_key)
            kernel_state, adapt_state, info = step_fn(
                step_key, state.kernel_state, state.adapt_state, state.iteration
            )
            finite = jnp.all(
                jnp.array(
                    [
                        jnp.all(jnp.isfinite(leaf))
                        for leaf in jax.tree.leaves(kernel_state)
                        if jnp.issubdtype(leaf.dtype, jnp.inexact)
                    ]
                )
            )
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
            kernel_state = keep(kernel_state, state.kernel_state)
            adapt_state = keep(adapt_state, state.adapt_state)
            if cost != 1 and hasattr(info, "data_evals"):  # control variates: x and the anchor
                info = info._replace(data_evals=info.data_evals * cost)
            return SamplerState(
                z=unravel(position_of(kernel_state)),
                kernel_state=kernel_state,
                adapt_state=adapt_state,
                info=info,
                iteration=state.iteration + 1,
                reverted=~finite,
                num_reverted=state.num_reverted + (~finite).astype(jnp.int32),
                rng_key=rng_key,
            )

        return sample_one


def _same(a: Any, b: Any) -> bool:
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    return tree_a == tree_b and all(x is y for x, y in zip(leaves_a, leaves_b, strict=True))


__all__ = ["SamplerState", "SubsampledKernel"]
