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

The robustness suite (``tests/robustness/``, issue 14 item 6) has its own entries in
``ROBUST_PROBLEMS``: models of ``models/robust_*.py`` on raw data, every latent site kept.
Their file ``tests/data/<name>.json`` holds, per site, the shape and the flattened
constrained-space means, sds and MCSEs, plus the NUTS diagnostics (R-hat over the chains,
bulk ESS, divergences), the spec with every seed, and the versions::

    .venv/bin/python tests/data/make_references.py robust_logistic_nuts
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
from numpyro.infer import MCMC, NUTS, init_to_value  # noqa: E402

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

# NUTS on the full-data model (pplsamplers.model.all_data_model), float64, dense mass.
ROBUST_PROBLEMS: dict[str, dict] = {
    "robust_logistic_nuts": dict(
        model="robust_logistic", data=dict(N=100_000, seed=1), dense_mass=True, seed=140601
    ),
    "robust_hierarchical_nuts": dict(
        model="robust_hierarchical",
        data=dict(num_groups=300, total=10_000, seed=2),
        dense_mass=True,
        seed=140602,
    ),
    "robust_student_t_nuts": dict(
        model="robust_student_t", data=dict(N=10_000, seed=3), dense_mass=True, seed=140603
    ),
    "robust_ordinal_nuts": dict(
        model="robust_ordinal", data=dict(N=10_000, seed=4), dense_mass=True, seed=140604
    ),
    # a mixed model with 10³ group effects: NumPyro's own NUTS with its diagonal adaptation
    # from its default start (the joint mode is far from the mass).  The same recipe on a
    # Poisson model with 5·10³ groups (N = 5·10⁴) did not converge (τ's R-hat 2.2 after
    # 2 × (1000 + 2000) draws, 55 min), so there is no D ≈ 5000 reference.
    "mixed_logit_1k_nuts": dict(
        model="mixed_glm",
        data=dict(N=20_000, num_groups=1_000, family="logistic", seed=11),
        laplace_init=False,
        dense_mass=False,
        adapt_mass_matrix=True,
        seed=530001,
    ),
    # a discrete latent per datum, enumerated (NUTS marginalises it too).  The Laplace search
    # starts at the simulated parameters: on the mixture, NUTS from its default start stayed
    # in an optimum with two components merged (58 posterior sds away); on the raw-covariate
    # zero-inflated model the Newton search from a random start met non-finite Hessians
    "robust_mixture_nuts": dict(
        model="mixture",
        data=dict(N=2_000, seed=21),
        dense_mass=True,
        start_at_truth=True,
        seed=510001,
    ),
    "robust_zero_inflated_nuts": dict(
        model="zero_inflated",
        data=dict(N=2_000, seed=22),
        dense_mass=True,
        start_at_truth=True,
        seed=510002,
    ),
}
# The Laplace covariance is NUTS's fixed inverse mass matrix (adapt_mass_matrix=False): the
# mass matrix only changes NUTS's speed, never its target, and on these raw-scale posteriors
# the short early adaptation windows do worse than the Laplace matrix (ESS/draw ~1 with it).
ROBUST_DEFAULTS = dict(
    num_warmup=1000,
    num_samples=2000,
    num_chains=2,
    chain_method="sequential",
    adapt_mass_matrix=False,
)


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


def _laplace_init(
    model, args: tuple, kwargs: dict, start: dict | None = None
) -> tuple[dict, np.ndarray, list[str]]:
    """The posterior mode (constrained init values), the inverse Hessian there, the site names.

    SciPy's trust-region Newton (exact Hessian, affine-invariant, so raw scales are no
    problem) on NumPyro's potential.  On raw-scale posteriors NUTS with a unit mass matrix
    spends 2¹⁰ gradients per draw until its first mass-matrix window closes; starting at the
    mode with the Laplace covariance as the initial (still adapted) inverse mass matrix keeps
    each reference run to a few minutes.  The matrix is in NumPyro's flat unconstrained
    order (``ravel_pytree`` of the latent dict), as NUTS expects.  ``start``: constrained
    values to start the search from (a mixture's random start can end in a poor optimum).
    """
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import initialize_model
    from scipy.optimize import minimize

    strategy = {} if start is None else {"init_strategy": init_to_value(values=start)}
    setup = initialize_model(
        jax.random.key(0), model, model_args=args, model_kwargs=kwargs, **strategy
    )
    flat0, unravel = ravel_pytree(setup.param_info.z)

    def potential(x):
        return setup.potential_fn(unravel(x))

    value_and_grad, hessian = (
        jax.jit(jax.value_and_grad(potential)),
        jax.jit(jax.hessian(potential)),
    )

    def fun(x):
        value, grad = value_and_grad(x)
        return float(value), np.asarray(grad, dtype=np.float64)

    result = minimize(
        fun,
        np.asarray(flat0),
        jac=True,
        hess=lambda x: np.asarray(hessian(x)),
        method="trust-exact",
        options=dict(maxiter=1000, gtol=1e-8),
    )
    gradient = float(np.abs(result.jac).max())
    print(f"  mode: {result.nit} Newton steps, max |grad| {gradient:.2e} ({result.message})")
    inverse_hessian = np.linalg.inv(np.asarray(hessian(result.x), dtype=np.float64))
    inverse_hessian = (inverse_hessian + inverse_hessian.T) / 2
    return setup.postprocess_fn(unravel(result.x)), inverse_hessian, sorted(setup.param_info.z)


def compute_sites(name: str, spec: dict) -> dict:
    """Run NUTS on a ``models/robust_*.py`` problem; summarise every latent site (constrained)."""
    import importlib

    from pplsamplers.model import all_data_model

    spec = {**ROBUST_DEFAULTS, **spec}
    module = importlib.import_module(f"models.{spec['model']}")
    args, kwargs = module.load_data(**spec["data"])
    model = all_data_model(module.model)
    if spec.get("laplace_init", True):
        start = module.TRUTH if spec.get("start_at_truth") else None
        init, inverse_hessian, names = _laplace_init(model, args, kwargs, start)
        if not spec["dense_mass"]:
            inverse_hessian = np.diag(inverse_hessian)
        nuts = NUTS(
            model,
            dense_mass=spec["dense_mass"],
            adapt_mass_matrix=spec["adapt_mass_matrix"],
            inverse_mass_matrix=jax.numpy.asarray(inverse_hessian),
            init_strategy=init_to_value(values=init),
        )
    else:
        nuts = NUTS(model, dense_mass=spec["dense_mass"])
        names = None
    mcmc = MCMC(
        nuts,
        num_warmup=spec["num_warmup"],
        num_samples=spec["num_samples"],
        num_chains=spec["num_chains"],
        chain_method=spec["chain_method"],
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(spec["seed"]), *args, extra_fields=("diverging", "num_steps"), **kwargs)
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    seconds = time.perf_counter() - start
    names = sorted(samples) if names is None else names
    sites, worst_rhat, worst_ess = {}, 0.0, np.inf
    for site in names:
        draws = np.asarray(samples[site], dtype=np.float64)
        flat = draws.reshape(draws.shape[0], draws.shape[1], -1)
        dataset = az.convert_to_dataset({site: flat})
        rhat = np.atleast_1d(az.rhat(dataset)[site].values)
        ess = np.atleast_1d(az.ess(dataset)[site].values)
        mcse = np.atleast_1d(az.mcse(dataset)[site].values)
        worst_rhat = max(worst_rhat, float(np.nan_to_num(rhat, nan=0.0).max()))  # nan: 1 chain
        worst_ess = min(worst_ess, float(ess.min()))
        sites[site] = dict(
            shape=list(draws.shape[2:]),
            mean=flat.mean(axis=(0, 1)).tolist(),
            sd=flat.std(axis=(0, 1), ddof=1).tolist(),
            mcse_mean=mcse.tolist(),
        )
    return dict(
        name=name,
        description=(
            f"NumPyro NUTS reference for models/{spec['model']}.py, load_data(**spec['data']), "
            "full data (all_data_model), float64; constrained-space summaries per latent site"
        ),
        spec=spec,
        sites=sites,
        min_ess_bulk=worst_ess,
        max_rhat=worst_rhat,
        num_divergent=int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum()),
        mean_num_steps=float(np.asarray(mcmc.get_extra_fields()["num_steps"]).mean()),
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
    names = parser.parse_args(argv).names or [*PROBLEMS, *ROBUST_PROBLEMS]
    for name in names:
        if name in ROBUST_PROBLEMS:
            ref = compute_sites(name, ROBUST_PROBLEMS[name])
        elif name in PROBLEMS:
            ref = compute(name, PROBLEMS[name])
        else:
            known = sorted([*PROBLEMS, *ROBUST_PROBLEMS])
            raise SystemExit(f"unknown problem {name!r}; known: {known}")
        with open(HERE / f"{name}.json", "w") as handle:
            json.dump(ref, handle, indent=1)
        print(
            f"{name}: min ESS {ref['min_ess_bulk']:.0f}, max R-hat {ref['max_rhat']:.4f}, "
            f"{ref['seconds']:.0f} s"
        )


if __name__ == "__main__":
    main()
