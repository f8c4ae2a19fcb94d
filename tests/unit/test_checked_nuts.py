"""NUTS's run checks itself inside ``MCMC.run`` (CheckedNUTS): AutoSampler's NUTS and
``--sampler nuts`` warn when they miss, in NumPyro's own workflow, and stay quiet when right."""

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import MCMC

from models.classic import funnel
from pplsamplers import AutoSampler
from pplsamplers.diagnostics.checks import SelfCheckWarning
from pplsamplers.infer.checked_nuts import CheckedNUTS, CheckedState
from pplsamplers.registry import make_kernel

X = np.random.default_rng(1).normal(3.0, 2.0, size=(200, 2))


def gaussian(x):
    mu = numpyro.sample("mu", dist.Normal(jnp.zeros(2), 10.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("x", dist.Normal(mu, 2.0).to_event(1), obs=x)


def double_well(x):
    """Two modes at μ = ±6 with a 72-nat barrier between them: a chain stays where it starts."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", x.shape[0]):
        near = jnp.logaddexp(
            dist.Normal(-6.0, 0.5).log_prob(mu), dist.Normal(6.0, 0.5).log_prob(mu)
        )
        numpyro.factor("bimodal", near / x.shape[0] + 0.0 * x[:, 0])


def _run(kernel, method, init_params=None, **kw):
    mcmc = MCMC(
        kernel, num_warmup=150, num_samples=300, num_chains=2, chain_method=method,
        progress_bar=False,
    )  # fmt: skip
    mcmc.run(jax.random.PRNGKey(0), X, init_params=init_params, **kw)
    return mcmc


@pytest.mark.parametrize("method", ["sequential", "vectorized"])
def test_a_right_run_passes_quietly_and_numpyro_reads_it_as_ever(method):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SelfCheckWarning)
        mcmc = _run(make_kernel("nuts", gaussian), method, extra_fields=("diverging",))
    result = mcmc.sampler.self_check_result
    assert result is not None and result.passed, result.warning
    assert result.stein.num_draws >= 100 and result.counts == {"divergent": 0}
    assert isinstance(mcmc.last_state, CheckedState)
    samples = mcmc.get_samples(group_by_chain=True)["mu"]
    assert samples.shape == (2, 300, 2)
    idata = az.from_numpyro(mcmc)
    assert "diverging" in idata["sample_stats"]
    mcmc.print_summary()


def test_chains_in_separate_modes_warn_inside_run_for_autosampler():
    """AutoSampler hands N = 200 to NUTS; two chains started in the two wells stay there.
    Nothing but ``mcmc.run`` is called: the warning must come from inside it."""
    sampler = AutoSampler(double_well)
    start = {"mu": jnp.array([-6.0, 6.0])}
    with pytest.warns(SelfCheckWarning, match=r"R-hat .* AutoSampler's choice 'nuts'"):
        _run(sampler, "sequential", init_params=start)
    assert sampler.decision.kernel == "nuts" and not sampler.delegate.self_check_result.passed


def test_warmup_then_run_checks_once_at_the_end_of_the_run():
    kernel = CheckedNUTS(gaussian)
    mcmc = MCMC(kernel, num_warmup=150, num_samples=300, progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(1), X)
    assert kernel.self_check_result is None
    mcmc.run(jax.random.PRNGKey(2), X)
    assert kernel.self_check_result is not None and kernel.self_check_result.passed


def _uniform_edge(y):
    theta = numpyro.sample("theta", dist.HalfNormal(50.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Uniform(0.0, theta), obs=y)


def test_a_hard_edge_at_the_data_skips_the_stein_identities():
    """y ~ Uniform(0, θ): the density does not vanish at θ = max y, so E[s] = 0 fails for a
    right run, and every trajectory that crosses θ = max y diverges; the check keeps
    convergence and chain health only, and this right run passes."""
    y = jnp.asarray(np.random.default_rng(0).uniform(0.0, 20.0, 300))
    start = numpyro.infer.init_to_value(values={"theta": 25.0})
    kernel = make_kernel("nuts", _uniform_edge, check_support=("y",), init_strategy=start)
    assert isinstance(kernel, CheckedNUTS) and not kernel.exact_scores
    mcmc = MCMC(kernel, num_warmup=300, num_samples=1000, num_chains=2, progress_bar=False,
                chain_method="sequential")  # fmt: skip
    mcmc.run(jax.random.PRNGKey(0), y)
    result = kernel.self_check_result
    assert result.passed and np.all(np.isnan(result.stein.mean_err)), result.warning
    assert result.counts == {} and int(mcmc.last_state.num_steps.sum()) > 0


def test_self_check_false_is_numpyro_nuts():
    kernel = CheckedNUTS(gaussian, self_check=False)
    mcmc = MCMC(kernel, num_warmup=50, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X)
    assert mcmc.last_state.monitor is None and kernel.self_check_result is None


def test_nuts_is_not_started_in_a_funnels_neck():
    """Neal's funnel's joint mode is v = −40.5 (the mass is at 0 ± 3): NUTS started there
    adapted its step to the neck and v never moved, so AutoSampler leaves NUTS its own start
    where the mode's curvature says it is a neck, and keeps the mode start elsewhere; on the
    funnel itself it runs NUTS re-centred, with no neck."""
    from pplsamplers.model import make_potential
    from pplsamplers.select.start import in_a_neck

    potential = make_potential(funnel)
    neck = potential.unconstrain({"v": jnp.array(-40.5), "x": jnp.zeros(9)})
    assert in_a_neck(potential.estimator, neck)
    assert not in_a_neck(
        potential.estimator, potential.unconstrain({"v": jnp.array(0.0), "x": jnp.zeros(9)})
    )
    normal = make_potential(gaussian, (X,))
    assert not in_a_neck(normal.estimator, normal.unconstrain({"mu": jnp.asarray(X.mean(0))}))
    sampler = AutoSampler(funnel)
    sampler.decide(())
    assert sampler.decision.kernel == "nuts"
    # NUTS runs the funnel re-centred (pplsamplers.warmup.centring: x non-centred), whose
    # mode is no neck, so it starts there
    trace = handlers.trace(handlers.seed(sampler.delegate.model, 0)).get_trace()
    assert trace["x"]["type"] == "deterministic" and "x_decentered" in trace
    assert "init_to_value" in repr(sampler.delegate._init_strategy)
