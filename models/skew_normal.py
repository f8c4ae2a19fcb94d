"""The toy of the SGBD paper (§5.0.1): a skew-normal target with injected Gaussian gradient noise.

    θ ~ SkewNormal(loc, scale, shape),   density 2/ω φ(u) Φ(shape·u),  u = (θ − loc)/ω.

The paper adds isotropic Gaussian noise of sd τ to the exact gradient.  Here the noise comes
from the data plate, so that every pplsamplers kernel sees it through the usual minibatch
machinery (including the per-example gradients SGBD uses to estimate τ): N pseudo-data carry
the per-datum log-density terms c_i θ, with c_i fixed, centred Gaussian quantiles (Σ c_i = 0).

* The full-data log density is exactly the skew-normal one (the c_i sum to zero).
* A minibatch of n indices (drawn with replacement) adds (N/n) Σ c_{i_k} to the gradient:
  noise independent of θ, with sd ``noise_sd`` = τ when the population sd of c is τ√n/N, and
  Gaussian up to the discreteness of N = 10⁴ quantiles.

By default ``scale`` is chosen so that the target sd is 1; then the paper's settings read
directly: τ = target sd = 1 and steps of 10 % or 50 % of the target sd.  The mean and sd are
analytic: mean = loc + ω δ √(2/π), var = ω²(1 − 2δ²/π), δ = shape/√(1 + shape²).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import random
from jax.scipy.special import log_ndtr
from numpyro.distributions import constraints
from numpyro.distributions.util import promote_shapes


class SkewNormal(dist.Distribution):
    """Azzalini's skew-normal SN(loc, scale, alpha), alpha the shape (NumPyro has none)."""

    arg_constraints = {
        "loc": constraints.real,
        "scale": constraints.positive,
        "alpha": constraints.real,
    }
    support = constraints.real
    reparametrized_params = ["loc", "scale"]

    def __init__(self, loc=0.0, scale=1.0, alpha=0.0, *, validate_args=None):
        self.loc, self.scale, self.alpha = promote_shapes(loc, scale, alpha)
        batch_shape = jnp.broadcast_shapes(jnp.shape(loc), jnp.shape(scale), jnp.shape(alpha))
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        """δ|Z₀| + √(1−δ²) Z₁ is SN(0, 1, alpha), δ = alpha/√(1 + alpha²)."""
        key_0, key_1 = random.split(key)
        size = sample_shape + self.batch_shape
        delta = self.alpha / jnp.sqrt(1.0 + self.alpha**2)
        z0 = jnp.abs(random.normal(key_0, size))
        z1 = random.normal(key_1, size)
        return self.loc + self.scale * (delta * z0 + jnp.sqrt(1.0 - delta**2) * z1)

    def log_prob(self, value):
        u = (value - self.loc) / self.scale
        return (
            math.log(2.0)
            - jnp.log(self.scale)
            - 0.5 * u**2
            - 0.5 * math.log(2 * math.pi)
            + log_ndtr(self.alpha * u)
        )

    @property
    def mean(self):
        delta = self.alpha / jnp.sqrt(1.0 + self.alpha**2)
        return self.loc + self.scale * delta * math.sqrt(2 / math.pi)

    @property
    def variance(self):
        delta = self.alpha / jnp.sqrt(1.0 + self.alpha**2)
        return self.scale**2 * (1.0 - 2.0 * delta**2 / math.pi)


def standard_scale(shape: float) -> float:
    """The ω that gives SN(·, ω, shape) unit standard deviation."""
    delta = shape / math.sqrt(1.0 + shape**2)
    return 1.0 / math.sqrt(1.0 - 2.0 * delta**2 / math.pi)


def moments(shape: float, loc: float = 0.0, scale: float | None = None) -> tuple[float, float]:
    """Analytic ``(mean, sd)`` of SN(loc, scale, shape) (``scale=None``: unit sd)."""
    scale = standard_scale(shape) if scale is None else scale
    delta = shape / math.sqrt(1.0 + shape**2)
    mean = loc + scale * delta * math.sqrt(2.0 / math.pi)
    return mean, scale * math.sqrt(1.0 - 2.0 * delta**2 / math.pi)


def log_density(theta, shape: float, loc: float = 0.0, scale: float | None = None):
    """Log density of the target at ``theta`` (for plots and quadrature)."""
    scale = standard_scale(shape) if scale is None else scale
    return SkewNormal(loc, scale, shape).log_prob(jnp.asarray(theta))


def model(
    noise,
    shape: float = 5.0,
    loc: float = 0.0,
    scale: float = 1.0,
    subsample_size: int | None = None,
):
    """θ ~ SkewNormal(loc, scale, shape); pseudo-data i adds c_i θ (Σ c_i = 0): the gradient noise."""
    theta = numpyro.sample("theta", SkewNormal(loc, scale, shape))
    with numpyro.plate("data", noise.shape[0], subsample_size=subsample_size) as idx:
        numpyro.factor("gradient_noise", noise[idx] * theta)


def noise_coefficients(noise_sd: float, subsample_size: int, N: int = 10_000) -> np.ndarray:
    """Centred Gaussian quantiles c_1..c_N whose minibatch sum (N/n)Σc has sd ``noise_sd``."""
    if noise_sd < 0:
        raise ValueError(f"noise_sd must be >= 0; got {noise_sd}.")
    if not 0 < subsample_size <= N:
        raise ValueError(
            f"subsample_size must satisfy 0 < subsample_size <= N={N}; got {subsample_size}."
        )
    inverse_cdf = NormalDist().inv_cdf
    quantiles = np.array([inverse_cdf((i + 0.5) / N) for i in range(N)])
    quantiles = (quantiles - quantiles.mean()) / quantiles.std()
    return noise_sd * math.sqrt(subsample_size) / N * quantiles


def load_data(
    shape: float = 5.0,
    noise_sd: float = 1.0,
    subsample_size: int = 10,
    N: int = 10_000,
    loc: float = 0.0,
    scale: float | None = None,
) -> tuple[tuple, dict]:
    """Return ``(model_args, model_kwargs)`` = ``((noise,), {shape, loc, scale, subsample_size})``.

    ``noise_sd`` is τ, the sd of the minibatch gradient noise at ``subsample_size`` (the model
    keyword carries it, so samplers use that minibatch size unless told otherwise; another
    n changes τ to ``noise_sd·√(subsample_size/n)``).  ``scale=None`` makes the target sd 1.
    """
    scale = standard_scale(shape) if scale is None else float(scale)
    noise = jnp.asarray(noise_coefficients(noise_sd, subsample_size, N))
    kwargs = {
        "shape": float(shape),
        "loc": float(loc),
        "scale": scale,
        "subsample_size": int(subsample_size),
    }
    return (noise,), kwargs


def reference(model_args: tuple, model_kwargs: dict) -> dict[str, dict[str, float]]:
    """Analytic posterior in the common format ``{site: {"mean": ..., "sd": ...}}``."""
    mean, sd = moments(
        model_kwargs.get("shape", 5.0), model_kwargs.get("loc", 0.0), model_kwargs.get("scale", 1.0)
    )
    return {"theta": {"mean": mean, "sd": sd}}


def hand_written_terms(noise, shape: float = 5.0, loc: float = 0.0, scale: float = 1.0):
    """The same potential in plain JAX: ``(x, idx) -> (−log target, per-datum −c_i θ)``."""
    target = SkewNormal(loc, scale, shape)

    def terms(x, idx):
        theta = x[0]
        return -target.log_prob(theta), -noise[idx] * theta

    return terms
