"""Issue 17 part 4: ``fit --checkpoint/--resume`` loses nothing, whatever kills the process.

A ``fit`` is killed (SIGTERM, and separately SIGKILL) once a checkpoint exists, resumed with
``--resume``, and its final draws must equal, bit for bit, those of the same run left alone.
A checkpoint interrupted while being written (a partial temporary file, a manifest naming a
truncated file, a truncated manifest) is ignored or refused with a clear message.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import arviz as az
import jax
import numpy as np
import pytest
from numpyro.infer import MCMC

from pplsamplers.checkpoint import CheckpointError, checkpoint_info, load_checkpoint
from pplsamplers.checkpoint.storage import decode_tree, encode_tree
from pplsamplers.registry import make_kernel

MODEL = """
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist


def model(X, y=None, subsample_size=50):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=None if y is None else y[idx])


def load_data(N=500, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, d))
    y = (rng.uniform(size=N) < 1 / (1 + np.exp(-X @ rng.standard_normal(d)))).astype(np.float32)
    return (jnp.asarray(X, jnp.float32), jnp.asarray(y)), {}
"""
DRAWS, EVERY = 60, 15  # four segments after warmup
OPTIONS = ["--sampler", "sgld", "--step-size", "1e-3", "--control-variate", "--num-warmup", "50",
           "--num-samples", str(DRAWS), "--num-chains", "2", "--seed", "3", "--no-progress",
           "--checkpoint-every", str(EVERY)]  # fmt: skip


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "logreg.py"
    path.write_text(MODEL)
    return path


def fit(model_file: Path, out: Path, *flags: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "pplsamplers.cli", "fit", str(model_file), *OPTIONS,
               "--out", str(out), *flags]  # fmt: skip
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=600)
    return process.returncode, out.decode(), err.decode()


def draws_of(out: Path) -> dict:
    """Every posterior and sample-stat array of the run's final netCDF."""
    idata = az.from_netcdf(out / "logreg.nc")
    arrays = {f"posterior.{k}": v.values for k, v in idata.posterior.data_vars.items()}
    arrays.update({f"stats.{k}": v.values for k, v in idata.sample_stats.data_vars.items()})
    return arrays


def wait_for_checkpoint(process: subprocess.Popen, directory: Path, min_draws: int) -> int:
    """Poll until ``directory`` holds a complete checkpoint of at least ``min_draws`` draws."""
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"fit ended before it could be killed: {finish(process)}")
        if (directory / "manifest.json").exists():
            done = json.loads((directory / "manifest.json").read_text())["num_draws"]
            if done >= min_draws:
                return done
        time.sleep(0.02)
    raise AssertionError("no checkpoint appeared")


@pytest.fixture(scope="module")
def uninterrupted(model_file, tmp_path_factory) -> tuple[Path, Path]:
    """The same segmented run, not killed: the reference (and a checkpoint to corrupt)."""
    base = tmp_path_factory.mktemp("uninterrupted")
    code, out, err = finish(fit(model_file, base / "out", "--checkpoint", str(base / "ckpt")))
    assert code == 0, err[-3000:]
    assert f"checkpoint: {DRAWS} of {DRAWS} draws per chain saved" in out
    return base / "out", base / "ckpt"


@pytest.mark.parametrize(
    ("sig", "min_draws"),
    [(signal.SIGTERM, 0), (signal.SIGKILL, EVERY)],  # killed right after warmup / mid-sampling
    ids=["sigterm", "sigkill"],
)
def test_killed_fit_resumes_to_the_same_draws(model_file, tmp_path, uninterrupted, sig, min_draws):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    process = fit(model_file, out, "--checkpoint", str(ckpt))
    done = wait_for_checkpoint(process, ckpt, min_draws)
    process.send_signal(sig)
    code, _, err = finish(process)
    if sig == signal.SIGTERM:  # a clean stop with the way forward
        assert code == 128 + signal.SIGTERM, err[-3000:]
        assert f"continue with --resume {ckpt}" in err
    else:
        assert code == -signal.SIGKILL
    saved = checkpoint_info(ckpt)["num_draws"]
    assert done <= saved < DRAWS and not (out / "logreg.nc").exists()

    code, text, err = finish(fit(model_file, out, "--resume", str(ckpt)))
    assert code == 0, err[-3000:]
    assert f"resuming from {ckpt}: {saved} of {DRAWS} draws per chain done" in text
    want, got = draws_of(uninterrupted[0]), draws_of(out)
    assert got["posterior.w"].shape == (2, DRAWS, 3)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert not list(ckpt.glob(".tmp-*"))  # what the kill left half-written is gone


def test_a_checkpoint_cut_while_written_is_ignored_or_refused(model_file, tmp_path, uninterrupted):
    kernel = make_kernel("sgld", lambda: None, step_size=1e-3)
    mcmc = MCMC(
        kernel,
        num_warmup=50,
        num_samples=EVERY,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    complete = load_checkpoint(mcmc, uninterrupted[1])
    assert complete["z"]["w"].shape == (2, DRAWS, 3)

    # killed while writing the next segment: a partial temporary file; the manifest still
    # names the previous complete checkpoint, which is what is read
    ckpt = tmp_path / "partial"
    shutil.copytree(uninterrupted[1], ckpt)
    segment = sorted(ckpt.glob("draws-*.nc"))[-1]
    (ckpt / ".tmp-killed.nc").write_bytes(segment.read_bytes()[:100])
    again = load_checkpoint(mcmc, ckpt)
    np.testing.assert_array_equal(again["z"]["w"], complete["z"]["w"])

    # a manifest naming a file that was cut short (stale manifest): refused, not half-read
    segment.write_bytes(segment.read_bytes()[:-200])
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        load_checkpoint(mcmc, ckpt)
    code, _, err = finish(fit(model_file, tmp_path / "out", "--resume", str(ckpt)))
    assert code == 2 and "does not match its checksum" in err
    assert not (tmp_path / "out" / "logreg.nc").exists()

    # a manifest cut short: refused with the way out
    shutil.rmtree(ckpt)
    shutil.copytree(uninterrupted[1], ckpt)
    manifest = ckpt / "manifest.json"
    manifest.write_text(manifest.read_text()[:150])
    with pytest.raises(CheckpointError, match="not a readable checkpoint manifest"):
        checkpoint_info(ckpt)

    # a fresh --checkpoint into a directory that holds one is refused, not overwritten
    code, _, err = finish(fit(model_file, tmp_path / "out", "--checkpoint", str(uninterrupted[1])))
    assert code == 2 and "add --resume" in err


def test_state_round_trip_keeps_structure_keys_and_dtypes():
    """NUTS-like nesting: NamedTuples, dicts with tuple keys, None, typed and raw PRNG keys."""
    from numpyro.infer.hmc import HMCState

    keys = jax.random.split(jax.random.key(0), 2)
    adapt = {("w", "b"): np.ones((2, 3), np.float32), ("c",): None}
    tree = HMCState(*np.arange(11, dtype=np.int32), adapt, keys)
    tree = tree._replace(z={"w": np.arange(3.0, dtype=np.float32)}, z_grad=jax.random.PRNGKey(1))
    leaves: list = []
    spec = encode_tree(jax.device_get(tree), leaves)
    back = decode_tree(json.loads(json.dumps(spec)), leaves)
    assert type(back) is HMCState and jax.tree.structure(back) == jax.tree.structure(tree)
    assert back.adapt_state[("c",)] is None and back.rng_key.dtype == keys.dtype
    np.testing.assert_array_equal(jax.random.key_data(back.rng_key), jax.random.key_data(keys))
    plain = [leaf for leaf in jax.tree.leaves(tree) if leaf.dtype != keys.dtype]
    restored = [leaf for leaf in jax.tree.leaves(back) if leaf.dtype != keys.dtype]
    for a, b in zip(restored, plain, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
