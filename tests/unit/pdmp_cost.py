"""A PDMP's default cost per draw, counted in a run (shared by test_bps.py and test_sbps.py)."""

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC


def gaussian_mean_model(y):
    """θ ~ N(0, 10² I), y_i ~ N(θ, I): a D-dimensional posterior near N(ȳ, I / N)."""
    theta = numpyro.sample("theta", dist.Normal(0.0, 10.0).expand([y.shape[1]]).to_event(1))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(theta, 1.0).to_event(1), obs=y)


def counters_per_draw(kernel_class: type, dim: int, *fields: str) -> dict[str, float]:
    """The means per draw of the ``sample_stats`` counters ``fields`` of ``kernel_class`` with
    its defaults on :func:`gaussian_mean_model` in ``dim`` dimensions (N = 50, full batch)."""
    y = jax.random.normal(jax.random.key(dim), (50, dim))
    mcmc = MCMC(
        kernel_class(gaussian_mean_model), num_warmup=150, num_samples=100, progress_bar=False
    )
    mcmc.run(jax.random.key(1), y, extra_fields=fields)
    extra = mcmc.get_extra_fields()
    return {field: float(np.mean(extra[field])) for field in fields}
