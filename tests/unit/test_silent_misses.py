"""Runs that were wrong without a word in NumPyro's own workflow (``MCMC.run``): each is now
right or warns inside the run.

* A varying-intercept binomial GLMM on the UC Berkeley admissions table (6 departments × 2,
  non-centred, a HalfNormal scale; 9 latents).  SGLD and HAMCMC at their defaults put every
  sd about 25 % too wide (the scale's 45 %), each coordinate's Stein sd ratio within its own
  slack: the averaged scale error flags it, from 2 coordinates on, on every draw of a small
  model.
* Stochastic volatility (T = 200 returns, a non-centred AR(1) log-volatility, the likelihood
  indexed by the plate).  HAMCMC sends the log-volatility to −60 in a few draws, whose scores
  swamp the Stein terms' Monte Carlo error: the potential at the draws flags them
  (``diagnostics.typical_set``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import jax
import numpy as np
import numpyro
import pytest
from numpyro.infer import MCMC, NUTS

from models.classic import make_data
from pplsamplers.diagnostics import SelfCheckWarning
from pplsamplers.registry import make_kernel

CASES = {
    "admissions": ("ucb", ("a", "s", "beta_male"), (1000, 2000)),
    "volatility": ("volatility", ("mu", "phi", "sigma_eta"), (300, 500)),
}
"""Per case: its model and data in ``models/classic.py``, the global sites compared, and
(warmup, draws)."""


def model_of(case: str) -> tuple:
    """The case's model and its data, made in the current precision."""
    return make_data()[CASES[case][0]]


def run(kernel, case: str, draws: tuple[int, int], key: int) -> tuple[dict, bool]:
    """The draws of 2 vectorised chains in float64, and whether the run warned."""
    mcmc = MCMC(kernel, num_warmup=draws[0], num_samples=draws[1], num_chains=2,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    with jax.enable_x64(True), warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        mcmc.run(jax.random.key(key), *model_of(case)[1])
        samples = {k: np.asarray(v) for k, v in mcmc.get_samples().items()}
    return samples, any(issubclass(r.category, SelfCheckWarning) for r in records)


REFERENCE = Path(__file__).resolve().parents[1] / "data" / "silent_misses_nuts.json"
"""NumPyro NUTS's mean and sd of each case's global sites, written by running this module:
``.venv/bin/python -m tests.unit.test_silent_misses``."""


def make_reference() -> None:
    """Write :data:`REFERENCE`: NUTS at ``target_accept_prob=0.95``, 2 × (1000 + 3000), float64."""
    out = {"spec": {"sampler": "NUTS", "target_accept_prob": 0.95, "draws": [1000, 3000],
                    "chains": 2, "key": 1, "float64": True},
           "versions": {"jax": jax.__version__, "numpyro": numpyro.__version__}, "sites": {}}  # fmt: skip
    for case, (_, sites, _) in CASES.items():
        kernel = NUTS(model_of(case)[0], target_accept_prob=0.95)
        samples, _ = run(kernel, case, (1000, 3000), 1)
        out["sites"][case] = {k: [float(samples[k].mean()), float(samples[k].std())] for k in sites}
    REFERENCE.write_text(json.dumps(out, indent=1) + "\n")


def reference(case: str) -> dict[str, tuple[float, float]]:
    """The stored NUTS mean and sd of the case's global sites."""
    return json.loads(REFERENCE.read_text())["sites"][case]


@pytest.mark.parametrize(
    "case, sampler", [("admissions", "sgld"), ("admissions", "hamcmc"), ("volatility", "hamcmc")]
)
def test_a_run_is_right_or_warns_inside_mcmc_run(case, sampler):
    samples, warned = run(make_kernel(sampler, model_of(case)[0]), case, CASES[case][2], 0)
    errors = {
        k: (abs(samples[k].mean() - m) / s, abs(samples[k].std() / s - 1))
        for k, (m, s) in reference(case).items()
    }
    right = all(mean <= 0.25 and sd <= 0.30 for mean, sd in errors.values())
    assert right or warned, errors


if __name__ == "__main__":
    make_reference()
