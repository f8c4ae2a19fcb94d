"""pSGLD's frozen RMSprop metric stays within the plain-SGLD step (deterministic invariants)."""

import jax
import numpy as np
import pytest
from numpyro.infer import MCMC

from models import logistic_regression
from pplsamplers import PSGLD, SGLD


def _last_params(kernel, data):
    mcmc = MCMC(kernel, num_warmup=200, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(0), *data)
    return mcmc.last_state.params


def test_psgld_steps_never_exceed_the_sgld_step():
    """ε_pSGLD · G_j ≤ ε_SGLD in every coordinate, after the warmup's RMSprop adaptation.

    Both take ``step_size="auto"`` from the same probe of the same potential.  The RMSprop
    average a_j of a coordinate whose gradients happen to be small during warmup would give it
    G_j = 1/(λ + √a_j) beyond the stable step; the cap keeps it there (on the robustness
    suite's hierarchical model an uncapped pSGLD ended 26 posterior sds away).
    """
    data = logistic_regression.load_data(N=2000, d=5, seed=3)[0]
    sgld_step = float(_last_params(SGLD(logistic_regression.model, subsample_size=50), data)[0])
    psgld = _last_params(PSGLD(logistic_regression.model, subsample_size=50), data)
    steps = float(psgld.step_size) * np.asarray(psgld.inverse_metric)
    assert np.all(steps <= sgld_step * (1 + 1e-6)), (steps, sgld_step)
    assert np.min(steps) < sgld_step  # RMSprop does slow some coordinates down


def test_steps_per_sample_counts_every_step_and_is_validated():
    """A draw of a step-size kernel is ``steps_per_sample`` kernel steps (default 10), each
    counted in ``data_evals``; one step per draw is the kernel's own chain."""
    from pplsamplers.datasets import tiny_regression
    from pplsamplers.kernels.sgmcmc.step_size import STEP_SIZE_STEPS_PER_SAMPLE

    model, run = tiny_regression()
    fixed = dict(step_size=1e-3, subsample_size=10, control_variate=False, precondition=None)
    for steps, expected in ((None, STEP_SIZE_STEPS_PER_SAMPLE), (1, 1), (3, 3)):
        options = fixed if steps is None else {**fixed, "steps_per_sample": steps}
        mcmc = run(SGLD(model, **options), num_warmup=10, num_samples=20)
        evals = np.asarray(mcmc.get_extra_fields()["data_evals"])
        assert np.all(evals == 10 * expected), (steps, evals[:3])
    with pytest.raises(ValueError, match="steps_per_sample"):
        SGLD(model, steps_per_sample=0)


def test_coherent_step_limit_is_the_ula_bias_budget():
    """ULA on a Gaussian of curvature h has variance 1 / (h (1 − εh/2)): the relative bias
    b = εh/2 summed over D coordinates moves the log density by (Σ b_j / 2) / √(D/2) sds.
    At the limit that is exactly COHERENT_BIAS, for any spread of the curvatures."""
    import math

    from pplsamplers.kernels.sgmcmc.step_size import COHERENT_BIAS, coherent_step_limit

    curvatures = np.array([0.5, 1.0, 2.0, 4.0] * 25)  # D = 100, tr H = 187.5
    eps = coherent_step_limit(curvatures.size, float(curvatures.sum()))
    exact_bias = 1 / (1 - eps * curvatures / 2) - 1  # ULA's relative variance bias
    shift = exact_bias.sum() / 2 / math.sqrt(curvatures.size / 2)
    assert shift == pytest.approx(COHERENT_BIAS, rel=0.05)  # to first order in ε


@pytest.mark.parametrize("sampler", ["sgld", "psgld", "csgld", "sgrld", "hamcmc"])
def test_automatic_langevin_step_shrinks_in_high_dimension(sampler):
    """On a whitened 300-dimensional N(0, I) the automatic step is at most 0.28/√D (not 0.1),
    and the default steps per draw grow by the same factor; a given step keeps ten (per
    sub-chain for HAMCMC)."""
    import jax.numpy as jnp

    from pplsamplers.estimator import Whitening, build_potential, whiten
    from pplsamplers.kernels.sgmcmc.step_size import auto_langevin_step, auto_langevin_steps
    from pplsamplers.kernels.spec import WarmupContext
    from pplsamplers.registry import make_kernel

    dim = 300
    terms = lambda x, idx: (0.5 * jnp.sum(x**2), jnp.zeros(idx.shape[0]))
    raw = build_potential(terms, dim=dim, N=10, n=10, init_position=jnp.zeros(dim))
    white = whiten(raw.estimator, Whitening(jnp.zeros(dim), jnp.ones(dim)))
    spec = make_kernel(sampler, None, potential=raw).spec
    zero = jnp.zeros(dim)
    context = WarmupContext(zero, zero, None, Whitening(zero, jnp.ones(dim)), whitened=True)
    params = spec.default_params(jax.random.key(0), white, context)
    metric = getattr(params, "inverse_metric", None)  # pSGLD: ε G_j is the step
    step = float(np.max(params.step_size * (1.0 if metric is None else metric)))
    assert step <= auto_langevin_step(dim) * (1 + 1e-6) < 0.1
    # HAMCMC's steps per draw count those of each of its M = 2 interleaved sub-chains
    sub_chains = 2 if sampler == "hamcmc" else 1
    assert spec.steps_per_sample_at(dim) == sub_chains * auto_langevin_steps(dim) == sub_chains * 62
    given = make_kernel(sampler, None, potential=raw, step_size=0.05).spec
    assert given.steps_per_sample_at is None and given.steps_per_sample == 10 * sub_chains
