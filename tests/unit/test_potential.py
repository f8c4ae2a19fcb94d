"""Unit invariants of the potential layer, in float64."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from models import linear_gaussian, logistic_regression
from pplsamplers.estimator import build_potential, with_batch_size, with_control_variate
from pplsamplers.model import make_potential
from pplsamplers.warmup import find_map


@pytest.fixture(scope="module")
def logreg():
    (X, y), _ = logistic_regression.load_data(N=120, d=4, seed=3)
    X = X.astype(jnp.float64)
    potential = make_potential(logistic_regression.model, (X, y), subsample_size=12)
    return potential.estimator, (X, y), potential.init_position


def test_directional_equals_grad_dot_v(logreg):
    pot, _, _ = logreg
    x = jax.random.normal(jax.random.key(0), (pot.dim,))
    v = jax.random.normal(jax.random.key(1), (pot.dim,))
    idx = pot.sample_indices(jax.random.key(2))
    total, per_example = pot.directional(x, v, idx)
    assert per_example.shape == (pot.n,)
    np.testing.assert_allclose(total, pot.grad(x, idx) @ v, rtol=0, atol=1e-10)


def test_per_example_terms_plus_prior_equal_total(logreg):
    pot, _, _ = logreg
    x = jax.random.normal(jax.random.key(4), (pot.dim,))
    v = jax.random.normal(jax.random.key(5), (pot.dim,))
    idx = pot.sample_indices(jax.random.key(6))
    total, per_example = pot.directional(x, v, idx)
    prior_part = jax.jvp(lambda y: pot.terms(y, idx)[0], (x,), (v,))[1]
    np.testing.assert_allclose(prior_part + pot.N / pot.n * per_example.sum(), total, atol=1e-10)
    # per-example gradients agree with the per-example directional derivatives
    np.testing.assert_allclose(pot.per_example_grads(x, idx) @ v, per_example, atol=1e-10)
    # value splits the same way
    g, per_datum = pot.terms(x, idx)
    np.testing.assert_allclose(g + pot.N / pot.n * per_datum.sum(), pot.value(x, idx), atol=1e-10)


def test_matches_hand_written_potential(logreg):
    pot, (X, y), _ = logreg
    hand = logistic_regression.hand_written_terms(X, y)
    x = jax.random.normal(jax.random.key(7), (pot.dim,))
    idx = jnp.arange(10)
    for ours, theirs in zip(pot.terms(x, idx), hand(x, idx), strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-10)


def test_average_over_disjoint_batches_is_full_potential(logreg):
    pot, _, _ = logreg
    x = jax.random.normal(jax.random.key(8), (pot.dim,))
    batches = jnp.arange(pot.N).reshape(-1, pot.n)
    values = jax.vmap(lambda idx: pot.value_and_grad(x, idx))(batches)
    full_value, full_grad = pot.full_value_and_grad(x)
    np.testing.assert_allclose(values[0].mean(), full_value, rtol=1e-12)
    np.testing.assert_allclose(values[1].mean(0), full_grad, rtol=1e-10, atol=1e-10)


def test_full_value_and_grad_chunking_is_exact(logreg):
    pot, (X, y), _ = logreg
    hand = logistic_regression.hand_written_terms(X, y)
    chunked = build_potential(
        hand, dim=pot.dim, N=pot.N, n=pot.n, init_position=jnp.zeros(pot.dim), chunk_size=7
    ).estimator  # 120 = 17 * 7 + 1: a padded last chunk
    x = jax.random.normal(jax.random.key(9), (pot.dim,))
    a, ga = chunked.full_value_and_grad(x)
    b, gb = pot.full_value_and_grad(x)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(ga, gb, rtol=1e-10)


def _halfnormal_model(y):
    scale = numpyro.sample("scale", dist.HalfNormal(2.0))
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(0.0, scale), obs=y[idx])


def test_jacobian_term_for_constrained_site():
    y = jnp.linspace(-1.0, 1.0, 10)
    pot = make_potential(_halfnormal_model, (y,))
    u = jnp.array([0.3])  # log scale
    scale = jnp.exp(u[0])
    expected = -(
        dist.HalfNormal(2.0).log_prob(scale) + u[0] + dist.Normal(0.0, scale).log_prob(y).sum()
    )
    np.testing.assert_allclose(pot.estimator.value(u, jnp.arange(10)), expected, rtol=1e-12)
    np.testing.assert_allclose(pot.constrain(u)["scale"], scale)


def test_constrain_round_trips():
    y = jnp.linspace(-1.0, 1.0, 10)
    pot = make_potential(_halfnormal_model, (y,))
    for value in (0.1, 1.0, 7.5):
        u = jnp.log(jnp.array([value]))
        np.testing.assert_allclose(pot.constrain(u)["scale"], value, rtol=1e-12)
        assert pot.unravel(u)["scale"].shape == ()


def test_control_variate_gradient_is_unbiased(logreg):
    pot, _, init_position = logreg
    anchor = find_map(jax.random.key(0), pot, init_position, num_steps=100).position
    cv = with_control_variate(pot, anchor)
    x = anchor + 0.3 * jax.random.normal(jax.random.key(10), (pot.dim,))
    batches = jnp.arange(pot.N).reshape(-1, pot.n)  # every datum once: the exact expectation
    grads = jax.vmap(lambda idx: cv.grad(x, idx))(batches)
    values = jax.vmap(lambda idx: cv.value(x, idx))(batches)
    full_value, full_grad = pot.full_value_and_grad(x)
    np.testing.assert_allclose(grads.mean(0), full_grad, atol=1e-9)
    np.testing.assert_allclose(values.mean(), full_value, rtol=1e-12)
    # and its noise is smaller than the plain estimator's near the anchor
    plain = jax.vmap(lambda idx: pot.grad(x, idx))(batches)
    assert float(grads.var(0).sum()) < 0.5 * float(plain.var(0).sum())
    # directional derivatives stay consistent with the gradient
    v = jnp.ones(pot.dim)
    total, _ = cv.directional(x, v, batches[0])
    np.testing.assert_allclose(total, cv.grad(x, batches[0]) @ v, atol=1e-9)


def test_subsample_size_overrides_model_plate():
    args, kwargs = linear_gaussian.load_data(N=50, D=2)
    assert make_potential(linear_gaussian.model, args, kwargs).estimator.n == 50
    assert (
        make_potential(linear_gaussian.model, args, dict(kwargs, subsample_size=5)).estimator.n == 5
    )
    assert (
        make_potential(
            linear_gaussian.model, args, dict(kwargs, subsample_size=5), subsample_size=10
        ).estimator.n
        == 10
    )
    pot = make_potential(linear_gaussian.model, args, kwargs, subsample_size=10).estimator
    assert with_batch_size(pot, 25).n == 25
    assert pot.sample_indices(jax.random.key(0)).shape == (10,)
    assert bool(jnp.all(pot.sample_indices(jax.random.key(0)) < 50))


def test_noise_variance_zero_for_full_batch(logreg):
    pot, _, _ = logreg
    full = with_batch_size(pot, pot.N)
    assert float(full.noise_variance(jnp.arange(float(pot.N)))) == 0.0
    per_example = jnp.arange(12.0)
    np.testing.assert_allclose(
        pot.noise_variance(per_example), pot.N**2 / 12 * np.var(np.arange(12.0), ddof=1)
    )


def test_find_map_matches_analytic_posterior_mode():
    args, kwargs = linear_gaussian.load_data(N=200, D=3, correlation=0.5)
    pot = make_potential(linear_gaussian.model, args, kwargs, subsample_size=20)
    mean, _ = linear_gaussian.posterior(*args, **kwargs)
    result = find_map(jax.random.key(1), pot.estimator, pot.init_position)
    np.testing.assert_allclose(result.position, mean, atol=1e-6)
    assert float(result.grad_norm) < 1e-6


def test_transforms_keep_chunk_size_and_coordinates(logreg):
    pot, (X, y), _ = logreg
    hand = logistic_regression.hand_written_terms(X, y)
    chunked = build_potential(
        hand, dim=pot.dim, N=pot.N, n=pot.n, init_position=jnp.zeros(pot.dim), chunk_size=7
    ).estimator
    resized = with_batch_size(chunked, 30)
    anchored = with_control_variate(resized, jnp.zeros(pot.dim))
    assert resized.chunk_size == anchored.chunk_size == with_batch_size(anchored, 5).chunk_size == 7
    x = jnp.arange(float(pot.dim))
    # the transforms keep the model's coordinates (estimators carry no coordinate maps now:
    # the transformed estimator is U at the same x)
    np.testing.assert_allclose(
        anchored.full_value_and_grad(x)[0], chunked.full_value_and_grad(x)[0], rtol=1e-10
    )


# ---------------------------- float32 at large N: differences of U, summed datum by datum
def _offset_gaussian(N: int, dtype) -> tuple:
    """U(x) = Σ_i [1 + ½(x − a_i)²/N] in 2-d: per-datum terms of order 1, as in a logistic
    regression, U ≈ N and a standard normal posterior in x (up to a shift)."""
    a = jnp.asarray(np.random.default_rng(0).normal(size=(N, 2)), dtype)
    terms = lambda x, idx: (
        jnp.zeros((), dtype),
        1.0 + 0.5 * jnp.sum((x - a[idx]) ** 2, axis=-1) / N,
    )
    pot = build_potential(terms, dim=2, N=N, n=N // 100, init_position=jnp.zeros(2, dtype))
    return pot, a.astype(jnp.float64).mean(0)


def test_full_value_difference_is_accurate_in_float32_where_u_is_not():
    """At N = 10⁶ in float32, U ≈ 10⁶ is rounded to its spacing (1/16) and the chunk sums add
    more: U(x) − U(x*) misses a rise of ½ t² by up to 1.1 (measured), while the difference
    summed datum by datum is within 5e-4."""
    potential, centre = _offset_gaussian(1_000_000, jnp.float32)
    pot = potential.estimator
    x = jnp.asarray(centre, jnp.float32)
    steps = (0.25, 0.5, 1.0, 2.0)
    exact = [0.5 * t**2 for t in steps]
    moved = [x + jnp.asarray([t, 0.0], jnp.float32) for t in steps]
    via_u = [float(pot.full_value_and_grad(m)[0] - pot.full_value_and_grad(x)[0]) for m in moved]
    via_diff = [float(pot.full_value_difference(m, x)) for m in moved]
    assert max(abs(u - e) for u, e in zip(via_u, exact, strict=True)) > 0.1
    np.testing.assert_allclose(via_diff, exact, atol=2e-3)


def test_full_value_difference_matches_the_difference_of_values(logreg):
    pot, _, _ = logreg  # float64, a global term (the prior) and chunks
    keys = jax.random.split(jax.random.key(4))
    x, y = (jax.random.normal(k, (pot.dim,)) for k in keys)
    expected = pot.full_value_and_grad(x)[0] - pot.full_value_and_grad(y)[0]
    np.testing.assert_allclose(pot.full_value_difference(x, y), expected, rtol=1e-12)
    transformed = with_control_variate(with_batch_size(pot, 6), y)
    np.testing.assert_allclose(transformed.full_value_difference(x, y), expected, rtol=1e-10)


def test_shape_probes_read_a_float32_gaussian_at_large_n_as_gaussian():
    """AutoSampler's quadratic-fit probes on the same float32 Gaussian at N = 10⁶: with U's
    own values they read a quadratic misfit of 0.63 (rounding noise; the selection's
    non-Gaussian limit is far below it), and at N = 10⁷ in float32 AutoSampler chose SGBD for a
    logistic regression.  Differences summed datum by datum read it as the Gaussian it is."""
    from pplsamplers.select.features import probe_features

    pot, _ = _offset_gaussian(1_000_000, jnp.float32)
    features = probe_features(jax.random.key(0), pot, pot.estimator)
    assert features["quadratic_misfit"] < 0.01
    assert abs(features["tail_growth"] - 1.0) < 0.01
    assert features["skewness"] < 0.01


def test_float32_data_with_x64_enabled_give_a_full_pass_at_any_position_dtype():
    """The suite runs with jax_enable_x64; float32 data then meet float64 positions (optax's
    and find_map's defaults) and float64 model constants.  The chunked pass's running total
    used to keep the global term's dtype and failed with a scan carry type error."""
    (X, y), _ = logistic_regression.load_data(N=300, d=3, seed=0)
    data = (jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32))
    pot = make_potential(logistic_regression.model, data, subsample_size=30, chunk_size=64)
    for dtype in (jnp.float32, jnp.float64):
        value, grad = pot.estimator.full_value_and_grad(jnp.full(pot.dim, 0.1, dtype))
        assert np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad)))
    result = find_map(jax.random.key(0), pot.estimator, pot.init_position)
    assert np.isfinite(float(result.potential))


def test_large_data_compiled_as_constants_get_one_warning_line(monkeypatch):
    """``import jax`` before ``import pplsamplers`` leaves JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS
    unset: then the data are embedded in every program, which the user must hear about once
    (the suite itself runs with the flag set, so it is simulated here)."""
    from pplsamplers.model import sharding

    monkeypatch.setattr(sharding, "constants_are_arguments", lambda: False)
    monkeypatch.setattr(sharding, "EMBEDDED_DATA_WARN_BYTES", 1000)
    (X, y), _ = logistic_regression.load_data(N=200, d=3, seed=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")  # what users have: one line per place in their code
        for _ in range(2):
            make_potential(logistic_regression.model, (X, y), subsample_size=20)
    lines = [str(w.message) for w in record if "compiled into every program" in str(w.message)]
    assert len(lines) == 1 and "JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1" in lines[0]
    monkeypatch.setattr(sharding, "constants_are_arguments", lambda: True)
    assert not sharding.warn_embedded_data((X, y))
