"""The shared-warmup pieces, in float64: whitening, MAP, curvature, batch size."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from pplsamplers.estimator import (
    Whitening,
    build_potential,
    check_whitening,
    full_hessian,
    whiten,
    with_batch_size,
    with_control_variate,
)
from pplsamplers.model import make_potential
from pplsamplers.warmup import find_map, posterior_scale, suggest_batch_size
from pplsamplers.warmup.mode import full_value_with_grad


def raw_design(N, seed=0):
    """Intercept, a covariate ~ N(100, 15²), a 0/1 covariate and their interaction."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(100.0, 15.0, N), rng.integers(0, 2, N).astype(float)
    return np.stack([np.ones(N), a, b, a * b], 1), rng


def linear_potential(N, n, seed=0, chunk_size=4096):
    """Flat-prior linear regression with unit noise: U = ½‖y − Xβ‖², mode = OLS, H = XᵀX."""
    X, rng = raw_design(N, seed)
    y = X @ np.array([1.0, 0.05, -2.0, 0.02]) + rng.normal(0.0, 1.0, N)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    terms = lambda x, idx: (jnp.zeros(()), 0.5 * (yj[idx] - Xj[idx] @ x) ** 2)
    pot = build_potential(terms, dim=4, N=N, n=n, init_position=jnp.zeros(4), chunk_size=chunk_size)
    return pot.estimator, X, y


@pytest.fixture(scope="module")
def small():
    pot, X, y = linear_potential(300, 30, seed=1, chunk_size=64)
    mode = np.linalg.solve(X.T @ X, X.T @ y)
    return pot, X, mode


def factors(X):
    cov = np.linalg.inv(X.T @ X)
    return {"dense": jnp.asarray(np.linalg.cholesky(cov)), "diag": jnp.sqrt(jnp.diag(cov))}


@pytest.mark.parametrize("kind", ["dense", "diag"])
def test_whitened_potential_is_the_affine_pullback(small, kind):
    pot, X, mode = small
    L = factors(X)[kind]
    Lm = L if L.ndim == 2 else jnp.diag(L)
    w = check_whitening(Whitening(jnp.asarray(mode), L), 4)
    white = whiten(pot, w)
    z = jax.random.normal(jax.random.key(0), (4,))
    v = jax.random.normal(jax.random.key(1), (4,))
    x = mode + Lm @ z
    idx = pot.sample_indices(jax.random.key(2))
    np.testing.assert_allclose(white.value(z, idx), pot.value(x, idx), rtol=1e-12)
    np.testing.assert_allclose(white.grad(z, idx), Lm.T @ pot.grad(x, idx), rtol=1e-9, atol=1e-9)
    total, per_example = white.directional(z, v, idx)
    np.testing.assert_allclose(total, white.grad(z, idx) @ v, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(per_example, pot.directional(x, Lm @ v, idx)[1], atol=1e-9)
    np.testing.assert_allclose(white.per_example_grads(z, idx) @ v, per_example, atol=1e-9)
    np.testing.assert_allclose(
        white.per_example_grads(z, idx), pot.per_example_grads(x, idx) @ Lm, atol=1e-9
    )
    full_z, full_x = white.full_value_and_grad(z), pot.full_value_and_grad(x)
    np.testing.assert_allclose(full_z[0], full_x[0], rtol=1e-12)
    np.testing.assert_allclose(full_z[1], Lm.T @ full_x[1], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(w.to_x(z), x, rtol=1e-12)
    np.testing.assert_allclose(w.to_z(x), z, rtol=1e-9, atol=1e-9)
    batch = jnp.stack([z, 2 * z, -z])  # draws, (num_draws, D), map as a batch
    np.testing.assert_allclose(w.to_z(w.to_x(batch)), batch, atol=1e-9)
    # the curvature pulls back as Lᵀ H L: the identity for the dense Laplace factor
    expected = np.eye(4) if kind == "dense" else Lm.T @ X.T @ X @ Lm
    np.testing.assert_allclose(full_hessian(white, jnp.zeros(4)), expected, atol=1e-8)


def test_composes_with_control_variate_batch_size_and_nesting(small):
    pot, X, mode = small
    L = factors(X)["dense"]
    w = check_whitening(Whitening(jnp.asarray(mode), L), 4)
    cv = with_control_variate(pot, mode)
    white = whiten(cv, w)
    assert white.cost_per_datum == 2 and white.chunk_size == 64
    assert white.control_variate
    np.testing.assert_allclose(w.to_z(jnp.asarray(mode)), np.zeros(4), atol=1e-9)  # the anchor in z
    z = jnp.array([0.3, -0.2, 1.0, 0.5])
    batches = jnp.arange(300).reshape(-1, 30)  # each datum once: the exact expectation
    grads = jax.vmap(lambda idx: white.grad(z, idx))(batches)
    np.testing.assert_allclose(grads.mean(0), white.full_value_and_grad(z)[1], atol=1e-8)
    resized = with_batch_size(white, 60)
    assert (resized.n, resized.chunk_size, resized.cost_per_datum) == (60, 64, 2)
    np.testing.assert_allclose(resized.value(z, batches[0]), white.value(z, batches[0]))
    # control variates after whitening: the same estimator
    after = with_control_variate(whiten(pot, w), jnp.zeros(4))
    np.testing.assert_allclose(after.grad(z, batches[1]), white.grad(z, batches[1]), atol=1e-8)
    # nested: x = m + L (c2 + 2 z)
    w2 = check_whitening(Whitening(jnp.ones(4), 2.0 * jnp.ones(4)), 4)
    nested = whiten(white, w2)
    np.testing.assert_allclose(w.to_x(w2.to_x(z)), w.to_x(1.0 + 2.0 * z), rtol=1e-12)
    np.testing.assert_allclose(
        nested.value(z, batches[0]), white.value(1.0 + 2.0 * z, batches[0]), rtol=1e-12
    )
    np.testing.assert_allclose(w2.to_z(w.to_z(w.to_x(w2.to_x(z)))), z, atol=1e-9)


def test_a_traced_factor_is_never_transposed_inside_a_loop():
    """The adapter whitens with the chain's own (traced) metric inside the kernels' loops.
    Written ``z @ L.T``, x = c + L z made XLA:CPU materialise a transposed copy of L at every
    evaluation (three copies in this loop; on a 304-d model more time than the pass over
    10⁴ data); as a product with L itself it has none (26e545c)."""
    dim = 7
    terms = lambda x, idx: (0.5 * jnp.sum(x**2), jnp.sum(x) * jnp.ones(idx.shape[0]))
    pot = build_potential(terms, dim=dim, N=50, n=50, init_position=jnp.zeros(dim)).estimator

    def loop(center, factor, z, v):
        white = whiten(pot, Whitening(center, factor))
        rows = jnp.arange(white.N)

        def body(i, carry):
            z, total = carry
            value, _ = white.directional(z, v, rows)
            return z + 1e-3 * white.grad(z, rows), total + value

        return jax.lax.fori_loop(0, 10, body, (z, jnp.zeros(())))

    ones = jnp.ones(dim)
    program = jax.jit(loop).lower(0 * ones, jnp.eye(dim), ones, ones).compile().as_text()
    transposed = re.findall(rf"f(?:32|64)\[{dim},{dim}\]\{{[01],[01]\}} transpose\(", program)
    assert transposed == [], transposed


def _scale_model(y):
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0))
    scale = numpyro.sample("scale", dist.HalfNormal(2.0))
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(loc, scale), obs=y[idx])


def test_unravel_constrain_round_trip_and_inits():
    y = jnp.linspace(-1.0, 3.0, 50)
    pot = make_potential(_scale_model, (y,), subsample_size=10)
    center, factor = jnp.array([1.0, 0.2]), jnp.array([[0.3, 0.0], [0.1, 0.2]])
    # the whitened potential is gone: the model's maps compose with the Whitening's to_x/to_z
    w = check_whitening(Whitening(center, factor), 2)
    z = jnp.array([0.5, -1.5])
    x = center + factor @ z
    for key in ("loc", "scale"):
        np.testing.assert_allclose(pot.unravel(w.to_x(z))[key], pot.unravel(x)[key], rtol=1e-12)
        np.testing.assert_allclose(pot.constrain(w.to_x(z))[key], pot.constrain(x)[key], rtol=1e-12)
    np.testing.assert_allclose(pot.constrain(w.to_x(z))["scale"], np.exp(x[1]), rtol=1e-12)
    np.testing.assert_allclose(w.to_z(pot.unconstrain(pot.constrain(w.to_x(z)))), z, atol=1e-10)
    # "laplace": start at the center (z = 0); "model": the model's own start, mapped to z
    np.testing.assert_allclose(w.to_x(jnp.zeros(2)), center)
    own = w.to_z(pot.init_position)
    np.testing.assert_allclose(w.to_x(own), pot.init_position, atol=1e-10)
    draw = w.to_z(pot.draw_init(jax.random.key(3)))
    np.testing.assert_allclose(w.to_x(draw), pot.draw_init(jax.random.key(3)), atol=1e-10)


def test_bad_preconditioner_names_the_argument(small):
    pot, _, mode = small
    mode = jnp.asarray(mode)
    with pytest.raises(ValueError, match="factor must be"):
        check_whitening(Whitening(mode, jnp.ones(3)), pot.dim)
    with pytest.raises(ValueError, match="center must"):
        check_whitening(Whitening(jnp.ones(3), jnp.ones(4)), pot.dim)
    with pytest.raises(ValueError, match="singular"):
        check_whitening(Whitening(mode, jnp.ones((4, 4))), pot.dim)


def test_find_map_raw_scale_linear_regression_matches_ols():
    pot, X, y = linear_potential(100_000, 1000)
    ols = np.linalg.solve(X.T @ X, X.T @ y)
    result = find_map(jax.random.key(0), pot, jnp.zeros(4))
    assert bool(result.converged)
    np.testing.assert_allclose(result.position, ols, rtol=1e-6)
    assert float(result.scaled_grad_norm) < 1e-6
    # counted in per-datum evaluations, whole passes here (no warm start)
    passes = float(result.num_evals) / pot.N
    assert passes == int(passes) and 1 < passes < 200


def test_find_map_warm_start_and_scale_converge():
    pot, X, y = linear_potential(2000, 100, seed=3)
    ols = np.linalg.solve(X.T @ X, X.T @ y)
    plain = find_map(jax.random.key(0), pot, jnp.zeros(4))
    warm = find_map(jax.random.key(1), pot, jnp.zeros(4), num_steps=200)
    assert bool(warm.converged)
    np.testing.assert_allclose(warm.position, ols, rtol=1e-6)
    assert float(warm.num_evals) > 200 * 100  # Adam's minibatches count
    exact_metric = factors(X)["dense"]
    scaled = find_map(jax.random.key(0), pot, jnp.zeros(4), scale=exact_metric)
    assert bool(scaled.converged) and float(scaled.num_evals) <= float(plain.num_evals)
    np.testing.assert_allclose(scaled.position, ols, rtol=1e-6)


def test_find_map_reports_non_convergence_and_compiles_once():
    pot, X, y = linear_potential(2000, 100, seed=2)
    stopped = find_map(jax.random.key(0), pot, jnp.zeros(4), polish_steps=2)
    assert not bool(stopped.converged) and float(stopped.scaled_grad_norm) > 1e-6
    assert int(stopped.num_iterations) == 2
    from pplsamplers.warmup import mode as map_module

    # the search is one jit keyed on (estimator, config): no new program for another start
    compiled = map_module._search._cache_size()
    again = find_map(jax.random.key(1), pot, jnp.ones(4), retry_at_origin=False, polish_steps=2)
    assert map_module._search._cache_size() == compiled
    assert not bool(again.converged)


def test_find_map_raw_logistic_regression_matches_newton():
    X, rng = raw_design(20_000, seed=4)
    eta = X @ np.array([-8.0, 0.08, 1.0, -0.01])
    yv = (rng.uniform(size=len(eta)) < 1 / (1 + np.exp(-eta))).astype(float)
    Xj, yj = jnp.asarray(X), jnp.asarray(yv)
    terms = lambda x, idx: (
        jnp.zeros(()),
        jnp.logaddexp(0.0, Xj[idx] @ x) - yj[idx] * (Xj[idx] @ x),
    )
    pot = build_potential(terms, dim=4, N=len(yv), n=200, init_position=jnp.zeros(4)).estimator
    beta = np.zeros(4)
    for _ in range(30):  # Newton / IRLS, the reference
        p = 1 / (1 + np.exp(-X @ beta))
        beta = beta + np.linalg.solve(X.T @ (X * (p * (1 - p))[:, None]), X.T @ (yv - p))
    result = find_map(jax.random.key(0), pot, jnp.zeros(4))
    assert bool(result.converged)
    np.testing.assert_allclose(result.position, beta, rtol=1e-6)


def test_find_map_retries_at_the_origin_where_a_saturated_start_stalls():
    """The ordinal robustness model (flat β and cutpoints, a covariate around 100): from the
    model's random start η ≈ ±200, NumPyro's ordered logistic computes log(σ(a) − σ(b)) =
    -inf a step away and L-BFGS stalls at U ≈ 4e5; from the unconstrained origin (β = 0,
    cutpoints (0, 1, 2)) it converges, and find_map keeps that end point."""
    from models import robust_ordinal

    args, kwargs = robust_ordinal.load_data(N=2000)
    potential = make_potential(robust_ordinal.model, args, kwargs)
    pot, start = with_batch_size(potential.estimator, 2000), potential.init_position
    stalled = find_map(jax.random.key(0), pot, start, retry_at_origin=False)  # no retry
    result = find_map(jax.random.key(0), pot, start)
    assert not bool(stalled.converged) and bool(result.converged)
    assert float(result.potential) < float(stalled.potential) - 1e4
    assert float(result.num_evals) > float(stalled.num_evals)  # both searches are counted
    # inside a trace there is no second search (count_modes vmaps find_map)
    traced = jax.jit(lambda key: find_map(key, pot, start).converged)(jax.random.key(0))
    assert not bool(traced)
    beta = potential.constrain(result.position)["beta"]
    assert abs(float(beta[0]) - robust_ordinal.BETA_TRUE[0]) < 0.02  # the slope on a ~ 100


def test_a_step_that_rounds_to_zero_is_a_stall_not_convergence():
    """A float32 Poisson regression on raw covariates (around 100, a 0/1 flag, their
    interaction): at NumPyro's random start U ≈ 3e21, the gradient overflows, and L-BFGS's
    step rounded to zero, which read as a Newton decrement of 0: "converged", so the
    search was not retried, the curvature there was NaN and every kernel failed.  It is a
    stall, and the search from the origin finds the mode."""

    def poisson(X, y):
        b = numpyro.sample("b", dist.ImproperUniform(dist.constraints.real, (), (4,)))
        with numpyro.plate("data", X.shape[0]):
            numpyro.sample("y", dist.Poisson(jnp.exp(X @ b)), obs=y)

    X, rng = raw_design(2000)
    y = rng.poisson(np.exp(X @ np.array([-1.0, 0.015, 0.3, 0.002]))).astype(float)
    p64 = make_potential(poisson, (X, y), {})
    exact = find_map(jax.random.key(0), p64.estimator, p64.init_position).position  # f64
    with jax.enable_x64(False):
        args = (jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32))
        potential = make_potential(poisson, args, {})
        pot, start = with_batch_size(potential.estimator, 2000), potential.init_position
        stalled = find_map(jax.random.key(0), pot, start, retry_at_origin=False)
        assert float(stalled.potential) > 1e20 and not bool(stalled.converged)
        result = find_map(jax.random.key(0), pot, start)
        assert bool(result.converged)
        np.testing.assert_allclose(result.position, exact, rtol=1e-3, atol=1e-4)
        assert np.all(np.isfinite(posterior_scale(pot, result.position)[0]))


def test_full_value_with_grad_is_one_pass_and_exact(small):
    pot, _, mode = small
    value, grad = jax.value_and_grad(full_value_with_grad(pot))(jnp.asarray(mode) + 0.1)
    expected = pot.full_value_and_grad(jnp.asarray(mode) + 0.1)
    np.testing.assert_allclose(value, expected[0], rtol=1e-12)
    np.testing.assert_allclose(grad, expected[1], rtol=1e-12)


@pytest.mark.parametrize("kind", ["dense", "diag"])
def test_posterior_scale_is_the_inverse_hessian(small, kind):
    pot, X, mode = small
    H = X.T @ X
    L, info = posterior_scale(pot, jnp.asarray(mode), kind)
    assert info["kind"] == kind and info["num_clipped"] == 0 and info["method"] == "hessian"
    if kind == "dense":
        np.testing.assert_allclose(L @ L.T, np.linalg.inv(H), rtol=1e-7)
        np.testing.assert_allclose(L, np.tril(L))
    else:
        np.testing.assert_allclose(L, 1 / np.sqrt(np.diag(H)), rtol=1e-10)
    assert info["num_evals"] == 4 * pot.N


def test_dense_is_the_hessian_above_the_automatic_dense_limit(small):
    """``precondition="dense"`` on a model above ``max_dense_dim`` (1000 latents by default)
    asks for the dense Hessian; the automatic method picked the Fisher diagonal there, and
    the call failed with "method='fisher' gives a diagonal only"."""
    pot, X, mode = small
    L, info = posterior_scale(pot, jnp.asarray(mode), "dense", max_dense_dim=2)
    assert (info["kind"], info["method"]) == ("dense", "hessian")
    np.testing.assert_allclose(L @ L.T, np.linalg.inv(X.T @ X), rtol=1e-7)
    _, info = posterior_scale(pot, jnp.asarray(mode), "auto", max_dense_dim=2)
    assert (info["kind"], info["method"]) == ("diag", "fisher")


def test_fisher_diagonal_estimates_the_hessian_diagonal():
    pot, X, y = linear_potential(20_000, 100, seed=5)
    mode = jnp.asarray(np.linalg.solve(X.T @ X, X.T @ y))
    L, info = posterior_scale(pot, mode, "diag", method="fisher")
    assert info["num_evals"] == pot.N
    np.testing.assert_allclose(L, 1 / np.sqrt(np.diag(X.T @ X)), rtol=0.05)  # unit noise
    with pytest.raises(ValueError, match="control_variate"):
        posterior_scale(with_control_variate(pot, mode), mode, "diag", method="fisher")


def test_posterior_scale_floors_indefinite_and_flat_curvature():
    A = np.diag([4.0, -1.0, 0.0])  # a saddle direction and a flat one
    Q = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))[0]
    H = jnp.asarray(Q @ A @ Q.T)
    terms = lambda x, idx: (0.5 * x @ H @ x, jnp.zeros(idx.shape))
    pot = build_potential(terms, dim=3, N=5, n=5, init_position=jnp.zeros(3)).estimator
    L, info = posterior_scale(pot, jnp.zeros(3), "dense", rel_floor=1e-6)
    assert (info["num_clipped"], info["num_negative"]) == (2, 1)
    cov = np.asarray(L @ L.T)
    np.testing.assert_allclose(
        np.linalg.eigvalsh(cov), np.sort([1 / 4.0, 1 / 1.0, 1 / (4e-6)]), rtol=1e-6
    )
    Ld, info_d = posterior_scale(pot, jnp.zeros(3), "diag")
    assert np.all(np.isfinite(Ld)) and np.all(Ld > 0)
    flat = build_potential(
        lambda x, idx: (0.0 * x[0], jnp.zeros(idx.shape)),
        dim=1,
        N=2,
        n=2,
        init_position=jnp.zeros(1),
    ).estimator
    with pytest.raises(ValueError, match="flat"):
        posterior_scale(flat, jnp.zeros(1))


def test_suggest_batch_size_monotone_in_N_and_full_for_tiny_N():
    sizes = []
    for N in (4_000, 32_000):
        pot, X, y = linear_potential(N, 10, seed=6)
        mode = jnp.asarray(np.linalg.solve(X.T @ X, X.T @ y))
        L = jnp.asarray(np.linalg.cholesky(np.linalg.inv(X.T @ X)))
        n, reason = suggest_batch_size(jax.random.key(0), pot, Whitening(mode, L), target=4.0)
        assert reason.startswith(f"n = {n} of N = {N}") and "plain" in reason
        sizes.append(n)
    assert 32 < sizes[0] < sizes[1] < 32_000
    # control variates: noise that does not grow with N, so a much smaller batch
    n_cv, reason = suggest_batch_size(
        jax.random.key(0), with_control_variate(pot, mode), Whitening(mode, L), target=0.3
    )
    assert n_cv < sizes[1] and "control-variate" in reason
    tiny, X, y = linear_potential(20, 5, seed=7)
    mode = jnp.asarray(np.linalg.solve(X.T @ X, X.T @ y))
    L = jnp.asarray(np.linalg.cholesky(np.linalg.inv(X.T @ X)))
    assert suggest_batch_size(jax.random.key(1), tiny, Whitening(mode, L))[0] == 20


@pytest.mark.parametrize("polish_converges", [True, False])
def test_mode_warning_reads_the_polished_mode(monkeypatch, polish_converges):
    """A search that stalls in the raw metric but whose polish in the Laplace metric meets
    the tolerance has found the mode: no warning (the hierarchical robustness model warned
    'did not converge' while its note said 'polished to 1.9e-08 sd').  If the polish fails
    too, the one warning line is still given."""
    import importlib
    import warnings

    from models import linear_gaussian
    from pplsamplers.warmup import SetupOptions

    # the module (pplsamplers.warmup.setup is also the name of the function setup)
    warmup = importlib.import_module("pplsamplers.warmup.setup")

    polishing = importlib.import_module("pplsamplers.warmup.mode")  # polish's find_map
    real = polishing.find_map
    calls = []

    def stalled_search(key, potential, *args, **kwargs):
        result = real(key, potential, *args, **kwargs)
        calls.append(kwargs.get("scale") is not None)
        return result if calls[-1] and polish_converges else result._replace(converged=False)

    monkeypatch.setattr(polishing, "find_map", stalled_search)  # the polish
    modes = importlib.import_module("pplsamplers.warmup.modes")
    monkeypatch.setattr(modes, "find_map", stalled_search)  # the search, from every start
    args, kwargs = linear_gaussian.load_data(N=1500, D=2, seed=11)  # fresh arrays: no cache
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        stage = warmup.mode_stage(SetupOptions(linear_gaussian.model), args, kwargs)
    warned = [r for r in records if "mode search did not converge" in str(r.message)]
    # the search from the model's start and MODE_STARTS more (N ≤ MODE_PROBE_DATA: on all
    # data, no second search), then the polish (the mode probe's fits follow, in its scale)
    assert calls[: 2 + modes.MODE_STARTS] == [False] * (1 + modes.MODE_STARTS) + [True]
    assert stage.notes["mode"].startswith("NOT converged")
    if polish_converges:
        assert not warned and stage.notes["mode"].endswith("(converged)")
    else:
        assert len(warned) == 1 and stage.notes["mode"].endswith("(NOT converged)")
