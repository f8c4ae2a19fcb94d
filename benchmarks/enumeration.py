"""Discrete latents marginalised by enumeration at big N: every sampler at its defaults, and
AutoSampler, against NumPyro NUTS with the same enumeration.

    .venv/bin/python benchmarks/enumeration.py                                 # every configuration
    .venv/bin/python benchmarks/enumeration.py --configs mixture-1e6 --samplers auto

Models: ``models/mixture.py`` (three Gaussian components with ordered means, raw data around
70) and ``models/zero_inflated.py`` (a zero-inflated Poisson regression with an explicit
structural-zero indicator, raw covariates), both decorated with ``config_enumerate`` as
NumPyro's NUTS needs them, float32 data.  Configurations are ``<model>-<N>``.

Reference: NumPyro NUTS on the same model and data (it enumerates the per-datum assignments
over the full data at every gradient), dense mass matrix, 2 chains × (1000 warmup + 2000
draws) by default, started at the simulated values (from NumPyro's default start, uniform
in [−2, 2] on the unconstrained scale, the zero-inflated model's rates overflow with raw
covariates around 50 and NUTS finds no valid initial point), cached as JSON in ``--cache``;
its own run is the NUTS row.  Each sampler
then runs in a fresh process; the columns are ``harness.py``'s, with every latent global.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import Suite, main  # noqa: E402

CONFIGS = {
    "mixture-1e5": {"model": "mixture", "N": 100_000},
    "mixture-1e6": {"model": "mixture", "N": 1_000_000},
    "zip-1e5": {"model": "zero_inflated", "N": 100_000},
    "zip-1e6": {"model": "zero_inflated", "N": 1_000_000},
}


def _module(config: str):
    import importlib

    return importlib.import_module(f"models.{CONFIGS[config]['model']}")


def load(config: str) -> tuple:
    return _module(config).model, *_module(config).load_data(N=CONFIGS[config]["N"])


SUITE = Suite(
    script=__file__,
    configs=CONFIGS,
    load=load,
    dim=lambda config: 7 if config.startswith("mixture") else 4,
    globals=("w", "mu", "sigma", "alpha", "beta", "gate_logit"),
    cache=".enumeration",
    start=lambda config: _module(config).TRUTH,
)

if __name__ == "__main__":
    main(SUITE, __doc__.split("\n\n")[0])
