"""The state every pplsamplers NumPyro kernel carries between draws.

NumPyro collects a run's diagnostics by attribute from the state (``extra_fields``,
``default_fields``), as it reads ``HMCState.diverging``.  So a sampler's state has its kernel's
``Info`` fields as fields of its own: each sampler class gets its state type from
:func:`sampler_state`, the fields of :data:`STATE_FIELDS` followed by its ``Info`` fields.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any, NamedTuple

from pplsamplers.estimator import Estimator
from pplsamplers.kernels.spec import WarmupContext
from pplsamplers.warmup import Setup

STATE_FIELDS = (
    "z",
    "kernel_state",
    "params",
    "adapt_state",
    "iteration",
    "diverging",
    "num_diverging",
    "rng_key",
    "metric",
    "metric_stats",
    "monitor",
)
"""What every sampler's state holds before its ``Info`` fields:

* ``z``: the draw, a dict of the model's unconstrained sites (NumPyro's sample field);
* ``kernel_state``, ``params``, ``adapt_state``: the kernel's state, its tunables and its
  warmup statistics, in the kernel's (whitened) coordinates;
* ``iteration``: draws so far, warmup included;
* ``diverging``: the draw had a step rejected, for a non-finite result or (step-size kernels)
  a divergent jump; ``num_diverging`` counts such draws;
* ``rng_key``: the chain's key (NumPyro's ``post_warmup_state.rng_key`` continues a run);
* ``metric``, ``metric_stats``: the chain's own whitening x = c + L z, which warmup refines
  from its draws, and the current window's statistics (``None`` when not refined);
* ``monitor``: the draws the run keeps for its self-check (:mod:`pplsamplers.infer.monitor`;
  ``None`` outside NumPyro's ``MCMC`` or with ``self_check=False``).
"""


def sampler_state(owner: type, info_type: type) -> type:
    """The state type of the sampler class ``owner``, whose kernel's diagnostics are
    ``info_type`` (a NamedTuple): a NamedTuple with :data:`STATE_FIELDS` then the ``Info``
    fields, named ``<owner>.State`` so that a checkpoint can import it by name."""
    state = namedtuple("State", STATE_FIELDS + tuple(info_type._fields))
    state.__module__, state.__qualname__ = owner.__module__, f"{owner.__qualname__}.State"
    state.info_type = info_type
    return state


def info_of(state: Any) -> Any:
    """The kernel's ``Info`` held in ``state``."""
    info_type = type(state).info_type
    return info_type(*(getattr(state, name) for name in info_type._fields))


def with_info(state: Any, info: Any) -> Any:
    """``state`` with its ``Info`` fields replaced by ``info``'s."""
    return state._replace(**info._asdict())


class Prepared(NamedTuple):
    """The set-up for one data set and what a kernel derives from it (a kernel's
    ``prepared`` after its first ``run`` or ``warmup``; ``None`` before).

    Parameters
    ----------
    setup : Setup
        The shared warmup's :class:`~pplsamplers.warmup.Setup` for the data set.
    estimator : Estimator
        What the kernel runs on: whitened, with its batch size and control variate.
    context : WarmupContext
        What the set-up tells the kernel's ``default_params`` and ``start`` (in z).
    params : Any
        The kernel's starting tunables.
    postprocess : callable
        Unconstrained sites to constrained and deterministic sites.

    Examples
    --------
    >>> import jax
    >>> from numpyro.infer import MCMC
    >>> from pplsamplers import Boomerang
    >>> from pplsamplers.datasets import tiny_linear
    >>> linear, (A, x) = tiny_linear()  # theta ~ N(0, I), x_i ~ N(a_i . theta, 3²), 2000 rows
    >>> kernel = Boomerang(linear)
    >>> MCMC(kernel, num_warmup=100, num_samples=100, progress_bar=False).run(
    ...     jax.random.key(0), A, x)
    >>> prepared = kernel.prepared
    >>> prepared.estimator.N, prepared.estimator.n < 2000, "subsample_size" in prepared.setup.notes
    (2000, True, True)
    """

    setup: Setup
    estimator: Estimator
    context: WarmupContext
    params: Any
    postprocess: Callable[[dict], dict]


__all__ = ["STATE_FIELDS", "Prepared", "info_of", "sampler_state", "with_info"]
