"""Saving, verifying and loading one checkpoint directory (the package docstring says how a
checkpoint is laid out and why a killed process never leaves half of one)."""

from __future__ import annotations

import json
import os
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

    Examples
    --------
    A fresh ``MCMC`` (say in a new process) reporting the draws of a saved run:

    >>> import tempfile
    >>> import jax
    >>> from numpyro.infer import MCMC
    >>> from pplsamplers import SGLD, attach_draws, load_checkpoint, save_checkpoint
    >>> from pplsamplers.datasets.logistic_regression import load_data, model
    >>> (X, y), _ = load_data(N=200, d=2)
    >>> def sgld_mcmc():
    ...     return MCMC(SGLD(model, subsample_size=20), num_warmup=50, num_samples=30,
    ...                 progress_bar=False)
    >>> mcmc = sgld_mcmc()
    >>> mcmc.run(jax.random.key(0), X, y)
    >>> with tempfile.TemporaryDirectory() as ckpt:
    ...     _ = save_checkpoint(mcmc, ckpt)
    ...     fresh = attach_draws(sgld_mcmc(), load_checkpoint(sgld_mcmc(), ckpt))
    >>> fresh.get_samples()["w"].shape
    (30, 2)
    """
    if not draws:
        raise CheckpointError("attach_draws: the checkpoint holds no draws yet.")
    count = int(np.shape(jax.tree.leaves(draws)[0])[1])
    mcmc._states = {mcmc._sample_field: draws["z"], **{k: v for k, v in draws.items() if k != "z"}}
    mcmc._states_flat = None
    mcmc.num_samples = count * mcmc.thinning
    return mcmc


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
    "save_checkpoint",
]
