"""Compute the NUTS reference posteriors for the Boomerang tests and benchmark, once.

Logistic regression (``models/logistic_regression.py``) with ``load_data(N, d=20, seed=0)``:
NumPyro NUTS on the full data (the model with its plate un-subsampled), float64, 4 chains ×
2000 draws after 1000 warmup, seed 0.  Writes ``logreg_N<N>_nuts.json`` (means, sds, bulk
ESS, R-hat, settings) next to this file: N = 100000 (the statistical test and the
benchmark) by default, N = 10000 (the benchmark) with ``--N 10000``.  Tests load the JSON;
they never rerun this.

    .venv/bin/python tests/data/boomerang_reference.py            # N = 100000 (10-25 min)
    .venv/bin/python tests/data/boomerang_reference.py --N 10000  # (2-4 min)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

from models import logistic_regression  # noqa: E402
from pplsamplers.model import all_data_model  # noqa: E402

D, DATA_SEED = 20, 0
NUM_WARMUP, NUM_SAMPLES, NUM_CHAINS, SEED = 1000, 2000, 4, 0


def main() -> None:
    parser = argparse.ArgumentParser(description="NUTS reference for logistic regression")
    parser.add_argument("--N", type=int, default=100_000)
    N = parser.parse_args().N
    out = Path(__file__).with_name(f"logreg_N{N}_nuts.json")
    (X, y), kwargs = logistic_regression.load_data(N=N, d=D, seed=DATA_SEED)
    mcmc = MCMC(
        NUTS(all_data_model(logistic_regression.model)),
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        num_chains=NUM_CHAINS,
        chain_method="sequential",
        progress_bar=False,
    )
    started = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(SEED), X, y, **kwargs)
    seconds = time.perf_counter() - started
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)["w"])  # (chains, draws, D)
    flat = draws.reshape(-1, D)
    ess = az.ess(draws)
    rhat = az.rhat(draws)
    result = {
        "description": "NumPyro NUTS reference for models/logistic_regression.py, "
        f"load_data(N={N}, d=20, seed=0), full data, float64",
        "site": "w",
        "mean": flat.mean(0).tolist(),
        "sd": flat.std(0, ddof=1).tolist(),
        "ess_bulk": np.asarray(ess).tolist(),
        "rhat": np.asarray(rhat).tolist(),
        "settings": {
            "N": N,
            "d": D,
            "data_seed": DATA_SEED,
            "num_warmup": NUM_WARMUP,
            "num_samples": NUM_SAMPLES,
            "num_chains": NUM_CHAINS,
            "seed": SEED,
            "sampler": "numpyro.infer.NUTS (defaults)",
        },
        "versions": {"jax": jax.__version__, "numpyro": numpyro.__version__},
        "seconds": seconds,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"wrote {out} in {seconds:.0f} s; min ESS {float(np.min(ess)):.0f}, "
        f"max R-hat {float(np.max(rhat)):.4f}"
    )


if __name__ == "__main__":
    main()
