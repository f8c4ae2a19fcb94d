"""Warmup and draws in segments, each followed by a checkpoint (``pplsamplers fit
--checkpoint``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from pplsamplers.checkpoint.files import (
    attach_draws,
    checkpoint_info,
    load_checkpoint,
    save_checkpoint,
)
from pplsamplers.checkpoint.storage import CheckpointError, digest


def run_checkpointed(
    mcmc: Any,
    rng_key: Any,
    *args: Any,
    directory: str | os.PathLike,
    every: int,
    num_samples: int,
    resume: bool = False,
    metadata: dict | None = None,
    extra_fields: tuple = (),
    print_fn: Callable[[str], None] = print,
    on_checkpoint: Callable[[int], None] | None = None,
    **kwargs: Any,
) -> Any:
    """Warm up, then draw ``num_samples`` per chain in segments of ``every``, checkpointing each.

    What ``pplsamplers fit --checkpoint DIR --checkpoint-every K [--resume DIR]`` runs.  A
    checkpoint is written after warmup and after each segment; with ``resume=True`` the run
    continues from the last complete checkpoint in ``directory`` (or starts if there is none).
    The segments continue one chain each (``post_warmup_state = last_state`` and the state's
    own key), so the draws do not depend on where the run was cut or resumed.  At the end every
    draw is attached to ``mcmc`` (:func:`attach_draws`), ready for :func:`~pplsamplers.to_arviz`.

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        An ``MCMC`` (any ``num_samples``: it is set per segment).
    rng_key : jax.Array
        The run's key (used for warmup; a resumed run takes its keys from the saved state).
    *args, **kwargs : Any
        The model's arguments.
    directory, every, num_samples : str or os.PathLike; int; int
        Checkpoint directory, draws per segment and draws per chain in all (after thinning).
    resume : bool, default False
        Continue the checkpoint in ``directory``; without it a non-empty one is an error.
    metadata : dict or None, default None
        Facts the run must share with the checkpoint it resumes (the CLI's flags), besides
        the model's arguments (a hash of them is added as ``"data"``); a difference is an
        error naming the first differing key.
    extra_fields, print_fn : tuple; callable, defaults () and print
        NumPyro's ``extra_fields``; where progress lines go.
    on_checkpoint : callable or None, default None
        Called with the draws per chain saved after each checkpoint; an exception it raises
        stops the run there (the CLI stops this way on SIGTERM).

    Returns
    -------
    MCMC
        ``mcmc``, reporting all ``num_samples`` draws.

    Examples
    --------
    Warmup, then 40 draws in segments of 20, a checkpoint after each part:

    >>> import tempfile
    >>> import jax
    >>> from numpyro.infer import MCMC
    >>> from pplsamplers import SGLD
    >>> from pplsamplers.datasets.logistic_regression import load_data, model
    >>> (X, y), _ = load_data(N=200, d=2)
    >>> mcmc = MCMC(SGLD(model, subsample_size=20), num_warmup=50, num_samples=1,
    ...             progress_bar=False)
    >>> with tempfile.TemporaryDirectory() as ckpt:
    ...     mcmc = run_checkpointed(mcmc, jax.random.key(0), X, y, directory=ckpt, every=20,
    ...                             num_samples=40, print_fn=lambda line: None)
    >>> mcmc.get_samples()["w"].shape
    (40, 2)

    Killed at any point, the same call with ``resume=True`` continues from the last
    checkpoint, and draws what the uninterrupted run would have drawn.
    """
    if every < 1:
        raise ValueError(f"--checkpoint-every (every) must be at least 1; got {every}.")
    directory = Path(directory)
    metadata = {**(metadata or {}), "data": _data_digest(args, kwargs)}
    info = checkpoint_info(directory)
    if info is not None and not resume:
        raise CheckpointError(
            f"{directory} already holds a checkpoint ({info['num_draws']} draws): add "
            f"--resume {directory} to continue it, or choose an empty directory."
        )
    if info is not None:
        saved = info["metadata"]
        for key in sorted(set(saved) | set(metadata)):
            if saved.get(key) != metadata.get(key):
                raise CheckpointError(
                    f"cannot resume {directory}: it was written with {key}={saved.get(key)!r}, "
                    f"this run has {key}={metadata.get(key)!r}; use the same options."
                )
        done = info["num_draws"]
        if done > num_samples:
            raise CheckpointError(
                f"{directory} already holds {done} draws per chain, more than num_samples="
                f"{num_samples}."
            )
        load_checkpoint(mcmc, directory)
        print_fn(f"resuming from {directory}: {done} of {num_samples} draws per chain done")
    else:
        if resume:
            print_fn(f"no complete checkpoint in {directory} yet: starting from the beginning")
        mcmc.warmup(rng_key, *args, extra_fields=extra_fields, **kwargs)
        save_checkpoint(mcmc, directory, metadata=metadata)
        done = 0
        print_fn(f"checkpoint: warmup saved to {directory}")
        if on_checkpoint is not None:
            on_checkpoint(done)
    if done == num_samples:  # killed after the last checkpoint: set mcmc up as a run would
        mcmc._args, mcmc._kwargs = args, kwargs
        mcmc.sampler.postprocess_fn(args, kwargs)  # a pplsamplers kernel's one-time set-up
    while done < num_samples:
        count = min(every, num_samples - done)
        mcmc.num_samples = count * mcmc.thinning
        if mcmc.last_state is not None:
            mcmc.post_warmup_state = mcmc.last_state
        mcmc.run(mcmc.post_warmup_state.rng_key, *args, extra_fields=extra_fields, **kwargs)
        save_checkpoint(mcmc, directory)
        done += count
        print_fn(f"checkpoint: {done} of {num_samples} draws per chain saved to {directory}")
        if on_checkpoint is not None and done < num_samples:
            on_checkpoint(done)
    return attach_draws(mcmc, load_checkpoint(mcmc, directory))


def _data_digest(args: tuple, kwargs: dict) -> str:
    """A hash of the model's arguments: a checkpoint resumes only on the same data."""
    leaves = jax.tree.leaves((args, sorted(kwargs.items())))
    return digest([np.asarray(leaf) for leaf in leaves])[:16]


__all__ = ["run_checkpointed"]
