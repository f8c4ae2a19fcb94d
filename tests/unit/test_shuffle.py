"""Minibatches as contiguous blocks of rows shuffled once (issue 15, the per-proposal cost)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from models import logistic_regression
from pplsamplers import SBPS
from pplsamplers.estimator import build_estimator, with_contiguous_blocks
from pplsamplers.model import _agreement, _numpyro, inspect, make_potential
from pplsamplers.model.shuffle import shuffled_view


def test_contiguous_blocks_are_unbiased_whatever_the_order():
    """Every row is in exactly n of the N wrapped blocks, so the block estimate averaged over
    the N starts is the full potential exactly, even for sorted data."""
    N, n = 13, 5
    data = jnp.sort(jax.random.normal(jax.random.key(0), (N,))) * 3.0  # sorted: worst order
    terms = lambda x, idx: (0.5 * x @ x, 0.5 * (x[0] - data[idx]) ** 2)
    pot = build_estimator(terms, dim=1, N=N, n=n, contiguous=True)
    x = jnp.array([0.7])
    starts = [(s + jnp.arange(n)) % N for s in range(N)]
    average = np.mean([float(pot.value(x, idx)) for idx in starts])
    np.testing.assert_allclose(average, float(pot.full_value_and_grad(x)[0]), rtol=1e-12)
    for key in jax.random.split(jax.random.key(1), 20):  # what sample_indices draws
        idx = np.asarray(pot.sample_indices(key))
        assert idx.shape == (n,) and np.all(np.diff(idx) % N == 1)
    assert with_contiguous_blocks(pot._replace(contiguous=False)).contiguous


def test_shuffled_view_moves_rows_together_and_keeps_the_potential():
    (X, y), kwargs = logistic_regression.load_data(N=500, d=3, seed=0)
    view = inspect(logistic_regression.model, (X, y), kwargs)
    shuffled, note = shuffled_view(view, jax.random.key(0))
    assert shuffled is not None and "2 arguments with N = 500 rows shuffled" in note
    Xs, ys = shuffled.model_args
    assert not np.array_equal(Xs, X)
    pairs = lambda A, b: {tuple(row) for row in np.column_stack([np.asarray(A), np.asarray(b)])}
    rows, moved = pairs(X, y), pairs(Xs, ys)
    assert rows == moved  # every (x_i, y_i) pair kept together
    x = jax.random.normal(jax.random.key(2), (3,))
    u, g = make_potential(view, subsample_size=50).estimator.full_value_and_grad(x)
    u_s, g_s = make_potential(shuffled, subsample_size=50).estimator.full_value_and_grad(x)
    np.testing.assert_allclose(u_s, u, rtol=1e-10)
    np.testing.assert_allclose(g_s, g, rtol=1e-9, atol=1e-9)


def trend_model(t, y):
    """``t`` has N entries but is read in order in a global term: not per-datum."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0))
    numpyro.factor("trend", -0.5 * jnp.sum(jnp.arange(t.shape[0]) * t) * w**2 / t.shape[0])
    with numpyro.plate("data", y.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Normal(w, 1.0), obs=y[idx])


def test_an_argument_with_n_rows_that_is_not_per_datum_keeps_random_rows():
    t = jnp.linspace(0.0, 1.0, 200)
    y = jnp.ones(200)
    shuffled, note = shuffled_view(inspect(trend_model, (t, y), {}), jax.random.key(0))
    assert shuffled is None and "not per-datum" in note
    kernel = SBPS(trend_model, subsample_size=20)
    kernel.init(jax.random.key(1), 10, None, (t, y), {})
    assert not kernel.estimator.contiguous
    assert kernel.setup.notes["minibatch_rows"].startswith("random rows")


def test_the_shared_warmup_shuffles_once_and_draws_blocks():
    (X, y), kwargs = logistic_regression.load_data(N=2000, d=3, seed=1)
    kernel = SBPS(logistic_regression.model, subsample_size=100)
    kernel.init(jax.random.key(0), 10, None, (X, y), kwargs)
    assert kernel.estimator.contiguous
    assert "shuffled once" in kernel.setup.notes["minibatch_rows"]
    assert kernel.setup.potential.estimator.contiguous  # the full-batch base: same rows


def raw_poisson(X, y):
    """A plain plate (``obs=y``) on raw covariates with a flat prior, as users write it."""
    b = numpyro.sample("b", dist.ImproperUniform(dist.constraints.real, (), (X.shape[1],)))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(X @ b)), obs=y)


def test_float32_raw_covariates_whose_random_starts_overflow_are_sliced_and_shuffled():
    """In float32 exp(X b) overflows at NumPyro's random starts (b ~ U(-2, 2), a covariate
    near 60), so the per-datum terms that the row-slicing and shuffle checks compare were
    infinite there: a plain plate was refused ("site 'y' in plate 'data' has 400 values where
    the plate gave 3 indices") and the rows were not shuffled.  The checks now also look at
    the start shrunk towards the unconstrained origin, and only where the full model's terms
    are finite."""
    rng = np.random.default_rng(0)
    X = np.stack([np.ones(400), rng.normal(60, 12, 400), rng.integers(0, 2, 400)], 1)
    y = rng.poisson(np.exp(X @ np.array([0.5, 0.02, -0.4]))).astype(float)
    with jax.enable_x64(False):
        args = (jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32))
        view = inspect(raw_poisson, args, {})
        assert view.info.slice_rows
        start = _numpyro.initial_values(
            jax.random.PRNGKey(0), raw_poisson, args, {}, view.info, view.init_strategy
        )
        potential = make_potential(view)
        assert not np.isfinite(float(potential.estimator.full_value_and_grad(start["b"])[0]))
        shuffled, note = shuffled_view(view, jax.random.key(0))
        assert shuffled is not None and "2 arguments with N = 400 rows shuffled" in note
        kernel = SBPS(raw_poisson, subsample_size=40)
        kernel.init(jax.random.key(1), 10, None, args, {})
        assert kernel.estimator.contiguous


def trend_model_with_overflow(t, y):
    """``trend_model`` whose terms overflow at random starts (|w| > 0.27), and whose
    global term, which reads ``t`` in order, vanishes at the origin (w = 0)."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0))
    numpyro.factor("trend", -0.5 * jnp.sum(jnp.arange(t.shape[0]) * t) * w**2 / t.shape[0])
    with numpyro.plate("data", y.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Normal(w, 1.0), obs=y[idx])
        numpyro.factor("spike", -jnp.exp(1e4 * w**2) + 0.0 * y[idx])


def test_the_checks_still_refuse_where_the_random_starts_overflow():
    """Where only the origin had finite terms the check could not see that ``t`` is not
    per-datum; the start shrunk 10 and 100 times towards it has finite terms and shows it."""
    t = jnp.linspace(0.0, 1.0, 200)
    view = inspect(trend_model_with_overflow, (t, jnp.zeros(200)), {})
    points = _agreement.check_points(
        jax.random.split(jax.random.key(0), 2), view.model, view.model_args, {}, view.info,
        view.init_strategy,
    )  # fmt: skip
    estimator = make_potential(view).estimator
    values = [float(estimator.full_value_and_grad(p["w"][None])[0]) for p in points]
    assert np.isfinite(values).tolist() == [False, False, True, True, True], values
    shuffled, note = shuffled_view(view, jax.random.key(0))
    assert shuffled is None and "not per-datum" in note


def test_bad_data_are_named_in_the_users_row_order_before_any_shuffle(monkeypatch):
    """The shared warmup validates the user's arrays, then shuffles: an error names the row
    the user sees (1234), never its position in the kernel's shuffled copy, and the shuffle
    never runs on data that fail the check."""
    import importlib

    # the module (pplsamplers.warmup.setup is also the name of the function setup)
    warmup = importlib.import_module("pplsamplers.warmup.setup")

    calls = []
    monkeypatch.setattr(
        warmup, "shuffled_view", lambda *a: calls.append("shuffled") or shuffled_view(*a)
    )
    (X, y), kwargs = logistic_regression.load_data(N=2000, d=3, seed=2)
    X = jnp.asarray(X).at[1234, 1].set(jnp.nan)
    with pytest.raises(ValueError, match=r"row 1234"):
        SBPS(logistic_regression.model, subsample_size=100).init(
            jax.random.key(0), 10, None, (X, y), kwargs
        )
    assert calls == []
