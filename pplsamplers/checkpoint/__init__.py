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
>>> import shutil, tempfile
>>> import jax
>>> from numpyro.infer import MCMC
>>> from pplsamplers import SGLD, attach_draws, load_checkpoint, save_checkpoint
>>> from pplsamplers.datasets.logistic_regression import load_data, model
>>> (X, y), _ = load_data(N=200, d=2)
>>> ckpt = tempfile.mkdtemp()
>>> mcmc = MCMC(SGLD(model, subsample_size=20), num_warmup=50, num_samples=200,
...             progress_bar=False)
>>> mcmc.warmup(jax.random.key(0), X, y)
>>> save_checkpoint(mcmc, ckpt).name
'manifest.json'

Later, in another process, with the same ``mcmc = MCMC(...)``:

>>> draws = load_checkpoint(mcmc, ckpt)
>>> mcmc.run(mcmc.post_warmup_state.rng_key, X, y)
>>> save_checkpoint(mcmc, ckpt).name
'manifest.json'
>>> mcmc = attach_draws(mcmc, load_checkpoint(mcmc, ckpt))
>>> mcmc.get_samples()["w"].shape
(200, 2)
>>> shutil.rmtree(ckpt)
"""

from pplsamplers.checkpoint.files import (
    attach_draws,
    checkpoint_info,
    load_checkpoint,
    save_checkpoint,
)
from pplsamplers.checkpoint.segments import run_checkpointed
from pplsamplers.checkpoint.storage import CheckpointError

__all__ = [
    "CheckpointError",
    "attach_draws",
    "checkpoint_info",
    "load_checkpoint",
    "run_checkpointed",
    "save_checkpoint",
]
