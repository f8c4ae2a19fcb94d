"""Compute the NumPyro NUTS reference posteriors used by the statistical tests, ONCE.

    .venv/bin/python tests/data/make_references.py            # every problem
    .venv/bin/python tests/data/make_references.py NAME ...   # only these

Each problem is an entry of ``PROBLEMS``: a model module of ``models/`` (``model`` and
``load_data``), its ``load_data`` keyword arguments, the latent site, and the NUTS settings
with their seed.  The result goes to ``tests/data/<name>.json``: the posterior means and sds
of the (flattened) site, their Monte Carlo standard errors, the minimum bulk ESS, the
maximum R-hat, the spec with every seed, and the library versions.  Tests read the JSON
(``json.load`` or :func:`load_reference`) and never rerun NUTS.  To add a problem (e.g. a
N = 100,000 logistic regression), add an entry and run the script with its name.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from models import logistic_regression  # noqa: E402

HERE = Path(__file__).resolve().parent

PROBLEMS: dict[str, dict] = {
    # SBPS paper §7.1 / Fig. 3: d = 20, N = 1000, covariate 0 has variance 6
    "logreg_nuts_n1000_d20_ill": dict(
        model="logistic_regression",
        data=dict(N=1000, d=20, seed=0, ill_conditioned=True),
        site="w",
        num_warmup=2000,
        num_samples=10000,
        num_chains=4,
        seed=20240601,
    ),
}

MODELS = {"logistic_regression": logistic_regression}


def compute(name: str, spec: dict) -> dict:
    """Run NUTS for one problem and return the JSON-ready reference."""
    module = MODELS[spec["model"]]
    args, kwargs = module.load_data(**spec["data"])
    mcmc = MCMC(
        NUTS(module.model),
        num_warmup=spec["num_warmup"],
        num_samples=spec["num_samples"],
        num_chains=spec["num_chains"],
        chain_method="vectorized",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(spec["seed"]), *args, **kwargs)
    seconds = time.perf_counter() - start
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)[spec["site"]], dtype=np.float64)
    flat = draws.reshape(draws.shape[0], draws.shape[1], -1)
    ess = np.array([float(az.ess(flat[:, :, j])) for j in range(flat.shape[-1])])
    mcse = np.array([float(az.mcse(flat[:, :, j])) for j in range(flat.shape[-1])])
    rhat = np.array([float(az.rhat(flat[:, :, j])) for j in range(flat.shape[-1])])
    return dict(
        name=name,
        spec=spec,
        site=spec["site"],
        mean=flat.mean(axis=(0, 1)).tolist(),
        sd=flat.std(axis=(0, 1), ddof=1).tolist(),
        mcse_mean=mcse.tolist(),
        min_ess_bulk=float(ess.min()),
        max_rhat=float(rhat.max()),
        seconds=seconds,
        versions=dict(jax=jax.__version__, numpyro=__import__("numpyro").__version__),
    )


def load_reference(name: str) -> dict:
    """The stored reference ``tests/data/<name>.json`` (means and sds as numpy arrays)."""
    with open(HERE / f"{name}.json") as handle:
        ref = json.load(handle)
    ref["mean"], ref["sd"] = np.asarray(ref["mean"]), np.asarray(ref["sd"])
    return ref


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="problems to (re)compute; default all")
    names = parser.parse_args(argv).names or list(PROBLEMS)
    for name in names:
        if name not in PROBLEMS:
            raise SystemExit(f"unknown problem {name!r}; known: {sorted(PROBLEMS)}")
        ref = compute(name, PROBLEMS[name])
        with open(HERE / f"{name}.json", "w") as handle:
            json.dump(ref, handle, indent=1)
        print(
            f"{name}: min ESS {ref['min_ess_bulk']:.0f}, max R-hat {ref['max_rhat']:.4f}, "
            f"{ref['seconds']:.0f} s"
        )


if __name__ == "__main__":
    main()
