"""Model -> potential: flat priors, the one-inspection ModelView, trace-safe start checks."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints
from numpyro.infer import MCMC

from pplsamplers import SGLD
from pplsamplers.model import (
    ModelView,
    check_position,
    full_data_model,
    inspect,
    make_postprocess,
    make_potential,
    model_info,
)

N = 40
X = jax.random.normal(jax.random.key(0), (N, 2))
Y = X @ jnp.array([0.5, -1.0]) + 0.3 * jax.random.normal(jax.random.key(1), (N,))


def flat_model(X, y):
    w = numpyro.sample("w", dist.ImproperUniform(constraints.real, (), (2,)))
    s = numpyro.sample("s", dist.ImproperUniform(constraints.positive, (), ()))
    c = numpyro.sample("c", dist.ImproperUniform(constraints.ordered_vector, (), (3,)))
    numpyro.factor("penalty", -0.5 * jnp.sum(c**2))
    numpyro.deterministic("s2", s**2)
    with numpyro.plate("data", X.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, s), obs=y[idx])


def _flat_potential_by_hand(u):
    """-log density of flat_model in unconstrained coordinates (ravel order: c, s, w)."""
    uc, us, w = u[:3], u[3], u[4:]
    c = jnp.cumsum(jnp.concatenate([uc[:1], jnp.exp(uc[1:])]))
    s = jnp.exp(us)
    log_jac = us + jnp.sum(uc[1:])
    return -(log_jac - 0.5 * jnp.sum(c**2) + dist.Normal(X @ w, s).log_prob(Y).sum())


def test_improper_flat_priors_factor_and_deterministic():
    pot = make_potential(flat_model, (X, Y), subsample_size=10)
    assert pot.dim == 6
    u = jnp.array([-0.5, 0.1, 0.2, -0.3, 0.4, -0.7])
    value, grad = pot.estimator.full_value_and_grad(u)
    np.testing.assert_allclose(value, _flat_potential_by_hand(u), rtol=1e-5)
    np.testing.assert_allclose(grad, jax.grad(_flat_potential_by_hand)(u), rtol=1e-4, atol=1e-4)
    v, g = pot.estimator.value_and_grad(u, jnp.arange(10))
    assert bool(jnp.isfinite(v)) and bool(jnp.all(jnp.isfinite(g)))
    post = make_postprocess(inspect(flat_model, (X, Y)))(pot.unravel(u))
    np.testing.assert_allclose(post["s2"], jnp.exp(2 * u[3]), rtol=1e-6)
    assert bool(jnp.all(jnp.diff(post["c"]) > 0))


def test_flat_prior_runs_end_to_end_with_sgld():
    def model(X, y):
        w = numpyro.sample("w", dist.ImproperUniform(constraints.real, (), (2,)))
        with numpyro.plate("data", X.shape[0]) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])

    mcmc = MCMC(
        SGLD(model, step_size=1e-3, subsample_size=10),
        num_warmup=10,
        num_samples=20,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), X, Y)
    assert mcmc.get_samples()["w"].shape == (20, 2)
    assert bool(jnp.all(jnp.isfinite(mcmc.get_samples()["w"])))


def test_invalid_parameters_at_the_random_start_do_not_stop_the_set_up():
    """NumPyro validates distribution parameters by default: a Weibull survival model whose
    scale exp(b₀ + b₁ x) underflows to 0 in float32 at NumPyro's random start (x near 50,
    b ~ U(-2, 2)) raised "Weibull distribution got invalid scale parameter" while the
    potential read the supports, where NUTS runs (its start is traced, and retried)."""

    def weibull(x, t):
        b = numpyro.sample("b", dist.ImproperUniform(constraints.real, (), (2,)))
        k = numpyro.sample("k", dist.Gamma(2.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("t", dist.Weibull(jnp.exp(b[0] + b[1] * x), k), obs=t)

    rng = np.random.default_rng(0)
    x = rng.normal(50, 10, 200)
    t = np.exp(2.0 + 0.02 * x) * rng.weibull(1.5, 200)
    with jax.enable_x64(False):
        args = (jnp.asarray(x, jnp.float32), jnp.asarray(t, jnp.float32))
        view = inspect(weibull, args, {})
        scale = jnp.exp(-2.0 + -2.0 * args[0][:1])  # where the random start can land
        assert float(scale[0]) == 0.0
        potential = make_potential(view)
        assert potential.dim == 3


def test_model_view_is_one_inspection_used_everywhere():
    view = inspect(flat_model, (X, Y))
    assert isinstance(view, ModelView)
    assert (view.data_plate, view.data_size, view.model_subsample_size) == ("data", N, None)
    assert view.unconstrained_shapes == {"w": (2,), "s": (), "c": (3,)}
    assert view.info == model_info(flat_model, (X, Y))
    from_view = make_potential(view, subsample_size=10)
    from_model = make_potential(flat_model, (X, Y), subsample_size=10)
    u = jnp.linspace(-0.5, 0.5, 6)
    np.testing.assert_allclose(
        from_view.estimator.full_value_and_grad(u)[0],
        from_model.estimator.full_value_and_grad(u)[0],
    )
    # the view forms (the old loose forms (model, args, kwargs, info) are removed)
    z = from_view.unravel(u)
    new = make_postprocess(view)(z)
    assert set(new) == {"w", "s", "c", "s2"}
    full = numpyro.handlers.trace(numpyro.handlers.substitute(full_data_model(view), data=new))
    assert full.get_trace(X, Y)["y"]["value"].shape == (N,)
    check_position(from_view, u, view)
    with pytest.raises(ValueError, match="from the view"):
        make_potential(view, (X, Y))


def test_check_position_is_trace_safe():
    # issue 18 item 1: under pmap (chain_method="parallel") the start is a tracer; the eager
    # check must step aside instead of raising TracerBoolConversionError
    view = inspect(flat_model, (X, Y))
    pot = make_potential(view, subsample_size=10)

    def start(x):
        check_position(pot, x, view)
        check_position(pot, x)
        return x

    x0 = pot.init_position
    np.testing.assert_allclose(jax.jit(start)(x0), x0)
    np.testing.assert_allclose(jax.vmap(start)(jnp.stack([x0, x0])), jnp.stack([x0, x0]))
    # a concrete invalid point still raises
    with pytest.raises(RuntimeError, match="invalid initial point"):
        check_position(pot, jnp.full(pot.dim, jnp.nan), view)


def test_per_draw_postprocess_does_not_touch_all_data():
    # issue 14/17: inspection may pass over N once, but the per-draw maps see one datum
    big = 5000
    Xb, yb = jnp.ones((big, 2)), jnp.ones(big)
    view = inspect(flat_model, (Xb, yb))
    pot = make_potential(view, subsample_size=10)
    post = make_postprocess(view)
    for fn in (lambda x: post(pot.unravel(x)), pot.constrain):
        jaxpr = jax.make_jaxpr(fn)(pot.init_position)
        # NumPyro's plate builds jnp.arange(N) (an iota) that set_plate replaces: dead code
        shapes = [v.aval.shape for e in jaxpr.eqns if e.primitive.name != "iota" for v in e.outvars]
        assert not any(big in s for s in shapes), shapes


def test_no_deterministic_warning_for_sites_outside_the_plate():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inspect(flat_model, (X, Y))


def test_a_support_bounded_by_another_latent_is_accepted_and_fixed_ones_are_read_abstractly():
    """``b ~ Uniform(0, a)`` with ``a`` latent (NUTS accepts it; its set-up raised JAX's
    UnexpectedTracerError until the unconstrained shapes were computed inside the staged
    trace).  ``potential.unconstrain`` maps values through supports taken at the start: a
    support bounded by a latent is read from a concrete trace, fixed ones (real, positive,
    ordered) from an abstract one, which compiles and runs nothing."""

    def bounded_by_latent(y):
        a = numpyro.sample("a", dist.LogNormal(1.0, 0.1))
        b = numpyro.sample("b", dist.Uniform(0.0, a))
        with numpyro.plate("data", y.shape[0]) as idx:
            numpyro.sample("y", dist.Normal(b, 1.0), obs=y[idx])

    y = jnp.linspace(-1.0, 1.0, 10)
    potential = make_potential(bounded_by_latent, (y,))  # a random start: a is traced
    start = potential.init_position  # the same start's a bounds b
    np.testing.assert_allclose(potential.unconstrain(potential.constrain(start)), start, rtol=1e-9)
    a_start = potential.constrain(start)["a"]
    flat = potential.unconstrain({"a": jnp.asarray(3.0), "b": 0.5 * a_start})
    expected = jnp.array([jnp.log(3.0), 0.0])  # b at half its interval (0, a at the start)
    np.testing.assert_allclose(flat, expected, atol=1e-12)
    mcmc = MCMC(SGLD(bounded_by_latent), num_warmup=50, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    draws = mcmc.get_samples()
    assert np.all(np.isfinite(draws["b"])) and np.all((0 < draws["b"]) & (draws["b"] < draws["a"]))

    fixed = make_potential(flat_model, (X, Y))  # real, positive and ordered supports
    values = {"w": jnp.array([0.5, -1.0]), "s": jnp.asarray(2.0), "c": jnp.array([-1.0, 0.0, 2.0])}
    flat = fixed.unconstrain(values)
    ordered = jnp.array([-1.0, 0.0, jnp.log(2.0)])  # first value, then log increments
    # raveled in the sites' sorted order: c, s, w
    np.testing.assert_allclose(flat, jnp.r_[ordered, jnp.log(2.0), 0.5, -1.0], rtol=1e-12)
