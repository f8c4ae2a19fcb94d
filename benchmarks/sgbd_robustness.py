"""Robustness of SGBD to the step size, side by side with SGLD, c-SGLD and NUTS.

Two problems from the SGBD paper, each swept over a decade of step sizes:

* the skew-normal toy of §5.0.1 (``models/skew_normal.py``): target sd 1, minibatch gradient
  noise of sd τ = 1 (the target sd), shapes α = 5 and 20; step = σ for SGBD and √(2ε) (the
  sd of the injected noise) for SGLD and c-SGLD, in units of the target sd;
* logistic regression with unstandardised covariates (§5.1.1, scale heterogeneity;
  ``models/heavy_tailed_logistic.py``): covariate scales (3, 1, 0.3), N = 10 000, n = 1 % N;
  the posterior sds differ by about 11×; steps in units of the smallest posterior sd.  The
  reference is a NumPyro NUTS run; "SGBD adaptive" is corrected SGBD with σ_j = 1.702/(1.233 τ̂_j)
  adapted during warmup, then frozen (§4.2).

Every chain starts at the reference mean (as in the paper, to isolate the invariant law).
Columns: relative bias of the mean max_j |mean_j − ref_j| / sd_j, bias of the variance
max_j |var_j / ref_var_j − 1|, median (over coordinates) bulk ESS from ArviZ, ESS per epoch
(N per-datum evaluations) and ESS per second of sampling (compile time excluded).

Usage::

    python benchmarks/sgbd_robustness.py            # full run, about 4 min on 2 cores
    python benchmarks/sgbd_robustness.py --quick    # smaller, about 1 min
    python benchmarks/sgbd_robustness.py --plot docs/_static/figures/sgbd_bias_vs_step.png

``--plot`` also draws the skew-normal toys' biases against the step size, one panel per shape
(the SGBD page's figure).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
jax.config.update("jax_enable_x64", True)

import arviz as az  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

from models import heavy_tailed_logistic, skew_normal  # noqa: E402
from pplsamplers.estimator import Estimator, build_estimator  # noqa: E402
from pplsamplers.kernels.sgmcmc import csgld, sgbd, sgld  # noqa: E402

BARKER_VARIANTS = ("vanilla", "corrected", "extreme")
HEADER = (
    f"{'step':>6}  {'method':<16} {'bias mean':>9} {'bias var':>9} {'med ESS':>8} "
    f"{'ESS/epoch':>10} {'ESS/s':>8}"
)


def sampler(method: str, step: jax.Array, dim: int) -> tuple[Callable, Any]:
    """The kernel and params of ``method`` at ``step`` (σ for SGBD, √(2ε) for SGLD / c-SGLD)."""
    if method in BARKER_VARIANTS:
        return sgbd.build_kernel(method), sgbd.make_params(step, dim)
    epsilon = step**2 / 2.0
    if method == "SGLD":
        return sgld.build_kernel(), sgld.SGLDParams(epsilon, jnp.ones(dim, epsilon.dtype))
    return csgld.build_kernel(), csgld.CSGLDParams(epsilon)


def sample_sweep(
    method: str,
    estimator: Estimator,
    start: np.ndarray,
    steps_sd: np.ndarray,
    key: jax.Array,
    chains: int,
    steps: int,
    burn: int,
    adapt_during_burn: bool = False,
) -> tuple[np.ndarray, float]:
    """Draws (F, chains, steps − burn, D) for the F step sizes ``steps_sd``; seconds per F.

    SGBD: σ = step.  SGLD and c-SGLD: √(2ε) = step.  The step is a traced kernel param, so
    one compilation serves every step size.  With ``adapt_during_burn`` (SGBD only) the burn-in
    is SGBD's warmup: σ_j = 1.702/(1.233 τ̂_j) after every step (§4.2), frozen afterwards.
    """

    def run_one(step_size: jax.Array, sweep_key: jax.Array) -> jax.Array:
        kernel, params = sampler(method, step_size, estimator.dim)
        module = sgbd if method in BARKER_VARIANTS else sgld if method == "SGLD" else csgld
        state = module.init(sweep_key, jnp.asarray(start), estimator, params)

        def burn_step(carry: tuple, k: jax.Array) -> tuple[tuple, None]:
            s, p = carry
            s, _ = kernel(k, s, estimator, p)
            if adapt_during_burn:
                p = p._replace(step_size=sgbd.adaptive_step_size(s.tau, p.step_size))
            return (s, p), None

        def chain(chain_key: jax.Array) -> jax.Array:
            burn_key, sample_key = jax.random.split(chain_key)
            (current, frozen), _ = jax.lax.scan(
                burn_step, (state, params), jax.random.split(burn_key, burn)
            )

            def record(s: Any, k: jax.Array) -> tuple[Any, jax.Array]:
                s, _ = kernel(k, s, estimator, frozen)
                return s, s.position

            return jax.lax.scan(record, current, jax.random.split(sample_key, steps - burn))[1]

        return jax.vmap(chain)(jax.random.split(sweep_key, chains))

    run = jax.jit(lambda sizes, k: jax.vmap(run_one, in_axes=(0, None))(sizes, k))
    sizes = jnp.asarray(steps_sd, dtype=jnp.float64)
    compiled = run.lower(sizes, key).compile()
    started = time.perf_counter()
    draws = jax.block_until_ready(compiled(sizes, key))
    return np.asarray(draws), (time.perf_counter() - started) / len(steps_sd)


def biases(draws: np.ndarray, ref_mean: np.ndarray, ref_sd: np.ndarray) -> tuple[float, float]:
    """(max_j |mean_j − ref_j| / sd_j, max_j |var_j / ref_var_j − 1|) of ``draws``."""
    mean, var = draws.mean(axis=(0, 1)), draws.var(axis=(0, 1))
    return float(np.max(np.abs(mean - ref_mean) / ref_sd)), float(
        np.max(np.abs(var / ref_sd**2 - 1.0))
    )


def summary_row(
    label: str,
    method: str,
    draws: np.ndarray,
    ref_mean: np.ndarray,
    ref_sd: np.ndarray,
    epochs: float,
    seconds: float,
) -> str:
    """One table line: relative bias of the mean and of the variance (max over coordinates)."""
    if not np.all(np.isfinite(draws)):
        return f"{label:>6}  {method:<16} {'diverged':>9}"
    bias_mean, bias_var = biases(draws, ref_mean, ref_sd)
    ess = float(np.median(np.atleast_1d(az.ess(draws))))
    return (
        f"{label:>6}  {method:<16} {bias_mean:9.3f} {bias_var:9.3f} {ess:8.0f} "
        f"{ess / epochs:10.3g} {ess / seconds:8.3g}"
    )


def sweep_rows(
    estimator: Estimator,
    ref_mean: np.ndarray,
    ref_sd: np.ndarray,
    fractions: tuple[float, ...],
    unit: float,
    key: jax.Array,
    chains: int,
    steps: int,
    burn: int,
    adaptive: bool,
) -> tuple[list[str], dict[str, np.ndarray]]:
    """Rows for every method at every step = fraction × unit, grouped by step, and each
    method's (fraction, bias of the mean, bias of the variance) as an (F, 3) array."""
    epochs = chains * steps * estimator.n / estimator.N
    sizes = np.asarray(fractions) * unit
    results = {}
    for method in BARKER_VARIANTS + ("SGLD", "c-SGLD"):
        results[method] = sample_sweep(method, estimator, ref_mean, sizes, key, chains, steps, burn)
    rows = []
    names = {m: f"SGBD {m}" if m in BARKER_VARIANTS else m for m in results}
    for i, fraction in enumerate(fractions):
        for method, (draws, seconds) in results.items():
            rows.append(
                summary_row(
                    f"{fraction:g}", names[method], draws[i], ref_mean, ref_sd, epochs, seconds
                )
            )
    curves = {
        names[method]: np.asarray(
            [(f, *biases(d, ref_mean, ref_sd)) for f, d in zip(fractions, draws, strict=True)]
        )
        for method, (draws, _) in results.items()
    }
    if adaptive:
        draws, seconds = sample_sweep(
            "corrected",
            estimator,
            ref_mean,
            sizes[:1],
            key,
            chains,
            steps,
            burn,
            adapt_during_burn=True,
        )
        rows.append(
            summary_row("auto", "SGBD adaptive", draws[0], ref_mean, ref_sd, epochs, seconds)
        )
    return rows, curves


def nuts_row(
    model: Callable,
    args: tuple,
    kwargs: dict,
    site: str,
    ref_mean: np.ndarray | None,
    ref_sd: np.ndarray | None,
    key: jax.Array,
    N: int,
    samples: int = 1000,
    chains: int = 4,
) -> tuple[str, np.ndarray, np.ndarray]:
    """NumPyro NUTS on the full data; returns (row, mean, sd).  One gradient = one epoch."""
    mcmc = MCMC(
        NUTS(model),
        num_warmup=samples // 2,
        num_samples=samples,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    started = time.perf_counter()
    mcmc.run(key, *args, extra_fields=("num_steps",), **kwargs)
    # NumPyro dispatches the chain asynchronously: stop the clock once the draws exist
    jax.block_until_ready((mcmc.get_samples(), mcmc.get_extra_fields()))
    seconds = time.perf_counter() - started
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)[site]).reshape(chains, samples, -1)
    epochs = float(np.sum(mcmc.get_extra_fields()["num_steps"]))
    mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
    ref_mean = mean if ref_mean is None else ref_mean
    ref_sd = sd if ref_sd is None else ref_sd
    return summary_row("-", "NUTS", draws, ref_mean, ref_sd, epochs, seconds), mean, sd


def skew_normal_table(
    shape: float, key: jax.Array, chains: int, steps: int, burn: int, fractions: tuple[float, ...]
) -> list[str]:
    args, kwargs = skew_normal.load_data(shape=shape, noise_sd=1.0, subsample_size=10)
    noise = args[0]
    terms = skew_normal.hand_written_terms(noise, shape, kwargs["loc"], kwargs["scale"])
    estimator = build_estimator(terms, dim=1, N=noise.shape[0], n=kwargs["subsample_size"])
    mean, sd = skew_normal.moments(shape)
    ref_mean, ref_sd = np.array([mean]), np.array([sd])
    rows = [
        f"skew-normal toy, shape {shape:g} (mean {mean:.3f}, sd 1), gradient noise sd "
        f"τ = 1, n = {estimator.n} of N = {estimator.N}; step in target sds",
        HEADER,
    ]
    swept, curves = sweep_rows(
        estimator, ref_mean, ref_sd, fractions, 1.0, key, chains, steps, burn, adaptive=False
    )
    full_data = {k: v for k, v in kwargs.items() if k != "subsample_size"}
    row, _, _ = nuts_row(
        skew_normal.model, args, full_data, "theta", ref_mean, ref_sd, key, estimator.N
    )
    return rows + swept + [row], curves


def logistic_table(
    key: jax.Array, chains: int, steps: int, burn: int, fractions: tuple[float, ...], N: int
) -> list[str]:
    (X, y), kwargs = heavy_tailed_logistic.load_data(
        N=N, scales=(3.0, 1.0, 0.3), tail="normal", labels="logistic", seed=0
    )
    nuts, ref_mean, ref_sd = nuts_row(
        heavy_tailed_logistic.model, (X, y), kwargs, "w", None, None, key, N
    )
    terms = heavy_tailed_logistic.hand_written_terms(X, y)
    estimator = build_estimator(terms, dim=X.shape[1], N=N, n=N // 100)
    rows = [
        f"logistic regression, unstandardised covariates (scales 3, 1, 0.3), N = {N}, "
        f"n = {estimator.n}; NUTS posterior sds {np.array2string(ref_sd, precision=3)}; "
        "step in units of the smallest",
        HEADER,
    ]
    rows += sweep_rows(
        estimator,
        ref_mean,
        ref_sd,
        fractions,
        float(ref_sd.min()),
        key,
        chains,
        steps,
        burn,
        adaptive=True,
    )[0]
    return rows + [nuts + "  (the reference itself)"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller run (about 1 min)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", help="PNG of the toys' biases against the step size")
    options = parser.parse_args(argv)
    if options.quick:
        chains, steps, shapes, N = 4, 4000, (20.0,), 5000
    else:
        chains, steps, shapes, N = 8, 20000, (5.0, 20.0), 10000
    burn = steps // 10
    fractions = (0.1, 0.25, 0.5, 1.0)
    key = jax.random.key(options.seed)
    started = time.perf_counter()
    print(
        f"SGBD robustness benchmark: {chains} chains x {steps} steps ({burn} burn-in), "
        f"seed {options.seed}\n"
    )
    toys = {}
    for shape in shapes:
        rows, toys[shape] = skew_normal_table(shape, key, chains, steps, burn, fractions)
        print("\n".join(rows), "\n")
    print("\n".join(logistic_table(key, chains, steps, burn, (0.25, 0.5, 1.0, 2.5), N)))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if options.plot:
        plot_toys(toys, options.plot, f"{chains} chains × {steps - burn} draws")
        print(f"wrote {options.plot}")


def plot_toys(toys: dict[float, dict[str, np.ndarray]], path: str, run: str) -> None:
    """The skew-normal toys' bias of the mean (solid) and of the variance (dashed) against
    the step size, one panel per shape; the extreme variant is left out (its bias is the
    price of its speed, an order of magnitude above the others')."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(toys), figsize=(4.0 * len(toys), 3.3), squeeze=False)
    for ax, (shape, curves) in zip(axes[0], toys.items(), strict=True):
        for colour, (name, curve) in enumerate(
            (n, c) for n, c in curves.items() if n != "SGBD extreme"
        ):
            ax.plot(curve[:, 0], curve[:, 1], "o-", color=f"C{colour}", ms=3, label=name)
            ax.plot(curve[:, 0], curve[:, 2], "s--", color=f"C{colour}", ms=3, mfc="white")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("step (σ for SGBD, √(2ε) for SGLD), in target sds")
        ax.set_title(f"skew normal, shape {shape:g}, gradient noise τ = 1", fontsize=9)
    axes[0, 0].set_ylabel("bias")
    axes[0, 0].plot([], [], "k-", label="|mean error| / sd")
    axes[0, 0].plot([], [], "k--", label="|variance ratio − 1|")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"bias against the step size ({run} per point)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
