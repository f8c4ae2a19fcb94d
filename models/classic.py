"""Classic non-Gaussian models of NumPyro's examples and MCMC tests, at small N, with their data.

* ``eight_nc``, ``eight_c``: eight schools, non-centred and centred (a funnel in τ);
* ``funnel``: Neal's funnel, v ~ N(0, 3), x_i | v ~ N(0, e^(v/2)), i = 1..9;
* ``horseshoe``: a horseshoe regression (HalfCauchy global and local scales), 200 rows and
  10 raw coefficients of which two are non-zero, written non-centred (``coef`` = τ λ b);
* ``horseshoe_c``: the same regression written centred, b ~ N(0, τ λ), a scale mixture
  whose funnel the set-up must see;
* ``ucb``: a varying-intercept binomial GLMM on the UC Berkeley admissions table (6
  departments × 2 genders, non-centred department effects, a HalfNormal scale);
* ``volatility``: stochastic volatility, 200 simulated returns, a non-centred AR(1)
  log-volatility built with ``scan``, the likelihood indexed by the data plate;
* ``edge``: a Beta(0.5, 0.5) probability with 1 success in 50 (its mass at the support's
  edge) beside a Normal location.

Examples
--------
>>> data = make_data()
>>> sorted(data)
['edge', 'eight_c', 'eight_nc', 'funnel', 'horseshoe', 'horseshoe_c', 'ucb', 'volatility']
>>> model, args = data["volatility"]
>>> args[0].shape
(200,)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

SCHOOLS_Y = jnp.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOLS_SIGMA = jnp.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_nc(y, sigma):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("schools", y.shape[0]):
        theta = numpyro.sample("theta_t", dist.Normal(0.0, 1.0))
        numpyro.sample("obs", dist.Normal(mu + tau * theta, sigma), obs=y)


def eight_c(y, sigma):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("schools", y.shape[0]):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def funnel():
    v = numpyro.sample("v", dist.Normal(0.0, 3.0))
    numpyro.sample("x", dist.Normal(jnp.zeros(9), jnp.exp(v / 2)))


def horseshoe(X, y):
    tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
    lam = numpyro.sample("lam", dist.HalfCauchy(jnp.ones(X.shape[1])))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    coefficients = numpyro.deterministic("coef", tau * lam * b)
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ coefficients, 1.0), obs=y)


def horseshoe_c(X, y):
    tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
    lam = numpyro.sample("lam", dist.HalfCauchy(jnp.ones(X.shape[1])))
    b = numpyro.sample("b", dist.Normal(0.0, tau * lam).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ b, 1.0), obs=y)


UCB_ADMIT = jnp.array([512.0, 89, 353, 17, 120, 202, 138, 131, 53, 94, 22, 24])
UCB_APPS = jnp.array([825.0, 108, 560, 25, 325, 593, 417, 375, 191, 393, 373, 341])


def ucb(dept, male, applications, admit):
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


def edge(b, x):
    p = numpyro.sample("p", dist.Beta(0.5, 0.5))
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", b.shape[0]):
        numpyro.sample("b", dist.Bernoulli(probs=p), obs=b)
        numpyro.sample("x", dist.Normal(loc, 2.0), obs=x)


def make_data(seed: int = 0) -> dict[str, tuple]:
    """``{name: (model, args)}`` (module docstring)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(200, 10))
    coefficients = np.zeros(10)
    coefficients[:2] = (2.0, -1.5)
    y = X @ coefficients + rng.normal(size=200)
    schools = (SCHOOLS_Y, SCHOOLS_SIGMA)
    h = np.empty(200)  # log-volatility: mean -1, persistence 0.95, innovation sd 0.25
    h[0] = -1.0 + 0.25 / np.sqrt(1 - 0.95**2) * rng.normal()
    for t in range(1, 200):
        h[t] = -1.0 + 0.95 * (h[t - 1] + 1.0) + 0.25 * rng.normal()
    returns = np.exp(h / 2) * rng.normal(size=200)
    successes = np.zeros(50)
    successes[0] = 1.0
    dept, male = jnp.repeat(jnp.arange(6), 2), jnp.tile(jnp.array([1.0, 0.0]), 6)
    return {
        "eight_nc": (eight_nc, schools),
        "eight_c": (eight_c, schools),
        "funnel": (funnel, ()),
        "horseshoe": (horseshoe, (jnp.asarray(X), jnp.asarray(y))),
        "horseshoe_c": (horseshoe_c, (jnp.asarray(X), jnp.asarray(y))),
        "ucb": (ucb, (dept, male, UCB_APPS, UCB_ADMIT)),
        "volatility": (volatility, (jnp.asarray(returns),)),
        "edge": (edge, (jnp.asarray(successes), jnp.asarray(1.5 + 2.0 * rng.normal(size=50)))),
    }
