"""Boomerang invariants: flow, reflection, ∇E, reference construction, validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pplsamplers.estimator import Whitening, build_potential, whiten
from pplsamplers.infer import Boomerang
from pplsamplers.kernels.pdmp import boomerang
from pplsamplers.kernels.pdmp.builder import NOISY_DEFAULTS, ThinningOptions
from pplsamplers.kernels.pdmp.flow import elliptical_flow
from pplsamplers.kernels.pdmp.reference import (
    GaussianReference,
    build_reference,
    curvature_diagonal,
    gaussian_reference,
)
from pplsamplers.kernels.spec import WarmupContext
from pplsamplers.warmup import find_map

D = 4
RNG = np.random.default_rng(0)
_L = RNG.standard_normal((D, D))
FULL_COV = _L @ _L.T + 0.5 * np.eye(D)
MEAN = RNG.standard_normal(D)
TIMES = dict(sample_interval=1.0, t_init=0.25, max_extrapolation=0.5, refresh_rate=1.0)
"""The former defaults of ``boomerang.make_params`` (its times are required now)."""


def _references():
    return [gaussian_reference(MEAN, np.diag(FULL_COV)), gaussian_reference(MEAN, FULL_COV)]


def _gaussian_potential(precision, mean, N=5):
    precision, mean = jnp.asarray(precision), jnp.asarray(mean)

    def terms(x, idx):  # prior N(0, I) plus a Gaussian likelihood spread over N data
        delta = x - mean
        return 0.5 * x @ x, 0.5 * (delta @ precision @ delta) / N * jnp.ones(idx.shape[0])

    return build_potential(terms, dim=mean.shape[0], N=N, n=N, init_position=jnp.zeros_like(mean))


@pytest.mark.parametrize("reference", _references(), ids=["diagonal", "full"])
def test_flow_conserves_reference_energy_and_is_exact_at_zero(reference):
    flow = elliptical_flow(reference.mean)
    x = jnp.asarray(RNG.standard_normal(D))
    v = reference.draw(jax.random.key(1))
    x0, v0 = flow.move(x, v, 0.0)
    # x(0) = x and v(0) = v up to rounding (the sign erratum: the paper's flow gives 2x* - x)
    np.testing.assert_allclose(x0, x, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(v0, v)
    energy = reference.energy(x, v)
    for t in (0.1, 1.0, np.pi / 2, 3.0, 17.3, 1000.0):
        xt, vt = flow.move(x, v, t)
        assert abs(float(reference.energy(xt, vt) - energy)) <= 1e-10 * float(energy)
    # the path solves dx/dt = v(t)
    eps = 1e-6
    xa, _ = flow.move(x, v, 0.7 - eps)
    xb, vb = flow.move(x, v, 0.7 + eps)
    _, vm = flow.move(x, v, 0.7)
    np.testing.assert_allclose((xb - xa) / (2 * eps), vm, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("reference", _references(), ids=["diagonal", "full"])
def test_reflection_flips_directional_derivative_and_keeps_sigma_norm(reference):
    for seed in range(5):
        keys = jax.random.split(jax.random.key(seed))
        v = reference.draw(keys[0])
        g = jax.random.normal(keys[1], (D,))
        w = reference.reflect(v, g)
        np.testing.assert_allclose(g @ w, -(g @ v), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(
            v @ reference.precision_times(v), w @ reference.precision_times(w), rtol=1e-10
        )
        np.testing.assert_allclose(reference.reflect(w, g), v, rtol=1e-10, atol=1e-12)
    v = reference.draw(jax.random.key(9))
    np.testing.assert_array_equal(reference.reflect(v, jnp.zeros(D)), v)


def test_full_reference_algebra_matches_dense_linear_algebra():
    ref = gaussian_reference(MEAN, FULL_COV)
    g = jnp.arange(1.0, D + 1)
    np.testing.assert_allclose(ref.covariance_times(g), FULL_COV @ np.asarray(g), rtol=1e-10)
    np.testing.assert_allclose(ref.precision_times(g), np.linalg.solve(FULL_COV, g), rtol=1e-10)
    draws = jax.vmap(ref.draw)(jax.random.split(jax.random.key(0), 20000))
    np.testing.assert_allclose(np.cov(np.asarray(draws).T), FULL_COV, atol=0.12 * FULL_COV.max())


def test_rate_uses_energy_gradient_not_potential_gradient():
    # Gaussian target = reference: dU = Sigma^-1 (x - x*) so grad E = 0 and nothing bounces,
    # whereas a rate built from grad U would bounce constantly.
    precision = np.linalg.inv(FULL_COV)
    cov = np.linalg.inv(precision + np.eye(D))
    mean = cov @ precision @ MEAN
    potential = _gaussian_potential(precision, MEAN).estimator
    ref = gaussian_reference(mean, cov)
    x = jnp.asarray(RNG.standard_normal(D))
    grad_e = boomerang.energy_gradient(potential, ref, x, jnp.arange(5))
    np.testing.assert_allclose(grad_e, 0.0, atol=1e-10)
    assert float(jnp.linalg.norm(potential.grad(x, jnp.arange(5)))) > 0.1
    pdmp, params = boomerang.build_pdmp(), boomerang.make_params(ref, **TIMES)
    state = pdmp.init(jax.random.key(0), x, potential, params)
    step = jax.jit(lambda key, s, p: pdmp.kernel(key, s, potential, p))
    state, info = step(jax.random.key(1), state, params)
    assert int(info.num_bounces) == 0 and int(info.bound_violations) == 0
    # exact time averages of the elliptical flow are reported
    assert info.time_average.shape == (D,) and bool(jnp.all(info.time_average_sq >= 0))


def test_kernel_bounces_with_a_mismatched_reference_and_counts_data():
    precision = np.linalg.inv(FULL_COV)
    potential = _gaussian_potential(precision, MEAN).estimator
    ref = gaussian_reference(jnp.zeros(D), jnp.ones(D))
    pdmp = boomerang.build_pdmp(ThinningOptions(alpha=1.5))
    params = boomerang.make_params(ref, **{**TIMES, "sample_interval": 5.0})
    state = pdmp.init(jax.random.key(0), jnp.zeros(D), potential, params)
    step = jax.jit(lambda key, s, p: pdmp.kernel(key, s, potential, p))
    state, info = step(jax.random.key(1), state, params)
    assert int(info.num_bounces) > 0
    assert int(info.data_evals) == (int(info.rate_evals) + int(info.num_bounces)) * potential.n
    # velocities stay on the reference energy shell between refreshments only; the position
    # moved and is finite
    assert bool(jnp.all(jnp.isfinite(state.position))) and float(jnp.abs(state.position).sum()) > 0


def test_automatic_reference_is_map_and_inverse_hessian_diagonal():
    precision = np.linalg.inv(FULL_COV)
    potential = _gaussian_potential(precision, MEAN)
    full_precision = precision + np.eye(D)
    # x* is the MAP (build_reference takes it; it used to search for it itself)
    mode = find_map(jax.random.key(0), potential.estimator, potential.init_position).position
    ref = build_reference(potential.estimator, mode)
    np.testing.assert_allclose(
        ref.mean, np.linalg.solve(full_precision, precision @ MEAN), atol=1e-6
    )
    np.testing.assert_allclose(ref.variance, 1.0 / np.diag(full_precision), rtol=1e-8)
    scaled = build_reference(potential.estimator, ref.mean, gamma=3.0)
    np.testing.assert_allclose(scaled.variance, 3.0 / np.diag(full_precision), rtol=1e-8)
    assert ref.is_diagonal


def test_fisher_curvature_is_summed_squared_gradients_plus_prior():
    X = jnp.asarray(RNG.standard_normal((30, 3)))

    def terms(x, idx):
        return 0.5 * x @ x, 0.5 * (X[idx] @ x - 1.0) ** 2

    potential = build_potential(terms, dim=3, N=30, n=30, init_position=jnp.zeros(3)).estimator
    x = jnp.asarray([0.3, -0.2, 0.1])
    residual = np.asarray(X @ x - 1.0)
    expected = 1.0 + np.sum((residual[:, None] * np.asarray(X)) ** 2, axis=0)
    np.testing.assert_allclose(curvature_diagonal(potential, x, "fisher"), expected, rtol=1e-10)
    hessian = 1.0 + np.sum(np.asarray(X) ** 2, axis=0)
    np.testing.assert_allclose(curvature_diagonal(potential, x, "hessian"), hessian, rtol=1e-10)
    with pytest.raises(ValueError, match="curvature"):
        curvature_diagonal(potential, x, "bfgs")


def test_non_positive_definite_reference_raises():
    with pytest.raises(ValueError, match="not positive definite"):
        gaussian_reference(np.zeros(2), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="not positive definite"):
        gaussian_reference(np.zeros(2), np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="not positive definite"):
        gaussian_reference(np.zeros(2), np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="shape"):
        gaussian_reference(np.zeros(2), np.ones(3))
    with pytest.raises(ValueError, match="shape"):
        gaussian_reference(np.zeros(2), np.ones(2), dim=3)
    with pytest.raises(ValueError, match="not positive definite"):
        Boomerang(lambda: None, reference=(np.zeros(2), np.array([1.0, 0.0])))
    # automatic reference at a point of negative curvature
    terms = lambda x, idx: (-0.5 * x @ x, jnp.zeros(idx.shape[0]))
    potential = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    with pytest.raises(ValueError, match="not positive definite"):
        build_reference(potential.estimator, jnp.zeros(2))


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"thinning": {"alpha": 0.5}}, "alpha"),
        ({"refresh_rate": -1.0}, "refresh_rate"),
        ({"sample_interval": 0.0}, "sample_interval"),
        ({"sample_interval": -2.0}, "sample_interval"),
        ({"target_evals_per_sample": 0}, "target_evals_per_sample"),
        ({"t_init": 0.0}, "t_init"),
        ({"max_extrapolation": -1.0}, "max_extrapolation"),
        ({"gamma": 0.0}, "gamma"),
        ({"curvature": "exact"}, "curvature"),
        ({"start": "nowhere"}, "start"),
        ({"reference": "prior"}, "reference"),
        ({"thinning": {"max_evaluations": 1}}, "max_evaluations"),
        ({"thinning": {"max_events_per_sample": 0}}, "max_events_per_sample"),
        ({"thinning": {"noise_margin": -1.0}}, "noise_margin"),
    ],
)
def test_invalid_arguments_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Boomerang(lambda: None, **kwargs)


def test_refresh_rate_auto_is_one_at_every_dimension():
    from pplsamplers.kernels.pdmp.tuning import radial_refresh_rate

    assert Boomerang(lambda: None, refresh_rate="auto").options.refresh_rate == "auto"
    assert [radial_refresh_rate("auto", d, radial=False) for d in (2, 304, 10**4)] == [1.0] * 3


def test_reference_namedtuple_is_a_pytree():
    ref = GaussianReference(jnp.zeros(2), jnp.ones(2))
    leaves = jax.tree.leaves(ref)
    assert len(leaves) == 2


def test_noise_handling_defaults_depend_on_the_gradient_mode():
    full = _gaussian_potential(np.eye(D), MEAN, N=5).estimator
    mini = build_potential(full.terms, dim=D, N=5, n=2, init_position=jnp.zeros(D)).estimator
    thinning = Boomerang(lambda: None).options.thinning
    assert thinning.noise_handling(full) == (0.0, 0.0)
    noisy = (NOISY_DEFAULTS["min_gap"], NOISY_DEFAULTS["noise_margin"])
    assert thinning.noise_handling(mini) == noisy
    given = {"noise_margin": 0.0, "min_gap": 0.5}
    explicit = Boomerang(lambda: None, thinning=given).options.thinning
    assert explicit.noise_handling(mini) == (0.5, 0.0)


def test_user_reference_is_mapped_to_the_kernel_coordinates():
    # x = x0 + L z: the reference N(m, S) in x is N(L^-1 (m - x0), L^-1 S L^-T) in z
    from pplsamplers.kernels.pdmp.boomerang import given_reference

    def context(center, factor):  # the shared warmup's map x = c + L z, as a kernel sees it
        center, factor = jnp.asarray(center), jnp.asarray(factor)
        return WarmupContext(jnp.zeros(D), None, None, Whitening(center, factor), whitened=True)

    factor = np.linalg.cholesky(FULL_COV)
    ref = given_reference(MEAN + factor @ np.ones(D), FULL_COV, context(MEAN, factor))
    np.testing.assert_allclose(ref.mean, np.ones(D), rtol=1e-6)
    np.testing.assert_allclose(ref.cholesky @ ref.cholesky.T, np.eye(D), atol=1e-6)
    diagonal = context(np.zeros(D), np.full(D, 2.0))
    ref = given_reference(np.zeros(D), np.full(D, 4.0), diagonal)
    assert ref.is_diagonal
    np.testing.assert_allclose(ref.variance, np.ones(D), rtol=1e-6)


def test_reference_in_whitened_coordinates_falls_back_to_unit_scale_off_a_minimum():
    """The shared warmup's centre may be a variational fit's mean, not a minimum (a curved,
    non-centred hierarchical posterior: AutoSampler used to crash there on the Hessian's
    negative diagonal).  In whitened coordinates the posterior has unit scale, so the
    automatic reference becomes N(x*, γ I) and says so; in the model's own coordinates, where
    no scale is known, the error stays."""
    from pplsamplers.kernels.pdmp.boomerang import BoomerangOptions, automatic_reference

    # a double well: the curvature at 0 is −1 in the first coordinate
    terms = lambda x, idx: (-0.5 * x[0] ** 2 + 0.25 * x[0] ** 4 + 0.5 * x[1] ** 2, jnp.zeros(1))
    potential = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    options, zero = BoomerangOptions(gamma=0.5), jnp.zeros(2)
    raw = WarmupContext(zero, zero, None, Whitening(zero, jnp.ones(2)), whitened=False)
    with pytest.raises(ValueError, match="not positive definite"):
        automatic_reference(options, potential.estimator, raw)
    whitening = Whitening(zero, jnp.array([1.0, 2.0]))
    white = whiten(potential.estimator, whitening)
    context = WarmupContext(zero, zero, None, whitening, whitened=True)
    assert context.whitened and not raw.whitened
    reference = automatic_reference(options, white, context)
    np.testing.assert_allclose(reference.mean, np.zeros(2))
    np.testing.assert_allclose(reference.variance, [0.5, 0.5])
