"""Run samplers on plain and on sharded data in one process (a subprocess of the tests).

Usage: ``python -m tests.scaleout._sharded_worker OUT.json [sampler ...]``, with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` and
``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`` set by the caller before JAX starts.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from pplsamplers.datasets import logistic_regression as lr
from pplsamplers.model import inspect, make_potential
from pplsamplers.model.sharding import collectives, data_mesh, shard_data
from pplsamplers.registry import make_kernel

N, DIM = 4000, 3
OPTIONS = {
    "nuts": {},
    "sgld": {"subsample_size": 100, "control_variate": True},
    "sbps": {"subsample_size": 100},
    "boomerang": {"subsample_size": 100},
    "auto": {},
}


def run(name: str, args: tuple, chains: int = 1, method: str = "vectorized") -> MCMC:
    if name == "auto":
        from pplsamplers import AutoSampler

        kernel = AutoSampler(lr.model)
    else:
        kernel = make_kernel(name, lr.model, **OPTIONS.get(name, {}))
    mcmc = MCMC(
        kernel,
        num_warmup=50,
        num_samples=100,
        num_chains=chains,
        chain_method=method,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0), *args)
    return mcmc


def draws(name: str, args: tuple, chains: int = 1, method: str = "vectorized") -> np.ndarray:
    samples = run(name, args, chains, method).get_samples(group_by_chain=True)
    return np.asarray(samples["w"])


def chains_on_devices(plain: tuple) -> dict:
    """Two vectorised SGLD chains on a 2 x 2 ("chain", "data") mesh: each device holds one
    chain and half the rows."""
    mesh = data_mesh(chains=2)
    both = shard_data(plain, chains=2)
    mcmc = run("sgld", both, chains=2)
    samples = mcmc.get_samples(group_by_chain=True)["w"]
    position = mcmc.last_state.z["w"]
    return {
        "mesh": dict(mesh.shape),
        "max_abs_diff": float(np.max(np.abs(np.asarray(samples) - draws("sgld", plain, 2)))),
        "samples_spec": str(samples.sharding.spec),
        "samples_shard_shapes": sorted({tuple(s.data.shape) for s in samples.addressable_shards}),
        "state_spec": str(position.sharding.spec),
        "state_shard_shapes": sorted({tuple(s.data.shape) for s in position.addressable_shards}),
        "full_pass": full_pass_report(both),
    }


def full_pass_report(args: tuple) -> dict:
    potential = make_potential(inspect(lr.model, args, {}))
    x = jnp.full(potential.dim, 0.1)
    text = jax.jit(potential.estimator.full_value_and_grad).lower(x).compile().as_text()
    entry = next(line for line in text.splitlines() if line.startswith("ENTRY"))
    return {"collectives": collectives(text), "entry": entry}


def main() -> None:
    out, names = sys.argv[1], sys.argv[2:]
    (X, y), _ = lr.load_data(N=N, d=DIM, seed=0)
    plain = (X, y)
    sharded = shard_data(plain, data_mesh())
    result = {"devices": jax.device_count(), "full_pass": full_pass_report(sharded)}
    for name in names:
        a, b = draws(name, plain), draws(name, sharded)
        result[name] = {
            "max_abs_diff": float(np.max(np.abs(a - b))),
            "mean_plain": np.mean(a, axis=(0, 1)).tolist(),
            "mean_sharded": np.mean(b, axis=(0, 1)).tolist(),
            "sd_plain": np.std(a, axis=(0, 1)).tolist(),
        }
    # chains over the same sharded data: vectorised works; parallel (pmap) is refused clearly
    a, b = draws("sgld", plain, chains=2), draws("sgld", sharded, chains=2)
    result["sgld_two_chains"] = {"max_abs_diff": float(np.max(np.abs(a - b)))}
    result["chains_on_devices"] = chains_on_devices(plain)
    try:
        draws("sgld", sharded, chains=2, method="parallel")
        result["parallel_sharded"] = "ran"
    except ValueError as error:
        result["parallel_sharded"] = str(error)
    with open(out, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
