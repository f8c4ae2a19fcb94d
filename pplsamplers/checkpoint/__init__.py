"""Checkpoint and resume a NumPyro ``MCMC`` run with nothing lost.

A checkpoint directory holds the draws collected so far, one netCDF file per segment (written
once, never rewritten), the full sampler state at the end of the last segment (``last_state``:
for a pplsamplers kernel its ``State`` (:mod:`pplsamplers.infer.state`) with its tuned
``params`` and warmup ``adapt_state``, for NUTS the ``HMCState`` with its step size and mass
matrix; typed PRNG keys are stored as their ``key_data`` and rewrapped) and ``manifest.json``.

Every file is written to a temporary name in the same directory, flushed to disk and moved into
place with :func:`os.replace`; the manifest, which names each file with its SHA-256, is written
last.  A process killed at any moment therefore leaves either the previous complete checkpoint
or the new one: temporary files are ignored (and removed by the next save), and a file whose
checksum does not match its manifest is refused with :class:`CheckpointError`, never half-read.

NumPyro continues a chain by ``mcmc.post_warmup_state = mcmc.last_state`` and
``mcmc.run(mcmc.last_state.rng_key, ...)``; :func:`load_checkpoint` sets ``post_warmup_state``
from disk so that the same call continues a run from another process.  The chain's key is part
of the state, so a resumed run draws exactly what the uninterrupted one would have drawn.

Examples
--------
>>> import jax
>>> from numpyro.infer import MCMC
>>> from pplsamplers import SGLD, attach_draws, load_checkpoint, save_checkpoint
>>> from pplsamplers.datasets.logistic_regression import load_data, model
>>> (X, y), _ = load_data(N=200, d=2)
>>> mcmc = MCMC(SGLD(model, subsample_size=20), num_warmup=50, num_samples=20)
>>> mcmc.warmup(jax.random.key(0), X, y)                # doctest: +SKIP
>>> save_checkpoint(mcmc, "ckpt")                       # doctest: +SKIP
PosixPath('ckpt/manifest.json')

Later, in another process, with the same ``mcmc = MCMC(...)``:

>>> draws = load_checkpoint(mcmc, "ckpt")               # doctest: +SKIP
>>> mcmc.run(mcmc.post_warmup_state.rng_key, X, y)      # doctest: +SKIP
>>> save_checkpoint(mcmc, "ckpt")                       # doctest: +SKIP
PosixPath('ckpt/manifest.json')
>>> mcmc = attach_draws(mcmc, load_checkpoint(mcmc, "ckpt"))  # doctest: +SKIP
>>> mcmc.get_samples()["w"].shape                       # doctest: +SKIP
(20, 2)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from pplsamplers.checkpoint.storage import (
    FORMAT,
    MANIFEST,
    TEMP_PREFIX,
    VERSION,
    CheckpointError,
    decode_tree,
    digest,
    encode_tree,
    json_sha,
    load_draws,
    load_state,
    read_manifest,
    save_draws,
    save_state,
    state_digest,
    write_atomic,
)


def checkpoint_info(directory: str | os.PathLike) -> dict | None:
    """The verified manifest of the checkpoint in ``directory``, or ``None`` if there is none.

    Its ``num_draws`` counts the kept draws per chain and ``metadata`` is what
    :func:`save_checkpoint` was given.  Raises :class:`CheckpointError` if a file fails its
    checksum."""
    directory = Path(directory)
    return read_manifest(directory) if directory.is_dir() else None


# ------------------------------------------------------------------ public pair
def save_checkpoint(
    mcmc: Any, directory: str | os.PathLike, *, metadata: dict | None = None
) -> Path:
    """Save a NumPyro ``MCMC`` run's state, and append its new draws, atomically.

    Call it after ``mcmc.warmup(...)`` (the state only: the warmup's tuned parameters) or after
    ``mcmc.run(...)`` (the state and the draws of that run, appended to those already saved).
    Saving the same state twice is a no-op.  Into a directory that already holds a checkpoint,
    only a run that continued from it (``mcmc.post_warmup_state`` is its state, as after
    :func:`load_checkpoint`) can be saved.

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        A ``numpyro.infer.MCMC`` that has run (any kernel whose state is made of arrays,
        NamedTuples, tuples, dicts: every pplsamplers kernel and NUTS).
    directory : str or os.PathLike
        The checkpoint directory (created if needed).  One writer at a time.
    metadata : dict or None, default None
        JSON-serialisable facts to keep with it (the CLI stores its flags and a data hash);
        ``None`` keeps those already saved.

    Returns
    -------
    Path
        The manifest's path.

    Examples
    --------
    >>> mcmc.warmup(jax.random.key(0), X, y)      # doctest: +SKIP
    >>> save_checkpoint(mcmc, "ckpt")             # doctest: +SKIP
    PosixPath('ckpt/manifest.json')
    """
    state = mcmc.last_state
    if state is None:
        raise CheckpointError("save_checkpoint(mcmc, ...): run mcmc.warmup or mcmc.run first.")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(TEMP_PREFIX + "*"):  # left by a writer that was killed
        stale.unlink(missing_ok=True)
    manifest = read_manifest(directory)
    state_id = state_digest(state)
    if manifest is not None and manifest["state"]["digest"] == state_id:
        return directory / MANIFEST  # already saved
    start = mcmc.post_warmup_state
    warmup_only = start is state  # MCMC.warmup sets post_warmup_state = last_state
    if manifest is not None and (
        start is None or state_digest(start) != manifest["state"]["digest"]
    ):
        raise CheckpointError(
            f"{directory} holds a checkpoint of another run: this MCMC did not continue from "
            "its state. Call load_checkpoint(mcmc, directory) before mcmc.run, or save into "
            "a new directory."
        )
    setup = _setup_digest(mcmc.sampler)
    if manifest is not None and manifest["setup_digest"] not in (None, setup):
        raise CheckpointError(
            f"the kernel's set-up (mode, preconditioner, batch size) differs from the one saved "
            f"in {directory}: the model or data changed since it was written."
        )
    done = 0 if manifest is None else manifest["num_draws"]
    segments = [] if manifest is None else list(manifest["segments"])
    if not warmup_only:
        draws = {"z": mcmc.get_samples(group_by_chain=True)}
        draws.update(mcmc.get_extra_fields(group_by_chain=True))
        draws = jax.device_get(draws)
        count = int(np.shape(jax.tree.leaves(draws)[0])[1])
        if count:
            name = f"draws-{done:07d}-{done + count:07d}.nc"
            sha = write_atomic(directory, name, lambda t: save_draws(t, draws))
            segments.append({"file": name, "sha256": sha, "draws": count})
            done += count
    state_name = f"state-{done:07d}-{state_id[:12]}.npz"
    state_sha = write_atomic(directory, state_name, lambda t: save_state(t, state))
    kernel = mcmc.sampler
    new = {
        "format": FORMAT,
        "version": VERSION,
        "num_draws": done,
        "num_chains": mcmc.num_chains,
        "thinning": mcmc.thinning,
        "kernel": type(kernel).__name__,
        "setup_digest": setup,
        "state": {"file": state_name, "sha256": state_sha, "digest": state_id},
        "segments": segments,
        "metadata": (manifest or {}).get("metadata", {}) if metadata is None else metadata,
    }
    text = json.dumps({**new, "checksum": json_sha(new)}, indent=1)
    write_atomic(directory, MANIFEST, lambda t: Path(t).write_text(text))
    keep = {MANIFEST, state_name, *(s["file"] for s in segments)}
    for old in directory.glob("state-*.npz"):
        if old.name not in keep:
            old.unlink(missing_ok=True)
    return directory / MANIFEST


def load_checkpoint(mcmc: Any, directory: str | os.PathLike) -> dict:
    """Restore the state saved in ``directory`` into ``mcmc`` and return the draws so far.

    Sets ``mcmc.post_warmup_state``, so ``mcmc.run(mcmc.post_warmup_state.rng_key, ...)``
    continues the chains exactly where the saved run stopped (the kernel's one-time set-up
    is recomputed from the model and data by the first ``run``, and checked against the
    checkpoint's by the next :func:`save_checkpoint`).

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        An ``MCMC`` built like the saved one (same kernel and options, ``num_warmup``,
        ``num_chains`` and ``thinning``); its ``num_samples`` is the length of the next run.
    directory : str or os.PathLike
        A directory written by :func:`save_checkpoint`.

    Returns
    -------
    dict
        ``{"z": {site: (chain, draw, ...)}, "diverging": ..., extra fields...}``: every draw
        saved so far, in order (empty draw axis after a warmup-only checkpoint).  Pass it to
        :func:`attach_draws` to make ``mcmc`` report them (``get_samples``, ``to_arviz``).

    Raises
    ------
    CheckpointError
        No complete checkpoint in ``directory``, a file failing its checksum, or an ``mcmc``
        with another number of chains or thinning.

    Examples
    --------
    >>> draws = load_checkpoint(mcmc, "ckpt")           # doctest: +SKIP
    >>> mcmc.run(mcmc.post_warmup_state.rng_key, X, y)  # doctest: +SKIP
    """
    directory = Path(directory)
    manifest = checkpoint_info(directory)
    if manifest is None:
        raise CheckpointError(f"no complete checkpoint in {directory} (no {MANIFEST}).")
    for name in ("num_chains", "thinning"):
        if getattr(mcmc, name) != manifest[name]:
            raise CheckpointError(
                f"the checkpoint in {directory} has {name}={manifest[name]}; build the MCMC "
                f"with the same (it has {getattr(mcmc, name)})."
            )
    if type(mcmc.sampler).__name__ != manifest["kernel"]:
        raise CheckpointError(
            f"the checkpoint in {directory} was written by a {manifest['kernel']} kernel, "
            f"not {type(mcmc.sampler).__name__}."
        )
    mcmc.post_warmup_state = load_state(directory / manifest["state"]["file"])
    structure, parts = None, []
    for segment in manifest["segments"]:
        spec, leaves = load_draws(directory / segment["file"])
        if structure is not None and spec != structure:
            raise CheckpointError(f"{segment['file']} holds other fields than the segments before.")
        structure = spec
        parts.append(leaves)
    if structure is None:
        return {}
    return decode_tree(
        structure, [np.concatenate(group, axis=1) for group in zip(*parts, strict=True)]
    )


def attach_draws(mcmc: Any, draws: dict) -> Any:
    """Make ``mcmc`` report ``draws`` (from :func:`load_checkpoint`) as its collected draws.

    After it, ``mcmc.get_samples()``, ``get_extra_fields()``, ``print_summary()``,
    ``az.from_numpyro(mcmc)`` and :func:`~pplsamplers.to_arviz` see every saved draw.  Call it
    after the last run: it sets ``mcmc.num_samples`` to the number of draws times the thinning,
    which is also the length of any later ``run``.

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        The ``MCMC`` the draws were loaded into (its ``thinning`` sets ``num_samples``).
    draws : dict
        The draws :func:`load_checkpoint` returned (an empty dict raises :class:`CheckpointError`).

    Returns
    -------
    MCMC
        ``mcmc``, reporting ``draws``.
    """
    if not draws:
        raise CheckpointError("attach_draws: the checkpoint holds no draws yet.")
    count = int(np.shape(jax.tree.leaves(draws)[0])[1])
    mcmc._states = {mcmc._sample_field: draws["z"], **{k: v for k, v in draws.items() if k != "z"}}
    mcmc._states_flat = None
    mcmc.num_samples = count * mcmc.thinning
    return mcmc


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


def _setup_digest(kernel: Any) -> str | None:
    """A hash of a pplsamplers kernel's one-time set-up (center, factor, tuned defaults)."""
    prepared = getattr(getattr(kernel, "delegate", None) or kernel, "prepared", None)
    if prepared is None:
        return None
    leaves: list = []
    whitening = tuple(jax.tree.leaves(prepared.setup.whitening))
    encode_tree(jax.device_get((*whitening, prepared.params)), leaves)
    return digest(leaves)


__all__ = [
    "CheckpointError",
    "attach_draws",
    "checkpoint_info",
    "load_checkpoint",
    "run_checkpointed",
    "save_checkpoint",
]
