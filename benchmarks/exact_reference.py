"""A second, longer reference for a configuration of ``hierarchical.py`` whose NUTS reference is
weak: the Boomerang at the full batch (exact: no minibatch noise, no step-size bias), run long,
and a sampler's and the cached NUTS run's errors on the global latents against it.

    .venv/bin/python benchmarks/exact_reference.py --config poisson-1e5-1e3 --sampler sgbd

The Boomerang runs 2 vectorised chains × (500 + ``--reference-draws``) at
``subsample_size = N``; the sampler 2 × (500 + ``--draws``) at its defaults.  Each error is
|Δmean| / sd of the long run, printed with its Monte Carlo standard error
sqrt(1/ESS_reference + 1/ESS_sampler) (the NUTS row's own ESS is in its cache file).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import _flat  # noqa: E402
from benchmarks.hierarchical import SUITE, load  # noqa: E402


def moments(name: str, loaded: tuple, draws: int, **options) -> dict:
    """``{site: (mean, sd, bulk ESS)}`` of the global latents after a run of ``name`` on
    ``loaded = (model, args, kwargs)``."""
    import arviz as az
    import jax
    import numpy as np
    from numpyro.infer import MCMC

    from pplsamplers.registry import make_kernel

    model, args, kwargs = loaded
    mcmc = MCMC(
        make_kernel(name, model, **options), num_warmup=500, num_samples=draws, num_chains=2,
        chain_method="vectorized", progress_bar=False,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.key(7), *args, **kwargs)
    for warning in caught:
        print(f"{name}: {warning.message}")
    flat = _flat(mcmc.get_samples(group_by_chain=True), SUITE.globals)
    return {
        site: (value.mean((0, 1)), value.std((0, 1), ddof=1), np.asarray(az.ess(value)))
        for site, value in flat.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="poisson-1e5-1e3")
    parser.add_argument("--sampler", default="sgbd")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--reference-draws", type=int, default=4000)
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".hierarchical")
    args = parser.parse_args()
    import numpy as np

    loaded = load(args.config)
    N = loaded[1][0].shape[0]
    exact = moments("boomerang", loaded, args.reference_draws, subsample_size=N)
    rows = {args.sampler: moments(args.sampler, loaded, args.draws)}
    for cached in sorted(args.cache.glob(f"{args.config}_nuts_*.json")):
        nuts = json.loads(cached.read_text())
        rows[f"nuts ({cached.stem})"] = {
            site: (np.asarray(mean), np.asarray(sd), np.full(len(mean), np.inf))
            for site, (mean, sd) in nuts["moments"].items()
            if site in exact
        }
    print(f"against the Boomerang at n = N, 2 × (500 + {args.reference_draws})")
    for label, row in rows.items():
        for site, (mean, sd, ess) in row.items():
            ref_mean, ref_sd, ref_ess = exact[site]
            error = (mean - ref_mean) / ref_sd
            mcse = np.sqrt(1 / ref_ess + 1 / ess)
            print(
                f"{label:>28} {site:>6}: Δmean/sd {np.round(error, 3).tolist()} "
                f"± {np.round(mcse, 3).tolist()}, sd ratio {np.round(sd / ref_sd, 3).tolist()}"
            )


if __name__ == "__main__":
    main()
