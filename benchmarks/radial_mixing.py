"""How fast each PDMP moves the radial direction |z|² of a D-dimensional Gaussian.

The slowest functional of the bouncy particle samplers in high dimension is radial: with
exact gradients on a Gaussian, |x|² − (x·v)² is constant along a line and at every bounce, so
only refreshment moves a particle's distance from the centre (docs/benchmarks/robustness.md,
"SBPS, pSBPS: slow mixing").  A hierarchical scale parameter follows that direction: it is why SBPS and pSBPS
miss the robustness suite's random-intercept model (D = 304) while the Boomerang, whose
elliptical flow and Gaussian velocities move |z|² every period, does not.

The model: y_i ~ N(θ, I_D), i = 1..N = 2000, with a flat prior, so the posterior is
N(ȳ, I/N), exactly unit scale in the shared warmup's whitened coordinates z.  For each
sampler and option set it runs ``MCMC(kernel, num_warmup=300, num_samples=1000,
num_chains=2, chain_method="vectorized")`` and prints the bulk ESS of r = |z|² (ArviZ), the
minimum bulk ESS over the D coordinates, r's mean / D (1 when right) and the bounces,
refreshments and proposals per draw.

    .venv/bin/python benchmarks/radial_mixing.py                      # SBPS, BPS, Boomerang
    .venv/bin/python benchmarks/radial_mixing.py --dims 20 300 --samplers sbps \
        --option relative_refresh_rate=0.3 --option relative_refresh_rate=1.0

Measured on 2026-11-26 (D = 300, the defaults before 9d97aa0 and 9168a01, ten proposals
(SBPS) and 20 rate evaluations (BPS) per draw; both now grow with D): radial ESS 3 for SBPS (control variates: refresh
at 0.1 of the bounce rate), 4 for BPS, 1214 for the Boomerang, in 2000 draws; SBPS at 1 × and
3 × the bounce rate 8 and 38 (min coordinate ESS 13 and 5), with 40 proposals per draw 46.
BPS with 200 rate evaluations per draw (its default at D = 300 since 9168a01), by refresh
rate per unit time (`--samplers bps --option refresh_rate=R`): radial ESS 11, 50, 100, 94,
72, 20 and smallest coordinate ESS 1509, 1116, 1052, 636, 170, 16 at R = 1, 3, √10 (its
default "auto" there), 5, 10, 30; at D = 100, 36 and 2107 at R = 1, 50 and 1142 at the
default √(100/30), 75 and 590 at 3 (`pplsamplers.kernels.pdmp.tuning.radial_refresh_rate`).

Examples
--------
>>> parse_option("relative_refresh_rate=0.3")
{'relative_refresh_rate': 0.3}
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import arviz as az  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.distributions import constraints  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

from pplsamplers.registry import make_kernel  # noqa: E402

jax.config.update("jax_enable_x64", True)
N = 2000


def model(y):
    theta = numpyro.sample(
        "theta", dist.ImproperUniform(constraints.real_vector, (), (y.shape[1],))
    )
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(theta, 1.0).to_event(1), obs=y)


def parse_option(text: str) -> dict:
    """``"name=value"`` -> ``{name: value}`` (the value as a Python literal)."""
    name, value = text.split("=", 1)
    return {name: ast.literal_eval(value)}


def measure(sampler: str, dim: int, options: dict) -> str:
    """One row: radial and coordinate ESS, r/D and the events per draw."""
    y = jnp.asarray(np.random.default_rng(0).normal(size=(N, dim)))
    mcmc = MCMC(
        make_kernel(sampler, model, **options),
        num_warmup=300,
        num_samples=1000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(1), y)
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"]) - np.asarray(y.mean(0))
    z = z * np.sqrt(N)
    radial = (z**2).sum(-1)
    radial_ess = float(az.ess(az.convert_to_dataset({"r": radial}))["r"].values)
    coordinate_ess = float(np.min(az.ess(az.convert_to_dataset({"z": z}))["z"].values))
    extra = mcmc.get_extra_fields()
    events = " ".join(
        f"{float(np.mean(extra[k])):5.1f}"
        for k in ("num_bounces", "num_refreshes", "num_proposals")
    )
    return (
        f"{sampler:10s} {dim:5d} {radial_ess:8.0f} {coordinate_ess:10.0f} "
        f"{radial.mean() / dim:6.3f}   {events}   {options or 'defaults'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", nargs="*", type=int, default=[300])
    parser.add_argument("--samplers", nargs="*", default=["sbps", "bps", "boomerang"])
    parser.add_argument(
        "--option", action="append", default=[], help="name=value; each one is its own row"
    )
    args = parser.parse_args()
    settings = [parse_option(text) for text in args.option] or [{}]
    print("sampler        D  ESS(|z|²)  min ESS(z)  r/D   bounces refresh proposals (per draw)")
    for dim in args.dims:
        for sampler in args.samplers:
            for options in settings:
                print(measure(sampler, dim, options), flush=True)


if __name__ == "__main__":
    main()
