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
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS

from pplsamplers.diagnostics import SelfCheckWarning
from pplsamplers.registry import make_kernel

ADMIT = jnp.array([512.0, 89, 353, 17, 120, 202, 138, 131, 53, 94, 22, 24])
APPLICATIONS = jnp.array([825.0, 108, 560, 25, 325, 593, 417, 375, 191, 393, 373, 341])


def admissions(dept, male, applications, admit):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    z = numpyro.sample("z_dept", dist.Normal(0.0, 1.0).expand([6]).to_event(1))
    beta_male = numpyro.sample("beta_male", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", admit.shape[0]):
        logits = a + s * z[dept] + beta_male * male
        numpyro.sample("admit", dist.Binomial(applications, logits=logits), obs=admit)


def volatility(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))
    sigma = numpyro.sample("sigma_eta", dist.HalfNormal(1.0))
    eps = numpyro.sample("eps", dist.Normal(0.0, 1.0).expand([y.shape[0]]).to_event(1))
    h0 = mu + sigma / jnp.sqrt(1.0 - phi**2) * eps[0]

    def step(h, e):
        h = mu + phi * (h - mu) + sigma * e
        return h, h

    h = jnp.concatenate([h0[None], jax.lax.scan(step, h0, eps[1:])[1]])
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(0.0, jnp.exp(h[idx] / 2)), obs=y[idx])


def returns() -> jnp.ndarray:
    """200 returns of a log-volatility with mean −1, persistence 0.95 and innovation sd 0.25."""
    rng = np.random.default_rng(0)
    h = np.empty(200)
    h[0] = -1.0 + 0.25 / np.sqrt(1 - 0.95**2) * rng.normal()
    for t in range(1, 200):
        h[t] = -1.0 + 0.95 * (h[t - 1] + 1.0) + 0.25 * rng.normal()
    return jnp.asarray(np.exp(h / 2) * rng.normal(size=200))


CASES = {
    "admissions": (
        admissions,
        lambda: (
            jnp.repeat(jnp.arange(6), 2),
            jnp.tile(jnp.array([1.0, 0.0]), 6),
            APPLICATIONS,
            ADMIT,
        ),  # fmt: skip
        ("a", "s", "beta_male"),
        (1000, 2000),
    ),
    "volatility": (volatility, lambda: (returns(),), ("mu", "phi", "sigma_eta"), (300, 500)),
}


def run(kernel, case: str, draws: tuple[int, int], key: int) -> tuple[dict, bool]:
    """The draws of 2 vectorised chains in float64, and whether the run warned."""
    model, data, _, _ = CASES[case]
    mcmc = MCMC(kernel, num_warmup=draws[0], num_samples=draws[1], num_chains=2,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    with jax.enable_x64(True), warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        mcmc.run(jax.random.key(key), *data())
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
    for case, (model, _, sites, _) in CASES.items():
        samples, _ = run(NUTS(model, target_accept_prob=0.95), case, (1000, 3000), 1)
        out["sites"][case] = {k: [float(samples[k].mean()), float(samples[k].std())] for k in sites}
    REFERENCE.write_text(json.dumps(out, indent=1) + "\n")


def reference(case: str) -> dict[str, tuple[float, float]]:
    """The stored NUTS mean and sd of the case's global sites."""
    return json.loads(REFERENCE.read_text())["sites"][case]


@pytest.mark.parametrize(
    "case, sampler", [("admissions", "sgld"), ("admissions", "hamcmc"), ("volatility", "hamcmc")]
)
def test_a_run_is_right_or_warns_inside_mcmc_run(case, sampler):
    model, _, _, draws = CASES[case]
    samples, warned = run(make_kernel(sampler, model), case, draws, 0)
    errors = {
        k: (abs(samples[k].mean() - m) / s, abs(samples[k].std() / s - 1))
        for k, (m, s) in reference(case).items()
    }
    right = all(mean <= 0.25 and sd <= 0.30 for mean, sd in errors.values())
    assert right or warned, errors


if __name__ == "__main__":
    make_reference()
