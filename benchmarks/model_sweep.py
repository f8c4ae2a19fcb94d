"""Every sampler with its defaults on twenty models written as NumPyro users write them.

Models the robustness suite does not hold, each with raw covariates and N = 10⁴ (unless said) (a covariate
around 100 with sd 15, a 0/1 flag and their interaction, as in ``models/robust_linear.py``),
and every data plate written plainly (``obs=y``, no plate indices, as for NUTS):

* ``linear_hn``: flat coefficients (``ImproperUniform``), a HalfNormal scale;
* ``poisson``: a log-link Poisson regression with flat coefficients;
* ``hlogistic``: a non-centred hierarchical logistic regression, 50 groups of very unequal
  sizes (Dirichlet(0.5) shares), a HalfNormal group scale;
* ``two_sites``: two observed sites in one plate (a Gaussian and a Bernoulli response);
* ``plain``: a location and a HalfCauchy scale;
* ``nested``: three columns per row, an inner plate inside the data plate (the data plate
  is found as the largest plate);
* ``factor``: a hand-written likelihood, a per-datum ``numpyro.factor`` in the data plate,
  with flat and flat-positive priors;
* ``ordered``: a Beta and a Uniform latent and positive ordered cutpoints whose lower one is
  known only through an exponential ``numpyro.factor`` prior (a steep tail in its log);
* ``reparam``: ``LocScaleReparam`` (non-centred) random intercepts, 20 well-identified
  groups, at N = 2·10⁴ (a ridge far from its Laplace approximation).

Nine more, on a second data set (``make_more_data``; added 2026-11-27), with other supports,
likelihoods and sizes:

* ``simplex``: a Dirichlet weight vector (the stick-breaking transform), categorical data;
* ``negbin``: a negative-binomial (``NegativeBinomial2``) regression with flat coefficients on
  a covariate around 60 and a 0/1 flag, an Exponential concentration;
* ``lkj``: a 3-d ``MultivariateNormal`` with flat means, HalfNormal scales and an
  ``LKJCholesky`` correlation factor, on columns whose sds are 1, 30 and 200 (L[0, 0] is 1 in
  every draw: coordinates whose NUTS sd is 0 are left out of the errors);
* ``weibull``: a Weibull survival regression with right censoring (``handlers.mask`` on the
  events, a per-datum ``numpyro.factor`` for the censored survival terms);
* ``masked``: a linear regression whose missing responses are masked out of the plate;
* ``gamma_glm``: a Gamma regression with a log link and a HalfNormal shape;
* ``centred``: a centred hierarchical normal, 40 groups of very unequal sizes (some with a
  handful of rows: a funnel), a HalfCauchy scale, N = 2000;
* ``bigd``: a non-centred hierarchical normal with 1500 groups (D = 1503, above the dense
  preconditioner's 1000), N = 3·10⁴, unknown noise sd: its joint mode puts τ 250 sds above
  the posterior's;
* ``rare``: a rare-event logistic regression (about 2 % ones) with flat coefficients on raw
  covariates, N = 2·10⁴.

Two more, on a third data set (``make_slopes_data``), as mixed models are written with
lme4's formulas:

* ``mvslopes``: a logistic regression with correlated varying intercepts and slopes
  (``(1 + age | group)``): 200 groups of very unequal sizes (Dirichlet(0.5) shares, some
  empty), an ``LKJCholesky`` correlation factor and HalfNormal scales, the group effects
  non-centred (u_g = diag(τ) L z_g), a raw age covariate, N = 10⁴ (D = 405);
* ``schools``: schools within districts (``(1 | district / school)``), a Gaussian response,
  15 districts and 300 schools of unequal sizes, both effects non-centred, N = 10⁴ (D = 319).

The reference is NumPyro NUTS, 2 × (1000 + 2000) draws, computed on the spot and cached in
``--cache``; ``bigd``'s is exact (:func:`exact_reference`).  Each cell runs
``MCMC(kernel, num_warmup=300, num_samples=500, num_chains=2, chain_method="vectorized")``
and ``pplsamplers.check_run`` as the robustness suite does, and prints ``max |Δmean|/sd_ref``,
``max |sd ratio − 1|``, wall seconds, ``ok``/``MISS`` (the suite's tolerance, 0.25 and 0.30)
and ``warn``/``quiet`` (the self-check), then the start of the first warning.  A site of
:data:`GROUP_SITE_SIZE` coordinates or more (``bigd``'s 1500 group effects) is read as the
root mean square over its coordinates instead (``z rms`` mean/sd, at most 0.15 and 0.30).
``MISS quiet`` is a silent wrong answer.

    .venv/bin/python benchmarks/model_sweep.py                    # all models and samplers
    .venv/bin/python benchmarks/model_sweep.py --models plain --samplers sbps auto
    .venv/bin/python benchmarks/model_sweep.py --models hlogistic --samplers sgbd --seed 1 \
        --option step_size=0.3                                   # one knob, another seed
    .venv/bin/python benchmarks/model_sweep.py --float32         # the runs as users run them

Examples
--------
>>> len(MODELS), sorted(MODELS)[:6]
(20, ['bigd', 'centred', 'factor', 'gamma_glm', 'hlogistic', 'linear_hn'])
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.distributions import constraints  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402
from numpyro.infer.reparam import LocScaleReparam  # noqa: E402

from benchmarks.robustness import parse_option  # noqa: E402
from models import gaussian_mixed  # noqa: E402
from pplsamplers import check_run  # noqa: E402
from tests.robustness.common import (  # noqa: E402
    GROUP_TOL,
    MEAN_TOL,
    SD_TOL,
    SEED,
    is_self_check_warning,
    make_kernel,
    sampler_names,
)

jax.config.update("jax_enable_x64", True)
N, GROUPS, REPARAM_GROUPS, BIG_GROUPS, SLOPE_GROUPS = 10_000, 50, 20, 1500, 200
DISTRICTS, SCHOOLS = 15, 300
GROUP_SITE_SIZE = 100
"""A site with at least this many coordinates holds group effects: its errors are read as the
root mean square over the coordinates (at most :data:`GROUP_TOL`), as the robustness suite's
mixed models read them; a maximum over 1500 coordinates would read Monte Carlo error."""


def flat(name: str, k: int) -> jax.Array:
    """A flat prior on R^k."""
    return numpyro.sample(name, dist.ImproperUniform(constraints.real, (), (k,)))


def linear(X, y):
    b = flat("b", X.shape[1])
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ b, sigma), obs=y)


def poisson(X, y):
    b = flat("b", X.shape[1])
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(X @ b)), obs=y)


def hlogistic(age, group, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = numpyro.sample("tau", dist.HalfNormal(2.0))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    with numpyro.plate("groups", GROUPS):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", age.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=mu + tau * z[group] + b * age), obs=y)


def two_sites(age, ya, yb):
    a, c = flat("a", 2), flat("c", 2)
    sigma = numpyro.sample("sigma", dist.LogNormal(0.0, 2.0))
    with numpyro.plate("data", age.shape[0]):
        numpyro.sample("ya", dist.Normal(a[0] + a[1] * age, sigma), obs=ya)
        numpyro.sample("yb", dist.Bernoulli(logits=c[0] + c[1] * age), obs=yb)


def plain(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1000.0))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(100.0))
    with numpyro.plate("N", y.shape[0]):
        numpyro.sample("obs", dist.Normal(mu, sigma), obs=y)


def nested(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0).expand([y.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("data", y.shape[0], dim=-2), numpyro.plate("columns", y.shape[1]):
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


def factor(x, y):
    a, b = flat("a", 1)[0], flat("b", 1)[0]
    s = numpyro.sample("s", dist.ImproperUniform(constraints.positive, (), ()))
    with numpyro.plate("data", x.shape[0]):
        numpyro.factor("ll", -0.5 * ((y - a - b * x) / s) ** 2 - jnp.log(s))


def ordered(x, y):
    p = numpyro.sample("p", dist.Beta(2.0, 2.0))
    r = numpyro.sample("r", dist.Uniform(-1.0, 1.0))
    c = numpyro.sample("c", dist.ImproperUniform(constraints.positive_ordered_vector, (), (2,)))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(p * x + r * x**2 / 100, c[1] - c[0] + 0.5), obs=y)
    numpyro.factor("c_prior", -0.01 * c.sum())


def reparam(group, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = numpyro.sample("tau", dist.HalfNormal(5.0))
    with numpyro.handlers.reparam(config={"theta": LocScaleReparam(0)}):
        with numpyro.plate("groups", REPARAM_GROUPS):
            theta = numpyro.sample("theta", dist.Normal(mu, tau))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(theta[group], sigma), obs=y)


def simplex(y):
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(5)))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Categorical(probs=w), obs=y)


def negbin(X, y):
    b = flat("b", X.shape[1])
    phi = numpyro.sample("phi", dist.Exponential(1.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.NegativeBinomial2(jnp.exp(X @ b), phi), obs=y)


def lkj(y):
    mu = flat("mu", 3)
    scale = numpyro.sample("scale", dist.HalfNormal(50.0).expand([3]).to_event(1))
    L = numpyro.sample("L", dist.LKJCholesky(3, 2.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.MultivariateNormal(mu, scale_tril=scale[:, None] * L), obs=y)


def weibull(x, t, event):
    b = flat("b", 2)
    k = numpyro.sample("k", dist.Gamma(2.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        d = dist.Weibull(jnp.exp(b[0] + b[1] * x), k)
        with numpyro.handlers.mask(mask=event):
            numpyro.sample("t", d, obs=t)
        numpyro.factor("censored", jnp.where(event, 0.0, -((t / d.scale) ** k)))


def masked(x, y, seen):
    b = flat("b", 2)
    s = numpyro.sample("s", dist.HalfNormal(10.0))
    with numpyro.plate("data", x.shape[0]), numpyro.handlers.mask(mask=seen):
        numpyro.sample("y", dist.Normal(b[0] + b[1] * x, s), obs=y)


def gamma_glm(X, y):
    b = flat("b", X.shape[1])
    shape = numpyro.sample("shape", dist.HalfNormal(10.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Gamma(shape, shape / jnp.exp(X @ b)), obs=y)


def centred(group, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(2.0))
    with numpyro.plate("groups", 40):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(theta[group], 3.0), obs=y)


def bigd(group, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 100.0))
    tau = numpyro.sample("tau", dist.HalfNormal(10.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
    with numpyro.plate("groups", BIG_GROUPS):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu + tau * z[group], sigma), obs=y)


def mvslopes(age, group, y):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0).expand([2]).to_event(1))
    L = numpyro.sample("L", dist.LKJCholesky(2, 2.0))
    with numpyro.plate("groups", SLOPE_GROUPS):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    u = z @ (tau[:, None] * L).T
    with numpyro.plate("data", age.shape[0]):
        logit = a + b * age + u[group, 0] + u[group, 1] * (age - 40) / 10
        numpyro.sample("y", dist.Bernoulli(logits=logit), obs=y)


def schools(district, school, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 100.0))
    sd = numpyro.sample("sd", dist.HalfNormal(10.0).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
    with numpyro.plate("districts", DISTRICTS):
        d = numpyro.sample("d", dist.Normal(0.0, 1.0))
    with numpyro.plate("schools", SCHOOLS):
        s = numpyro.sample("s", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        mean = mu + sd[0] * d[district] + sd[1] * s[school]
        numpyro.sample("y", dist.Normal(mean, sigma), obs=y)


def rare(X, y):
    b = flat("b", X.shape[1])
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=X @ b), obs=y)


def make_data(seed: int = 11) -> dict[str, tuple]:
    """``{name: (model, args)}`` of the models (module docstring)."""
    rng = np.random.default_rng(seed)
    age = rng.normal(100, 15, N)
    flag = rng.integers(0, 2, N).astype(float)
    X = np.stack([np.ones(N), age, flag, age * flag], 1)
    y_linear = X @ np.array([3.0, 0.05, -2.0, 0.02]) + 1.5 * rng.normal(size=N)
    y_poisson = rng.poisson(np.exp(X @ np.array([-1.0, 0.015, 0.3, 0.002]))).astype(float)
    group = rng.choice(GROUPS, N, p=rng.dirichlet(np.full(GROUPS, 0.5)))
    logit = -0.5 + 0.8 * rng.normal(size=GROUPS)[group] + 0.02 * (age - 100)
    y_hier = (rng.uniform(size=N) < 1 / (1 + np.exp(-logit))).astype(float)
    ya = 1.0 + 0.03 * age + 2.0 * rng.normal(size=N)
    yb = (rng.uniform(size=N) < 1 / (1 + np.exp(-(-3 + 0.03 * age)))).astype(float)
    y_plain = 250.0 + 40.0 * rng.standard_normal(N)
    x = rng.normal(50, 10, N)
    y_nested = rng.normal(size=(N, 3)) * 2 + np.array([1.0, 2.0, 3.0])
    y_factor = 3 + 0.2 * x + 2 * rng.normal(size=N)
    y_ordered = 0.3 * x + 0.2 * x**2 / 100 + rng.normal(size=N)
    big = 2 * N
    g = rng.integers(0, REPARAM_GROUPS, big)
    y_reparam = (3 + 2 * rng.normal(size=REPARAM_GROUPS))[g] + 1.5 * rng.normal(size=big)
    arrays = lambda *a: tuple(jnp.asarray(v) for v in a)
    return {
        "linear_hn": (linear, arrays(X, y_linear)),
        "poisson": (poisson, arrays(X, y_poisson)),
        "hlogistic": (hlogistic, arrays(age, group, y_hier)),
        "two_sites": (two_sites, arrays(age, ya, yb)),
        "plain": (plain, arrays(y_plain)),
        "nested": (nested, arrays(y_nested)),
        "factor": (factor, arrays(x, y_factor)),
        "ordered": (ordered, arrays(x, y_ordered)),
        "reparam": (reparam, arrays(g, y_reparam)),
        **make_more_data(),
        **make_slopes_data(),
    }


def make_more_data(seed: int = 5) -> dict[str, tuple]:
    """``{name: (model, args)}`` of the nine models added second (module docstring)."""
    rng = np.random.default_rng(seed)
    y_cat = rng.choice(5, N, p=[0.5, 0.2, 0.15, 0.1, 0.05])
    age, flag = rng.normal(60, 12, N), rng.integers(0, 2, N).astype(float)
    X = np.stack([np.ones(N), age, flag], 1)
    mean = np.exp(X @ np.array([0.5, 0.02, -0.4]))
    y_negbin = rng.poisson(rng.gamma(3.0, mean / 3.0)).astype(float)
    corr, sd = np.array([[1, 0.6, -0.3], [0.6, 1, 0.2], [-0.3, 0.2, 1]]), np.array([1, 30, 200])
    y_mvn = rng.multivariate_normal([5.0, 100.0, -50.0], corr * np.outer(sd, sd), N)
    x = rng.normal(50, 10, N)
    lifetime = np.exp(2.0 + 0.02 * x) * rng.weibull(1.5, N)
    censor = rng.uniform(0, 30, N)
    y_linear = 3 + 0.5 * x + 4 * rng.normal(size=N)
    seen = rng.uniform(size=N) < 0.7
    y_gamma = rng.gamma(4.0, np.exp(X @ np.array([1.0, 0.01, 0.3])) / 4.0)
    big = rng.choice(BIG_GROUPS, 3 * N, p=rng.dirichlet(np.full(BIG_GROUPS, 1.0)))
    y_big = (10 + 1.5 * rng.normal(size=BIG_GROUPS))[big] + 4 * rng.normal(size=3 * N)
    small = rng.choice(40, 2000, p=rng.dirichlet(np.full(40, 0.3)))
    y_small = (2 + rng.normal(size=40))[small] + 3 * rng.normal(size=2000)
    X_rare = np.stack([np.ones(2 * N), rng.normal(60, 12, 2 * N), rng.integers(0, 2, 2 * N)], 1)
    p_rare = 1 / (1 + np.exp(-(X_rare @ np.array([-7.0, 0.04, 0.8]))))
    y_rare = (rng.uniform(size=2 * N) < p_rare).astype(float)
    arrays = lambda *a: tuple(jnp.asarray(v) for v in a)
    return {
        "simplex": (simplex, arrays(y_cat)),
        "negbin": (negbin, arrays(X, y_negbin)),
        "lkj": (lkj, arrays(y_mvn)),
        "weibull": (weibull, arrays(x, np.minimum(lifetime, censor), lifetime < censor)),
        "masked": (masked, arrays(x, np.where(seen, y_linear, 0.0), seen)),
        "gamma_glm": (gamma_glm, arrays(X, y_gamma)),
        "centred": (centred, arrays(small, y_small)),
        "bigd": (bigd, arrays(big, y_big)),
        "rare": (rare, arrays(X_rare, y_rare)),
    }


def make_slopes_data(seed: int = 3) -> dict[str, tuple]:
    """``{name: (model, args)}`` of ``mvslopes`` (intercept and slope effects of sds 0.8 and
    0.3 with correlation 0.5) and ``schools`` (district and school effects of sds 5 and 3)."""
    rng = np.random.default_rng(seed)
    age = rng.normal(40, 12, N)
    group = rng.choice(SLOPE_GROUPS, N, p=rng.dirichlet(np.full(SLOPE_GROUPS, 0.5)))
    cov = np.array([[1.0, 0.5], [0.5, 1.0]]) * np.outer([0.8, 0.3], [0.8, 0.3])
    u = rng.multivariate_normal([0.0, 0.0], cov, SLOPE_GROUPS)
    logit = -1 + 0.03 * age + u[group, 0] + u[group, 1] * (age - 40) / 10
    y = (rng.uniform(size=N) < 1 / (1 + np.exp(-logit))).astype(float)
    school = rng.choice(SCHOOLS, N, p=rng.dirichlet(np.full(SCHOOLS, 0.7)))
    district = rng.integers(0, DISTRICTS, SCHOOLS)[school]
    effects = 5 * rng.normal(size=DISTRICTS)[district] + 3 * rng.normal(size=SCHOOLS)[school]
    y_schools = 50 + effects + 8 * rng.normal(size=N)
    arrays = lambda *a: tuple(jnp.asarray(v) for v in a)
    return {
        "mvslopes": (mvslopes, arrays(age, group, y)),
        "schools": (schools, arrays(district, school, y_schools)),
    }


MODELS = (
    "linear_hn",
    "poisson",
    "hlogistic",
    "two_sites",
    "plain",
    "nested",
    "factor",
    "ordered",
    "reparam",
    "simplex",
    "negbin",
    "lkj",
    "weibull",
    "masked",
    "gamma_glm",
    "centred",
    "bigd",
    "rare",
    "mvslopes",
    "schools",
)


def exact_reference(name: str, args: tuple, cache: Path) -> dict:
    """``{site: (mean, sd)}`` of ``bigd`` without sampling: given (τ, σ) its posterior is
    Gaussian, and :func:`models.gaussian_mixed.reference` integrates (τ, σ) on a grid.
    Cached as JSON."""
    path = cache / f"{name}_exact.json"
    if not path.exists():
        group, y = (np.asarray(a) for a in args)
        exact = gaussian_mixed.reference(
            np.zeros((y.size, 0)), group, y, num_groups=BIG_GROUPS, prior_sd=100.0,
            tau_scale=10.0, noise_scale=10.0,
        )  # fmt: skip
        names = {"alpha": "mu", "tau": "tau", "sigma": "sigma", "z": "z"}
        stored = {names[k]: [np.asarray(v["mean"]).tolist(), np.asarray(v["sd"]).tolist()]
                  for k, v in exact.items() if k in names}  # fmt: skip
        cache.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stored))
    stored = json.loads(path.read_text())
    return {k: (np.asarray(m), np.asarray(s)) for k, (m, s) in stored.items()}


def nuts_reference(
    name: str, model, args: tuple, cache: Path, draws: tuple[int, int] = (1000, 2000),
    seed: int = 0, **nuts_options,
) -> dict:  # fmt: skip
    """``{site: (mean, sd)}`` from NumPyro NUTS, 2 × (warmup + samples) ``draws``, cached as
    JSON; ``nuts_options`` go to ``NUTS`` (e.g. ``target_accept_prob``)."""
    path = cache / f"{name}_nuts.json"
    if not path.exists():
        mcmc = MCMC(NUTS(model, **nuts_options), num_warmup=draws[0], num_samples=draws[1],
                    num_chains=2, chain_method="sequential", progress_bar=False)  # fmt: skip
        mcmc.run(jax.random.key(seed), *args)
        stored = {k: [np.mean(v, 0).tolist(), np.std(v, 0).tolist()]
                  for k, v in mcmc.get_samples().items()}  # fmt: skip
        cache.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stored))
    stored = json.loads(path.read_text())
    # a coordinate NUTS never moves (L[0, 0] = 1 of an LKJ factor) has no sd to scale by
    return {
        k: (np.asarray(m), np.where(np.asarray(s) > 0, s, np.nan)) for k, (m, s) in stored.items()
    }


def run_cell(
    sampler: str, model, args: tuple, ref: dict, seed: int = SEED, options: dict | None = None
) -> str:
    """One cell's line (module docstring); ``options`` go to the kernel (``--option``)."""
    start, error = time.perf_counter(), None
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        try:
            mcmc = MCMC(make_kernel(sampler, model, **(options or {})), num_warmup=300,
                        num_samples=500, num_chains=2, chain_method="vectorized",
                        progress_bar=False)  # fmt: skip
            mcmc.run(jax.random.key(seed), *args)
            draws = mcmc.get_samples()
            check_run(mcmc)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            error = f"{type(exc).__name__}: {str(exc)[:160]}"
    seconds = time.perf_counter() - start
    if error:
        return f"ERROR {error}"
    lines = [str(r.message).splitlines()[0] for r in records if is_self_check_warning(r)]
    errors = {  # nanmax: the coordinates of sd 0 (nuts_reference) are left out
        k: (np.abs(np.asarray(draws[k]).mean(0) - m) / s, np.abs(np.asarray(draws[k]).std(0) / s - 1))
        for k, (m, s) in ref.items()
    }  # fmt: skip
    group_sites = [k for k, (m, _) in ref.items() if np.size(m) >= GROUP_SITE_SIZE]
    small = [e for k, e in errors.items() if k not in group_sites]
    mean_err = max(float(np.nanmax(e[0])) for e in small)  # the global latents: the maximum
    sd_err = max(float(np.nanmax(e[1])) for e in small)
    ok = mean_err <= MEAN_TOL and sd_err <= SD_TOL
    groups = ""
    for k in group_sites:
        rms_mean, rms_sd = (float(np.sqrt(np.nanmean(a**2))) for a in errors[k])
        ok = ok and rms_mean <= GROUP_TOL and rms_sd <= SD_TOL
        groups += f" {k} rms {rms_mean:.3g}/{rms_sd:.3g}"
    verdict = ("ok" if ok else "MISS") + (" warn" if lines else " quiet")
    return (
        f"{mean_err:8.3g} {sd_err:8.3g} {seconds:5.0f}s  {verdict:10s}{groups} "
        f"{lines[0][:90] if lines else ''}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--samplers", nargs="*", default=None, help="default: all but NUTS")
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".model_sweep")
    parser.add_argument("--seed", type=int, default=SEED, help="PRNG seed of every cell")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="a sampler option, as in benchmarks/robustness.py; repeatable")  # fmt: skip
    parser.add_argument("--float32", action="store_true",
                        help="run the cells in float32, the users' default (NUTS in float64)")  # fmt: skip
    args = parser.parse_args()
    options = dict(parse_option(text) for text in args.option)
    data = make_data()
    with jax.enable_x64(not args.float32):  # the arrays take the precision they are made in
        run_data = make_data() if args.float32 else data
    misses = silent = 0
    print(f"{'model':10s} {'sampler':10s} {'mean err':>8s} {'sd err':>8s}  wall  verdict")
    for name in args.models:
        model, model_args = data[name]
        ref = (
            exact_reference(name, model_args, args.cache)
            if name == "bigd"
            else nuts_reference(name, model, model_args, args.cache)
        )
        for sampler in args.samplers or sampler_names():
            with jax.enable_x64(not args.float32):
                line = run_cell(sampler, model, run_data[name][1], ref, args.seed, options)
            misses += "MISS" in line or "ERROR" in line
            silent += "MISS quiet" in line
            print(f"{name:10s} {sampler:10s} {line}", flush=True)
            # drop the cell's compiled programs: a dozen runs in one process otherwise hit
            # "LLVM compilation error: Cannot allocate memory" (vm.max_map_count; RAM was free)
            jax.clear_caches()
    print(f"\n{misses} cells miss or fail; {silent} silently.")


if __name__ == "__main__":
    main()
