"""The warmup every sampler shares, done once per data set by the adapter (DESIGN §8).

:func:`prepare` turns the model (inspected once) into the potential the kernel runs on:

1. the mode, when anything below needs it (:func:`~pplsamplers.potential.find_map`);
2. the control-variate gradient anchored at the mode (``control_variate``);
3. the minibatch size;
4. the kernel's starting tunables (``KernelSpec.default_params``) for that potential.

:func:`starting_point` gives each chain its start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from pplsamplers.infer.spec import KernelSpec
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

PRECONDITIONERS = ("auto", "dense", "diag")


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class SamplerOptions:
    """The options every sampler takes, validated once at construction (DESIGN §7)."""

    model: Callable | None
    subsample_size: int | None = None
    data_plate: str | None = None
    potential: SubsampledPotential | None = None
    control_variate: bool | str | Array = False
    precondition: str | Array | None = None
    init_strategy: Callable | None = None

    def __post_init__(self) -> None:
        if self.model is None and self.potential is None:
            raise ValueError("give a NumPyro `model` or a ready `potential`.")
        if self.subsample_size is not None and not _is_positive_int(self.subsample_size):
            raise ValueError(
                f"subsample_size must be a positive integer; got {self.subsample_size!r}."
            )
        choice = self.control_variate
        if isinstance(choice, str) and choice != "auto":
            raise ValueError(
                f"control_variate must be 'auto', True, False or an anchor array; got {choice!r}."
            )
        precondition = self.precondition
        if isinstance(precondition, str) and precondition not in PRECONDITIONERS:
            raise ValueError(
                f"precondition must be one of {PRECONDITIONERS}, None, or a covariance matrix "
                f"or variance vector; got {precondition!r}."
            )


class Prepared(NamedTuple):
    """What :func:`prepare` found, and the potential the kernel runs on."""

    potential: SubsampledPotential
    params: Any
    mode: Array | None
    notes: dict[str, str]
    postprocess: Callable[[dict], dict]
    full_data_model: Callable | None
    check_start: Callable[[Array], None]


def _model_potential(options: SamplerOptions, model_args: tuple, model_kwargs: dict) -> tuple:
    if options.potential is not None:
        potential = options.potential
        if options.subsample_size is not None:
            potential = with_batch_size(potential, options.subsample_size)
        return potential, None, None, lambda z: z, lambda x: check_position(potential, x)
    model = options.model
    info = model_info(model, model_args, model_kwargs, options.data_plate)
    init_strategy = options.init_strategy
    potential = make_potential(
        model,
        model_args,
        model_kwargs,
        options.subsample_size,
        data_plate=options.data_plate,
        **({} if init_strategy is None else {"init_strategy": init_strategy}),
    )
    postprocess = make_postprocess(model, model_args, model_kwargs, info)
    check = lambda x: check_position(potential, x, model, model_args, model_kwargs, info)
    return potential, info, full_data_model(model, info), postprocess, check


def prepare(
    options: SamplerOptions, spec: KernelSpec, model_args: tuple, model_kwargs: dict
) -> Prepared:
    """Build the kernel's potential and starting params for one data set (module docstring)."""
    potential, info, full_model, postprocess, check = _model_potential(
        options, model_args, model_kwargs
    )
    notes: dict[str, str] = {}
    mode = None
    choice = options.control_variate
    if choice is True:
        mode = find_map(jax.random.PRNGKey(0), potential).position
        anchor = mode
    elif choice is False or choice is None or isinstance(choice, str):
        anchor = None
    else:
        anchor = jnp.asarray(choice)
        if anchor.shape != (potential.dim,):
            raise ValueError(
                f"control_variate anchor must have shape ({potential.dim},); got {anchor.shape}."
            )
    if anchor is not None:
        potential = with_control_variate(potential, anchor)
        notes["control_variate"] = "on: anchored at the mode" if choice is True else "on"
    params = spec.default_params(jax.random.PRNGKey(1), potential)
    return Prepared(potential, params, mode, notes, postprocess, full_model, check)


def _is_concrete(tree: Any) -> bool:
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(tree))


def starting_point(
    rng_key: PRNGKey, init_params: Any, prepared: Prepared, spec: KernelSpec
) -> Array:
    """A chain's flat start: ``init_params`` if given, else the sampler's own start if it
    declares one, else a draw of the init strategy."""
    potential = prepared.potential
    own = None
    if init_params is None and spec.start is not None:
        own = spec.start(rng_key, potential, prepared.params)
    if own is not None:
        flat = jnp.asarray(own)
    elif init_params is not None:
        flat = ravel_pytree(init_params)[0] if isinstance(init_params, dict) else init_params
        flat = jnp.asarray(flat, potential.init_position.dtype).reshape(-1)
        if flat.shape != (potential.dim,):
            raise ValueError(
                f"init_params has {flat.shape[0]} values; the model has {potential.dim} "
                "unconstrained dimensions."
            )
    elif potential.draw_init is not None:
        flat = potential.draw_init(rng_key)
    else:
        flat = potential.init_position
    if _is_concrete(flat):
        prepared.check_start(flat)
    return flat


__all__ = ["PRECONDITIONERS", "Prepared", "SamplerOptions", "prepare", "starting_point"]
