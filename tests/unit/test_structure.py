"""The structured warmup of models with group effects: the arrowhead Hessian and its whitening,
group detection, the nested Laplace centre and the second-order control variate (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from models import mixed_glm
from pplsamplers.estimator import with_batch_size, with_control_variate
from pplsamplers.estimator.blocks import (
    Blocks,
    block_hessian,
    block_whitening,
    whitened_curvature_diagonal,
)
from pplsamplers.model import make_potential
from pplsamplers.warmup import SetupOptions, setup
from pplsamplers.warmup.laplace import conditional_mode, nested_laplace
from pplsamplers.warmup.structure import coupling_check, find_blocks
from pplsamplers.warmup.structured import structured_fit


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def normal_groups(y, group, num_groups):
    """y_i ~ N(μ + τ z_g(i), 1), z_g ~ N(0, 1): Gaussian given (μ, τ), so Laplace is exact
    in the group effects."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = numpyro.sample("tau", dist.HalfNormal(2.0))
    with numpyro.plate("groups", num_groups):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu + tau * z[group], 1.0), obs=y)


def normal_data(num_groups=12, seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, num_groups)
    group = np.repeat(np.arange(num_groups), sizes)
    y = 1.0 + 0.8 * rng.standard_normal(num_groups)[group] + rng.standard_normal(group.size)
    return (jnp.asarray(y), jnp.asarray(group)), {"num_groups": num_groups}


@pytest.fixture(scope="module")
def normal_potential():
    with jax.enable_x64(True):
        args, kwargs = normal_data()
        return make_potential(normal_groups, args, kwargs)


def dense_hessian(potential, x):
    return jax.hessian(lambda y: potential.estimator.full_value_and_grad(y)[0])(x)


def test_arrowhead_hessian_and_whitening_match_the_dense_algebra(normal_potential):
    potential = normal_potential
    x = potential.init_position + 0.3
    blocks, note = find_blocks(potential, x, jax.random.key(0))
    assert blocks.num_groups == 12 and blocks.block_size == 1, note
    gradient = lambda y: potential.estimator.full_value_and_grad(y)[1]
    H = block_hessian(gradient, x, blocks)
    dense = np.asarray(dense_hessian(potential, x))
    v = jax.random.normal(jax.random.key(1), x.shape, x.dtype)
    np.testing.assert_allclose(H.matvec(v), dense @ v, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(H.quadratic(v), 0.5 * v @ dense @ v, rtol=1e-10)
    assert coupling_check(potential, x, H, jax.random.key(2)) is None
    # at the nested Laplace centre: the Gaussian has the groups' blocks and couplings of H,
    # and the globals' marginal precision F (H itself is indefinite along τ there)
    fit = nested_laplace(potential.estimator, blocks, x)
    whitening = block_whitening(fit.center, fit.hessian, fit.global_precision)
    L = np.asarray(whitening.matrix())
    precision = np.linalg.inv(L @ L.T)
    dense = np.asarray(dense_hessian(potential, fit.center))
    glob, local = np.asarray(blocks.globals_), np.asarray(blocks.groups).reshape(-1)
    np.testing.assert_allclose(
        precision[np.ix_(local, local)], dense[np.ix_(local, local)], atol=1e-8
    )
    np.testing.assert_allclose(
        precision[np.ix_(glob, local)], dense[np.ix_(glob, local)], atol=1e-8
    )
    schur = dense[np.ix_(glob, local)] @ np.linalg.solve(
        dense[np.ix_(local, local)], dense[np.ix_(local, glob)]
    )
    np.testing.assert_allclose(
        precision[np.ix_(glob, glob)], np.asarray(fit.global_precision) + schur, atol=1e-8
    )
    curvature = whitened_curvature_diagonal(whitening, fit.hessian)
    np.testing.assert_allclose(curvature, np.diag(L.T @ dense @ L), atol=1e-8)
    z = jax.random.normal(jax.random.key(3), (4, x.shape[0]), x.dtype)
    np.testing.assert_allclose(whitening.to_z(whitening.to_x(z)), z, atol=1e-10)


def test_groups_that_couple_are_rejected():
    """A prior that correlates the group effects breaks the arrowhead: the check says so."""

    def correlated(y, group, num_groups):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        cov = 0.5 * jnp.eye(num_groups) + 0.5
        z = numpyro.sample("z", dist.MultivariateNormal(jnp.zeros(num_groups), cov))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu + z[group], 1.0), obs=y)

    args, kwargs = normal_data()
    potential = make_potential(correlated, args, kwargs)
    fit, why = structured_fit(potential, potential.init_position, jax.random.key(0))
    assert fit is None and why.startswith("the groups couple"), why


def test_every_datum_gets_its_group_where_its_derivative_vanishes_at_the_point():
    """Data whose directional derivatives vanish at the point (a residual exactly zero there;
    in float32 a derivative near zero loses the ratio to rounding) read their group from their
    own gradients at nearby points: each datum's group is known, so the per-example moments
    that SGBD and cSGLD read take the O((p + k) n) path, not the dense (n, D) gradients."""
    args, kwargs = normal_data()
    y, group = args
    potential = make_potential(normal_groups, args, kwargs)
    x = potential.init_position + 0.3
    sites = potential.unravel(x)
    mean = sites["mu"] + jnp.exp(sites["tau"]) * sites["z"][group]  # unconstrained: log τ
    y = y.at[jnp.array([0, 5, 17])].set(mean[jnp.array([0, 5, 17])])  # zero residual at x
    potential = make_potential(normal_groups, (y, group), kwargs)
    blocks, note = find_blocks(potential, x, jax.random.key(0))
    assert blocks is not None and blocks.datum_group is not None, note
    np.testing.assert_array_equal(blocks.datum_group, group)
    np.testing.assert_array_equal(blocks.rows, np.bincount(np.asarray(group)))


def test_models_without_group_effects_have_no_blocks():
    def regression(x, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(w[0] + w[1] * x, 1.0), obs=y)

    x = jnp.linspace(-1.0, 1.0, 200)
    potential = make_potential(regression, (x, 2 * x), {})
    blocks, why = find_blocks(potential, potential.init_position, jax.random.key(0))
    assert blocks is None and "no latent site" in why


def test_crossed_groupings_are_not_one_set_of_groups():
    def crossed(a, b, y):
        u = numpyro.sample("u", dist.Normal(0.0, 1.0).expand([10]).to_event(1))
        v = numpyro.sample("v", dist.Normal(0.0, 1.0).expand([10]).to_event(1))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(u[a] + v[b], 1.0), obs=y)

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 10, 400), rng.integers(0, 10, 400)
    potential = make_potential(crossed, (jnp.asarray(a), jnp.asarray(b), jnp.zeros(400)), {})
    blocks, why = find_blocks(potential, potential.init_position + 0.1, jax.random.key(0))
    assert blocks is None and "crossed" in why, why


def marginal_f(potential, blocks, theta):
    """f(θ) of the nested Laplace objective by dense algebra (a brute-force reference)."""
    x0 = potential.init_position.at[blocks.globals_].set(theta)
    x, _ = conditional_mode(potential.estimator, blocks, x0)
    H = np.asarray(dense_hessian(potential, x))
    local = np.asarray(blocks.groups).reshape(-1)
    value = potential.estimator.full_value_and_grad(x)[0]
    return float(value) + 0.5 * np.linalg.slogdet(H[np.ix_(local, local)])[1]


def test_nested_laplace_finds_the_marginal_mode(normal_potential):
    """Its centre is a stationary point of the brute-force marginal f(θ), a minimum, and
    its globals' precision is f's curvature."""
    potential = normal_potential
    blocks, _ = find_blocks(potential, potential.init_position + 0.3, jax.random.key(0))
    fit = nested_laplace(potential.estimator, blocks, potential.init_position)
    assert fit.converged, fit.decrement
    theta = np.asarray(fit.center[blocks.globals_])
    precision = np.asarray(fit.global_precision)
    sd = 1 / np.sqrt(np.diag(precision))
    for j in range(theta.size):
        step = np.zeros_like(theta)
        step[j] = 1e-3 * sd[j]
        up, down = (marginal_f(potential, blocks, theta + s) for s in (step, -step))
        here = marginal_f(potential, blocks, theta)
        assert abs(up - down) / (2 * step[j]) * sd[j] < 1e-2  # zero gradient, in sds
        curvature = (up - 2 * here + down) / step[j] ** 2
        np.testing.assert_allclose(curvature, precision[j, j], rtol=1e-2)


def test_nested_laplace_centre_is_in_the_mass_not_at_the_joint_mode():
    """The joint mode of a random-intercept logistic model puts τ far out; the nested Laplace
    centre agrees with the posterior mean of log τ to a fraction of its sd (the reference:
    NumPyro NUTS on this data set, 2 × 2000 draws: mean −0.128, sd 0.067)."""
    args, kwargs = mixed_glm.load_data(N=20_000, num_groups=200, dtype=jnp.float64)
    potential = make_potential(mixed_glm.model, args, kwargs)
    fit, note = structured_fit(potential, potential.init_position, jax.random.key(0))
    assert fit is not None and fit.converged, note
    log_tau = float(fit.center[potential.dim - 201])  # alpha, beta (3), tau, then z (200)
    assert abs(log_tau + 0.128) < 0.25 * 0.067, log_tau
    factor = np.asarray(fit.whitening.global_factor)
    sd = float(np.sqrt((factor @ factor.T)[-1, -1]))  # the globals' Laplace-marginal sd
    assert 0.8 < sd / 0.067 < 1.25, sd


def test_second_order_control_variate_is_unbiased_and_of_higher_order(normal_potential):
    """Averaged over every contiguous block the estimator is the full gradient, and its
    variance falls as |δ|⁴ near the anchor where the first-order one falls as |δ|² (the
    likelihood is Gaussian in (μ, z) at fixed τ, so only the bilinear τ z leaves a residual)."""
    potential = normal_potential
    blocks, _ = find_blocks(potential, potential.init_position + 0.3, jax.random.key(0))
    center = nested_laplace(potential.estimator, blocks, potential.init_position).center
    gradient = lambda y: potential.estimator.full_value_and_grad(y)[1]
    likelihood = block_hessian(gradient, center, blocks) - block_hessian(
        potential.estimator.global_grad, center, blocks
    )
    base = with_batch_size(potential.estimator, 7)._replace(contiguous=True)
    second = with_control_variate(base, center, likelihood)
    first = with_control_variate(base, center)
    every_block = (jnp.arange(base.N)[:, None] + jnp.arange(7)[None, :]) % base.N
    direction = jax.random.normal(jax.random.key(5), center.shape, center.dtype)
    spread = {}
    for eps in (0.03, 0.01):
        x = center + eps * direction
        pairs = (("first", first), ("second", second))
        grads = {k: jax.vmap(lambda i, e=e, x=x: e.grad(x, i))(every_block) for k, e in pairs}
        np.testing.assert_allclose(grads["second"].mean(0), gradient(x), atol=1e-9)
        spread[eps] = {k: float(jnp.sum(g.var(0))) for k, g in grads.items()}
    assert spread[0.03]["second"] < 0.05 * spread[0.03]["first"]
    np.testing.assert_allclose(spread[0.03]["first"] / spread[0.01]["first"], 9.0, rtol=0.1)
    assert spread[0.03]["second"] / spread[0.01]["second"] > 50.0  # 81 for |δ|⁴


def test_setup_uses_the_structure_and_says_so():
    args, kwargs = mixed_glm.load_data(N=4_000, num_groups=100, dtype=jnp.float64)
    result = setup(SetupOptions(mixed_glm.model, subsample_size=400), args, kwargs)
    notes = result.notes
    assert notes["structure"].startswith("100 groups of 1 coordinates ('z'), 5 global")
    assert notes["precondition"].startswith("arrowhead Gaussian at the nested Laplace centre")
    assert notes["control_variate"].startswith("on: second order")
    assert result.estimator.cv.hessian is not None and result.curvature.shape == (105,)
    assert not result.refine_metric
    assert isinstance(result.structure.blocks, Blocks)


@pytest.mark.filterwarnings("ignore:pplsamplers. subsample_size")
@pytest.mark.parametrize("family, slope", [("logistic", False), ("poisson", True)])
def test_per_example_moments_from_the_groups_match_the_dense_gradients(family, slope):
    """The structured moments (k + p forward products) equal the mean and variance of the
    dense (n, D) per-example gradients, in the kernel's whitened coordinates with the
    second-order control variate, for one and two coordinates per group."""
    args, kwargs = mixed_glm.load_data(
        N=3_000, num_groups=60, family=family, slope=slope, dtype=jnp.float64
    )
    result = setup(SetupOptions(mixed_glm.model, subsample_size=300), args, kwargs)
    estimator = result.kernel_estimator
    blocks = estimator.blocks
    assert blocks is not None and blocks.block_size == (2 if slope else 1)
    group = np.asarray(args[1])
    # the rows are shuffled once: each group keeps its number of rows
    counts = np.bincount(np.asarray(blocks.datum_group), minlength=60)
    np.testing.assert_array_equal(counts, np.bincount(group, minlength=60))
    z = 0.7 * jax.random.normal(jax.random.key(0), (estimator.dim,), jnp.float64)
    idx = estimator.sample_indices(jax.random.key(1))
    mean, variance = jax.jit(estimator.per_example_moments)(z, idx)
    dense = estimator.per_example_grads(z, idx)
    np.testing.assert_allclose(mean, dense.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(variance, dense.var(0, ddof=1), rtol=1e-8, atol=1e-12)


def test_nested_laplace_leaves_a_centred_models_neck():
    """A centred model's joint mode is the funnel's neck (τ → 0, where 1/τ² overflows):
    from there alone the Laplace marginal is not finite and the search gives up, and with the
    model's initial point beside it the search starts there and finds the same centre."""

    def centred(y, group, num_groups):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        tau = numpyro.sample("tau", dist.HalfNormal(2.0))
        with numpyro.plate("groups", num_groups):
            u = numpyro.sample("u", dist.Normal(mu, tau))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(u[group], 1.0), obs=y)

    args, kwargs = normal_data(num_groups=20)
    potential = make_potential(centred, args, kwargs)
    init = potential.init_position
    blocks, _ = find_blocks(potential, init, jax.random.key(0))
    neck = init.at[blocks.globals_[1]].set(-400.0)  # log τ: 1/τ² = e⁸⁰⁰ overflows
    assert nested_laplace(potential.estimator, blocks, neck) is None
    both = nested_laplace(potential.estimator, blocks, (neck, init))
    alone = nested_laplace(potential.estimator, blocks, init)
    assert both.converged and alone.converged
    np.testing.assert_allclose(both.center, alone.center, atol=1e-6)


def test_nested_laplace_converges_in_float32_from_a_saturated_start():
    """A logistic mixed model on raw covariates (age in years), started at the model's
    initial point: every linear predictor is ±100, the data's curvature vanishes in float32,
    and the first metric proposes steps 10⁶ sds long.  The search halves its step down to
    θ's float resolution and reaches the float64 marginal mode."""
    modes = {}
    for dtype, x64 in ((jnp.float32, False), (jnp.float64, True)):
        with jax.enable_x64(x64):
            args, kwargs = mixed_glm.load_data(N=4000, num_groups=100, dtype=dtype)
            potential = make_potential(mixed_glm.model, args, kwargs)
            fit, why = structured_fit(potential, potential.init_position, jax.random.key(0))
            assert fit is not None and fit.converged, (dtype, why, fit and fit.notes)
            modes[dtype] = np.asarray(fit.center[fit.blocks.globals_], float)
    np.testing.assert_allclose(modes[jnp.float32], modes[jnp.float64], atol=5e-3)
