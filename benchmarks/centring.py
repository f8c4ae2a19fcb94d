"""Per-group centring on a funnel: each kernel at its defaults on a mixed model written centred,
with the set-up's automatic centring and with the model kept as written.

The model is ``models/gaussian_mixed.py`` with ``centred=True``: u_g ~ N(0, τ²) per group,
y ~ N(α + xᵀβ + u_g, σ²) on raw covariates, groups of 1 row to a few percent of N (the
robustness suite's ``mixed_centred`` at the defaults below).  With σ = 3 a row tells a group a
ninth of what its prior does, so most groups are barely informed and, written centred, they
form a funnel with τ.  The reference is exact (τ integrated on a grid).  Each row: 2
vectorised chains × (300 + 500) draws, float32; τ's bulk ESS and |Δmean| / sd, the group
effects' RMS |Δmean| / sd and RMS |sd ratio − 1| (z = u / τ), wall seconds (set-up included)
and the self-check's first line.

    .venv/bin/python benchmarks/centring.py
    .venv/bin/python benchmarks/centring.py --samplers boomerang --groups 400 --rows 4000
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import arviz as az  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

from models import gaussian_mixed  # noqa: E402
from pplsamplers import make_kernel  # noqa: E402
from pplsamplers.diagnostics import SelfCheckWarning  # noqa: E402
from pplsamplers.warmup import SetupOptions, setup  # noqa: E402

SEED = 20261122


def row(sampler: str, centring: bool, args: tuple, kwargs: dict, ref: dict) -> str:
    """One table row: the kernel at its defaults on the set-up with or without centring."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        options = SetupOptions(gaussian_mixed.model, centring=centring, needs_mode=True)
        shared = setup(options, args, kwargs)
        kernel = make_kernel(sampler, gaussian_mixed.model, setup=shared)
        mcmc = MCMC(kernel, num_warmup=300, num_samples=500, num_chains=2,
                    chain_method="vectorized", progress_bar=False)  # fmt: skip
        mcmc.run(jax.random.key(SEED), *args, **kwargs)
        draws = {k: np.asarray(v, np.float64) for k, v in mcmc.get_samples(True).items()}
    seconds = time.perf_counter() - start
    checks = [str(r.message).splitlines()[0] for r in records if r.category is SelfCheckWarning]
    tau, z = draws["tau"], draws["z"].reshape(-1, draws["z"].shape[-1])
    tau_err = abs(tau.mean() - ref["tau"]["mean"]) / ref["tau"]["sd"]
    z_mean = np.sqrt(np.mean(((z.mean(0) - ref["z"]["mean"]) / ref["z"]["sd"]) ** 2))
    z_sd = np.sqrt(np.mean((z.std(0, ddof=1) / ref["z"]["sd"] - 1) ** 2))
    verdict = checks[0].removeprefix("pplsamplers self-check FAILED: ")[:70] if checks else "-"
    label = "centred by its data" if "u_decentered" in draws else "as written"
    return (
        f"| {sampler} | {label} | {float(az.ess(tau)):.0f} | {tau_err:.2f} | {z_mean:.3f} "
        f"| {z_sd:.3f} | {seconds:.0f} | {verdict} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samplers", nargs="*", default=["boomerang", "sgld", "sbps", "sgbd"])
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--noise", type=float, default=3.0, help="σ of the rows")
    args = parser.parse_args()
    data, kwargs = gaussian_mixed.load_data(
        N=args.rows, num_groups=args.groups, seed=13, centred=True, noise_sd=args.noise
    )
    ref = gaussian_mixed.reference(*data, **kwargs)
    print(f"N = {args.rows}, {args.groups} groups, σ = {args.noise:g}; exact τ "
          f"{ref['tau']['mean']:.3f} ± {ref['tau']['sd']:.3f}")  # fmt: skip
    print("| sampler | coordinates | τ bulk ESS | τ err (sd) | z RMS err | z RMS sd err "
          "| wall (s) | self-check |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for sampler in args.samplers:
        for centring in (True, False):
            print(row(sampler, centring, data, kwargs, ref), flush=True)


if __name__ == "__main__":
    main()
