"""Scale-out benchmark: the same run with the data on 1, 2 and 4 simulated CPU devices.

Each device count runs in its own subprocess (``XLA_FLAGS=--xla_force_host_platform_device_count``
and ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`` must be set before JAX starts).  Per device count it
prints: the set-up time (mode, preconditioner, control-variate anchor), the sampling wall time,
ESS/s (minimum over coordinates, sampling time only), the time of one full-data pass and of
one minibatch gradient, and the collectives in their compiled HLO.

On a CPU the simulated devices share the machine's cores (2 on the CI machine), so this shows
correctness and the overhead of sharding, not a speed-up.  Run it on a multi-GPU machine for
scaling figures.

Examples
--------
``python benchmarks/scale_out.py --N 1000000 --devices 1 2 4``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTE = "simulated CPU devices share the cores: this shows correctness and overhead, not speed-up"


def _timed(fn, *args, repeats: int = 5) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # compile
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) / repeats


def worker(N: int, d: int, n: int, warmup: int, samples: int) -> dict:
    """One device count (this process's): run SGLD with a control variate on sharded data."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.diagnostics import effective_sample_size
    from numpyro.infer import MCMC

    from pplsamplers import SGLD
    from pplsamplers.datasets import logistic_regression as lr
    from pplsamplers.model.sharding import collectives, shard_data

    (X, y), _ = lr.load_data(N=N, d=d, seed=0)
    args = shard_data((X, y)) if jax.device_count() > 1 else (X, y)
    kernel = SGLD(lr.model, subsample_size=n, control_variate=True)
    start = time.perf_counter()
    kernel._prepare(args, {})  # the shared warmup: mode, curvature, anchor (full-data passes)
    setup = time.perf_counter() - start
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, progress_bar=False)
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(0), *args)
    w = np.asarray(mcmc.get_samples()["w"])
    sampling = time.perf_counter() - start
    ess = float(np.min(effective_sample_size(w[None])))
    base = kernel.setup.potential.estimator  # full batch, model coordinates
    x = jnp.asarray(kernel.setup.mode)
    full = jax.jit(base.full_value_and_grad)
    idx = base.sample_indices(jax.random.PRNGKey(1))[:n]
    batch = jax.jit(lambda x, i: base.value_and_grad(x, i))
    return {
        "devices": jax.device_count(),
        "setup_s": setup,
        "sampling_s": sampling,
        "ess_min": ess,
        "ess_per_s": ess / sampling,
        "full_pass_ms": 1e3 * _timed(full, x),
        "full_pass_hlo": collectives(full.lower(x).compile().as_text()),
        "minibatch_grad_ms": 1e3 * _timed(batch, x, idx),
        "minibatch_hlo": collectives(batch.lower(x, idx).compile().as_text()),
        "mean": w.mean(0).round(4).tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--n", type=int, default=1000, help="minibatch size")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    sizes = (opts.N, opts.d, opts.n, opts.warmup, opts.samples)
    if opts.worker:
        print(json.dumps(worker(*sizes)))
        return
    print(
        f"# scale-out: SGLD + control variate, logistic regression N={opts.N}, d={opts.d}, "
        f"n={opts.n}, {opts.warmup} warmup + {opts.samples} draws; {os.cpu_count()} CPU cores"
    )
    print(f"# {NOTE}")
    header = (
        "devices",
        "set-up s",
        "sampling s",
        "min ESS",
        "ESS/s",
        "full pass ms",
        "full-pass collectives",
        "minibatch grad ms",
        "minibatch collectives",
        "mean w[:3]",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for devices in opts.devices:
        env = dict(os.environ, JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS="1", JAX_PLATFORMS="cpu")
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        command = [
            sys.executable,
            __file__,
            "--worker",
            *map(
                str,
                [
                    "--N",
                    opts.N,
                    "--d",
                    opts.d,
                    "--n",
                    opts.n,
                    "--warmup",
                    opts.warmup,
                    "--samples",
                    opts.samples,
                ],
            ),
        ]
        done = subprocess.run(
            command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600
        )
        if done.returncode:
            print(f"| {devices} | failed: {done.stderr[-500:]!r} |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        short = lambda c: ", ".join(f"{k} {v}" for k, v in c.items() if v) or "none"  # noqa: E731
        print(
            f"| {r['devices']} | {r['setup_s']:.1f} | {r['sampling_s']:.1f} | {r['ess_min']:.0f} "
            f"| {r['ess_per_s']:.1f} | {r['full_pass_ms']:.1f} | {short(r['full_pass_hlo'])} "
            f"| {r['minibatch_grad_ms']:.2f} | {short(r['minibatch_hlo'])} | {r['mean'][:3]} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
