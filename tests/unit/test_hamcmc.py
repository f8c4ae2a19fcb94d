"""Deterministic invariants of HAMCMC (kernels/hamcmc.py, kernels/lbfgs.py) and SGRLD.

Dense D×D matrices are built here only, as references; the kernels never form one.
"""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

from models import linear_gaussian
from pplsamplers.estimator import Whitening, build_estimator, with_clipped_gradient
from pplsamplers.infer import HAMCMC, SGRLD
from pplsamplers.kernels.sgmcmc import hamcmc, lbfgs, sgrld
from pplsamplers.kernels.sgmcmc.hamcmc import HAMCMCOptions
from pplsamplers.kernels.sgmcmc.sgrld import SGRLDOptions
from pplsamplers.kernels.sgmcmc.sgrld import declare as sgrld_spec
from pplsamplers.kernels.sgmcmc.step_size import STEP_SIZE_STEPS_PER_SAMPLE, step_size_at
from pplsamplers.kernels.spec import WarmupContext

# ----------------------------------------------------------------------------- references


def dense_lbfgs(s, y, valid, gamma):
    """Eq. (6): H ← (I − ρ s yᵀ) H (I − ρ y sᵀ) + ρ s sᵀ from H⁰ = γI, oldest pair first."""
    dim = s.shape[1]
    H = gamma * np.eye(dim)
    for s_k, y_k, ok in zip(np.asarray(s), np.asarray(y), np.asarray(valid), strict=True):
        if ok:
            rho = 1.0 / (s_k @ y_k)
            V = np.eye(dim) - rho * np.outer(y_k, s_k)
            H = V.T @ H @ V + rho * np.outer(s_k, s_k)
    return H


def columns(apply, dim):
    """The matrix of a linear map given as a function of a vector."""
    return np.asarray(jax.jit(jax.vmap(apply, out_axes=1))(jnp.eye(dim)))


def random_pairs(rng, dim, num_pairs, noise=0.0):
    """Secant pairs of a random SPD Hessian P, y = P s (+ noise), and P itself."""
    A = rng.standard_normal((dim, dim))
    P = A @ A.T + 0.5 * np.eye(dim)
    s = rng.standard_normal((num_pairs, dim))
    y = s @ P.T + noise * rng.standard_normal((num_pairs, dim))
    return jnp.asarray(s), jnp.asarray(y), P


# ------------------------------------------------------------ L-BFGS products (eqs. 6, 11)


@pytest.mark.parametrize("dim, num_pairs", [(2, 1), (5, 3), (10, 4)])
def test_sqrt_factor_squares_to_dense_lbfgs(dim, num_pairs):
    rng = np.random.default_rng(dim)
    s, y, _ = random_pairs(rng, dim, num_pairs)
    valid = jnp.ones(num_pairs, bool).at[num_pairs // 2].set(num_pairs == 1)  # one skipped
    gamma = 0.3
    H = dense_lbfgs(s, y, valid, gamma)
    factors = lbfgs.sqrt_factors(s, y, valid, gamma)
    S = columns(lambda z: lbfgs.sqrt_product(factors, gamma, z), dim)
    np.testing.assert_allclose(S @ S.T, H, rtol=1e-8, atol=1e-8 * np.abs(H).max())
    # the C recursion of eq. (11) factors B = H⁻¹ the same way
    C_times = lambda x: _apply_c(factors, gamma, x)
    C = columns(C_times, dim)
    np.testing.assert_allclose(C @ C.T, np.linalg.inv(H), rtol=1e-7, atol=1e-9)


def _apply_c(factors, gamma, x):
    x = x / jnp.sqrt(gamma)
    for u_k, v_k in zip(factors.u, factors.v, strict=True):
        x = x - u_k * jnp.dot(v_k, x)
    return x


@pytest.mark.parametrize("dim, num_pairs", [(3, 2), (10, 5)])
def test_two_loop_equals_dense_lbfgs_times_g(dim, num_pairs):
    rng = np.random.default_rng(10 + dim)
    s, y, _ = random_pairs(rng, dim, num_pairs)
    valid = jnp.ones(num_pairs, bool).at[0].set(False)
    gamma = 2.0
    g = jnp.asarray(rng.standard_normal(dim))
    H = dense_lbfgs(s, y, valid, gamma)
    np.testing.assert_allclose(
        lbfgs.inverse_hessian_product(s, y, valid, gamma, g), H @ np.asarray(g), rtol=1e-10
    )


def test_eq11_as_printed_is_not_a_square_root():
    """Documents the erratum fixed in lbfgs.py: the printed q = √(sᵀy/sᵀBy) Bs − y fails."""
    rng = np.random.default_rng(3)
    s, y, _ = random_pairs(rng, 4, 2)
    s, y = np.asarray(s), np.asarray(y)
    S, C = np.eye(4), np.eye(4)  # γ = 1
    for s_k, y_k in zip(s, y, strict=True):
        B = C @ C.T
        q = np.sqrt((s_k @ y_k) / (s_k @ B @ y_k)) * B @ s_k - y_k
        u = np.sqrt((s_k @ B @ s_k) / (s_k @ y_k)) * y_k + B @ s_k
        S = (np.eye(4) - np.outer(s_k / (s_k @ y_k), q)) @ S
        C = (np.eye(4) - np.outer(u, s_k / (s_k @ B @ s_k))) @ C
    H = dense_lbfgs(s, y, np.ones(2, bool), 1.0)
    assert np.abs(S @ S.T - H).max() > 1e-2
    np.testing.assert_allclose(C @ C.T, np.linalg.inv(H), rtol=1e-8)  # the C half is right


def test_inverse_hessian_positive_definite_under_noisy_pairs_once_damped():
    rng = np.random.default_rng(7)
    dim, num_pairs = 6, 5
    s, y_noisy, _ = random_pairs(rng, dim, num_pairs, noise=30.0)
    raw = np.asarray(lbfgs.curvature(s, y_noisy))
    assert (raw <= 0).any(), "the noise must create non-positive curvature pairs"
    everything = jnp.ones(num_pairs, bool)
    # undamped and not skipped, BFGS is indefinite ...
    assert np.linalg.eigvalsh(dense_lbfgs(s, y_noisy, everything, 1.0)).min() < 0
    # ... skipping the pairs with sᵀy ≤ 0 (what the kernel does) keeps H positive definite ...
    kept = jnp.asarray(raw > 0)
    assert np.linalg.eigvalsh(dense_lbfgs(s, y_noisy, kept, 1.0)).min() > 0
    # ... and λ above max(−sᵀŷ/sᵀs) makes every pair usable and H positive definite.
    threshold = np.max(-raw / np.sum(np.asarray(s) ** 2, axis=1))
    for damping in (1.01 * threshold, 10 * threshold):
        y = y_noisy + damping * s
        assert np.all(np.asarray(lbfgs.curvature(s, y)) > 0)
        H = dense_lbfgs(s, y, everything, 1.0)
        assert np.linalg.eigvalsh(H).min() > 0
        S = columns(
            lambda z, y=y: lbfgs.sqrt_product(lbfgs.sqrt_factors(s, y, everything, 1.0), 1.0, z),
            dim,
        )
        np.testing.assert_allclose(S @ S.T, H, rtol=1e-8, atol=1e-8 * np.abs(H).max())


# ------------------------------------------------------------------------ the kernel


def logistic_potential(dim=4, N=8, seed=0):
    """Full-batch logistic regression: non-quadratic, so pairs depend on where they are."""
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.standard_normal((N, dim)))
    labels = jnp.asarray(rng.integers(0, 2, N) * 2.0 - 1.0)
    terms = lambda x, idx: (0.5 * x @ x, jnp.logaddexp(0.0, -labels[idx] * (X[idx] @ x)))
    return build_estimator(terms, dim=dim, N=N, n=N)


def make_step(potential, step_size, memory_size=2, **tunables):
    """``step(key, state)`` with fixed tunables, and ``start(x)`` its initial state."""
    params = hamcmc.HAMCMCParams(step_size, **tunables)
    kernel = hamcmc.build_kernel(memory_size)
    step = lambda key, state: kernel(key, state, potential, params)
    start = lambda x: hamcmc.init(jax.random.key(0), x, potential, params, memory_size=memory_size)
    return step, start


def run_chain(step, state, num_steps, seed=0):
    keys = jax.random.split(jax.random.key(seed), num_steps)
    states, infos = [state], []
    jitted = jax.jit(step)
    for key in keys:
        state, info = jitted(key, state)
        states.append(state)
        infos.append(info)
    return states, infos, keys, jitted


def test_pairs_exclude_theta_t_minus_M():
    """H_t is built from pairs τ = t−M+1..t−1 only, so moving θ_{t−M} leaves it unchanged."""
    M, damping, gamma, eps = 3, 0.5, 0.2, 0.3
    potential = logistic_potential()
    step, start = make_step(potential, eps, M, damping=damping, initial_scale=gamma)
    states, _, keys, step = run_chain(step, start(jnp.full(4, 0.5)), 12)
    theta = [np.asarray(s.position) for s in states]  # theta[τ] = θ_τ
    jit_grad = jax.jit(potential.grad)
    grad = lambda x: np.asarray(jit_grad(jnp.asarray(x), jnp.arange(potential.N)))

    def pairs_from_trajectory(trajectory, t):
        taus = range(t - M + 1, t)
        s = np.stack([trajectory[tau] - trajectory[tau - M] for tau in taus])
        y = np.stack(
            [
                grad(trajectory[tau]) - grad(trajectory[tau - M]) + damping * s_k
                for tau, s_k in zip(taus, s, strict=True)
            ]
        )
        return s, y

    for t in (2 * M + 1, 2 * M + 2, 11):
        before = states[t - 1]
        np.testing.assert_array_equal(
            hamcmc.chronological(before.pair_time, t), np.arange(t - M + 1, t)
        )
        s_kernel = hamcmc.chronological(before.s_memory, t)
        y_kernel = hamcmc.chronological(before.y_memory, t)
        s_ref, y_ref = pairs_from_trajectory(theta, t)
        np.testing.assert_allclose(s_kernel, s_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(y_kernel, y_ref, rtol=1e-10, atol=1e-12)
        H = dense_lbfgs(s_ref, y_ref, np.ones(M - 1, bool), gamma)

        def H_after_perturbing(tau, t=t):
            trajectory = list(theta)
            trajectory[tau] = trajectory[tau] + 0.3
            return dense_lbfgs(*pairs_from_trajectory(trajectory, t), np.ones(M - 1, bool), gamma)

        np.testing.assert_array_equal(H_after_perturbing(t - M), H)
        assert np.abs(H_after_perturbing(t - 1) - H).max() > 1e-4  # controls: these do count
        assert np.abs(H_after_perturbing(t - 2 * M + 1) - H).max() > 1e-4

        # the step itself: moving θ_{t−M} by δ moves θ_t by δ − εH(∇U(θ_{t−M}+δ) − ∇U(θ_{t−M}))
        delta = np.array([0.2, -0.1, 0.05, 0.3])
        slot = t % M
        back = theta[t - M]
        # full data: the state carries ∇U at each stored θ, which a consistent move updates
        moved = before._replace(
            history=before.history.at[slot].add(delta),
            history_gradients=before.history_gradients.at[slot].set(grad(back + delta)),
        )
        base_next, _ = step(keys[t - 1], before)
        moved_next, _ = step(keys[t - 1], moved)
        np.testing.assert_allclose(base_next.position, states[t].position, rtol=1e-12)
        expected = delta - eps * H @ (grad(back + delta) - grad(back))
        np.testing.assert_allclose(
            moved_next.position - base_next.position, expected, rtol=1e-9, atol=1e-12
        )


def test_first_2M_states_are_sgld_and_step_costs_two_gradients():
    M, gamma, eps = 3, 0.5, 0.1
    full = logistic_potential(N=20, seed=1)
    potential = build_estimator(full.terms, dim=4, N=20, n=5)
    step, start = make_step(potential, eps, M, initial_scale=gamma)
    states, infos, keys, _ = run_chain(step, start(jnp.zeros(4)), 2 * M + 2)
    grad, sample_indices = jax.jit(potential.grad), jax.jit(potential.sample_indices)
    for t in range(1, 2 * M + 1):
        batch_key, noise_key = jax.random.split(keys[t - 1])
        idx = sample_indices(batch_key)
        back = states[max(t - M, 0)].position
        z = jax.random.normal(noise_key, (4,), back.dtype)
        sgld = back - gamma * eps * grad(back, idx) + jnp.sqrt(2 * gamma * eps) * z
        np.testing.assert_allclose(states[t].position, sgld, rtol=1e-12)
        assert bool(infos[t - 1].sgld_start)
    assert not bool(infos[2 * M].sgld_start)
    assert all(int(info.data_evals) == 2 * 5 for info in infos)


def test_nonpositive_curvature_pairs_are_skipped_and_counted():
    # double well U = Σ (x² − 1)²: curvature 12x² − 4 < 0 near 0, so undamped pairs fail.
    terms = lambda x, idx: (jnp.sum((x**2 - 1.0) ** 2), jnp.zeros(idx.shape[0]))
    potential = build_estimator(terms, dim=3, N=1, n=1)

    @jax.jit
    def run(damping):
        step, start = make_step(potential, 0.05, 2, damping=damping, initial_scale=0.2)

        def body(state, key):
            state, info = step(key, state)
            return state, info.skipped_pairs

        return jax.lax.scan(body, start(jnp.zeros(3)), jax.random.split(jax.random.key(4), 300))

    state, skipped = run(0.0)
    assert int(state.num_skipped_pairs) > 0
    assert int(state.num_skipped_pairs) == int(skipped.sum())
    state, skipped = run(10.0)  # λ = 10 > max negative curvature 4
    assert int(state.num_skipped_pairs) == 0 and int(skipped.sum()) == 0


def test_misaligned_pairs_are_skipped_only_under_the_clip_and_the_guard_measures_from_the_moved_point():
    """On an ill-conditioned quadratic y = A s points far from s; with exact gradients every
    such pair is kept (it is a secant: these are the pairs HAMCMC learns from), and under a
    gradient clip the pairs whose y is more than 60° from s are skipped
    (``lbfgs.MIN_PAIR_COSINE``) even where sᵀy > 0.  ``moved_point`` is θ_{t−M}, the state
    the next step moves (the adapter's divergence guard measures a step's length from it)."""
    scales = jnp.array([1.0, 400.0])  # U = ½ Σ a_i x_i²
    terms = lambda x, idx: (0.5 * jnp.sum(scales * x**2), jnp.zeros(idx.shape[0]))
    potential = build_estimator(terms, dim=2, N=1, n=1)

    def run(estimator):
        step, start = make_step(estimator, 1e-3, 2, damping=0.0, initial_scale=1.0)

        def body(state, key):
            state, info = step(key, state)
            cosine = info.curvature / (
                jnp.linalg.norm(state.s_memory[0]) * jnp.linalg.norm(state.y_memory[0])
            )
            return state, (info.skipped_pairs, info.curvature, cosine)

        keys = jax.random.split(jax.random.key(0), 200)
        return jax.jit(lambda: jax.lax.scan(body, start(jnp.ones(2)), keys))()

    state, (skipped, curvature, cosine) = run(potential)
    assert bool(jnp.all(curvature[4:] > 0))
    assert float(jnp.min(cosine[4:])) < lbfgs.MIN_PAIR_COSINE  # misaligned secants exist
    assert int(skipped.sum()) == int(state.num_skipped_pairs) == 0  # and are all kept

    state, (skipped, curvature, cosine) = run(with_clipped_gradient(potential, 1.0))
    misaligned = (curvature > 0) & (cosine < lbfgs.MIN_PAIR_COSINE)
    assert int(misaligned[4:].sum()) > 0
    np.testing.assert_array_equal(skipped[4:] == 1, (curvature[4:] <= 0) | misaligned[4:])
    assert int(skipped.sum()) == int(state.num_skipped_pairs)

    M = 3
    step, start = make_step(logistic_potential(), 0.3, M)
    states, _, _, _ = run_chain(step, start(jnp.full(4, 0.5)), 12)
    for t in (2 * M + 1, 9, 11):
        np.testing.assert_array_equal(hamcmc.moved_point(states[t - 1]), states[t - M].position)
        assert not np.allclose(hamcmc.moved_point(states[t - 1]), states[t - 1].position)


def test_step_size_schedule_is_constant_within_blocks_of_M():
    t = jnp.arange(1, 13)
    eps = np.asarray(step_size_at(t, 1e-3, 3, "polynomial"))
    blocks = eps.reshape(4, 3)
    np.testing.assert_array_equal(blocks, blocks[:, :1].repeat(3, 1))
    np.testing.assert_allclose(blocks[:, 0], (1e-3 / np.array([3, 6, 9, 12])) ** 0.51)
    assert float(step_size_at(jnp.asarray(7), 0.2, 3, "constant")) == 0.2


def test_no_dense_matrix_in_the_step_and_state_is_O_MD():
    dim, M = 7, 3
    potential = build_estimator(
        lambda x, idx: (0.5 * x @ x, jnp.sin(x[idx] * x[idx + 2])),
        dim=dim,
        N=5,
        n=5,
    )
    step, start = make_step(potential, 0.1, M)
    state = start(jnp.zeros(dim))
    assert max(leaf.size for leaf in jax.tree.leaves(state)) <= M * dim
    shapes = set()

    def collect(jaxpr):
        for eqn in jaxpr.eqns:
            shapes.update(tuple(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, "shape"))
            for param in eqn.params.values():
                for sub in param if isinstance(param, tuple | list) else (param,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        collect(inner)

    collect(jax.make_jaxpr(step)(jax.random.key(0), state).jaxpr)
    assert (dim,) in shapes and (M - 1, dim) in shapes  # the walk does see the step
    assert not any(shape.count(dim) >= 2 for shape in shapes), sorted(shapes)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(memory_size=1), "memory_size"),
        (dict(memory_size=2.0), "memory_size"),
        (dict(step_size=0.0), "step_size"),
        (dict(step_size=-1e-3), "step_size"),
        (dict(damping=-0.1), "damping"),
        (dict(initial_scale=0.0), "initial_scale"),
        (dict(schedule="cosine"), "schedule"),
        (dict(sgld_step_size=0.0), "sgld_step_size"),
    ],
)
def test_invalid_arguments_name_the_argument(kwargs, name):
    config = dict(step_size=1e-3, memory_size=2, damping=1.0, initial_scale=1.0) | kwargs
    with pytest.raises(ValueError, match=name):
        HAMCMCOptions(**config)
    with pytest.raises(ValueError, match=name):
        HAMCMC(linear_gaussian.model, **config)


# ------------------------------------------------------------------------ SGRLD baseline


def test_sgrld_step_is_preconditioned_langevin():
    rng = np.random.default_rng(5)
    G = rng.standard_normal((3, 3))
    G = G @ G.T + np.eye(3)
    potential = logistic_potential(dim=3)
    x = jnp.asarray(rng.standard_normal(3))
    key = jax.random.key(9)
    params = sgrld.make_params(0.2, jnp.asarray(G))
    start = sgrld.init(key, x, potential, params)
    new, info = sgrld.build_kernel()(key, start, potential, params)
    again, _ = sgrld.build_kernel(factorize_each_step=True)(key, start, potential, params)
    _, noise_key = jax.random.split(key)
    xi = np.asarray(jax.random.normal(noise_key, (3,), x.dtype))
    L = np.linalg.cholesky(G)
    grad = np.asarray(potential.grad(x, jnp.arange(potential.N)))
    expected = x - 0.2 * np.linalg.solve(G, grad) + np.sqrt(0.4) * np.linalg.solve(L.T, xi)
    np.testing.assert_allclose(new.position, expected, rtol=1e-10)
    np.testing.assert_allclose(again.position, expected, rtol=1e-10)
    assert int(info.data_evals) == potential.n
    for bad in (np.ones((2, 2)), np.triu(G), -G, np.ones(3)):
        with pytest.raises(ValueError, match="metric"):
            SGRLDOptions(0.2, jnp.asarray(bad))
    zero = jnp.zeros(3)
    context = WarmupContext(zero, None, None, Whitening(zero, jnp.ones(3)), whitened=False)
    with pytest.raises(ValueError, match="metric"):  # the model's dimension, once known
        sgrld_spec(SGRLDOptions(0.2, 2 * np.eye(2))).default_params(key, potential, context)


# --------------------------------------------------------------------------- adapter


def test_adapter_exports_diagnostics_to_arviz():
    (A, x), kwargs = linear_gaussian.load_data(N=100, D=2, correlation=0.5, seed=0)
    kernel = HAMCMC(
        linear_gaussian.model, step_size=0.1, initial_scale=0.01, memory_size=2, subsample_size=10
    )
    mcmc = MCMC(kernel, num_warmup=20, num_samples=30, progress_bar=False)
    mcmc.run(jax.random.key(0), A, x, **kwargs)
    stats = az.from_numpyro(mcmc).sample_stats
    for field in ("data_evals", "skipped_pairs", "step_size"):
        assert field in stats, field
    # two minibatch gradients per step (each datum costs twice with a control variate)
    steps = STEP_SIZE_STEPS_PER_SAMPLE * 2  # every step of a draw counts: ten per sub-chain
    assert int(stats["data_evals"].min()) == 2 * 10 * kernel.estimator.cost_per_datum * steps
    assert np.allclose(stats["step_size"], 0.1)
    assert "skipped pairs" in kernel.get_diagnostics_str(mcmc.last_state)
    assert mcmc.get_samples()["theta"].shape == (30, 2)


def test_sgrld_adapter_runs_with_the_posterior_precision_as_metric():
    (A, x), kwargs = linear_gaussian.load_data(N=100, D=2, correlation=0.5, seed=0)
    _, cov = linear_gaussian.posterior(A, x, **kwargs)
    kernel = SGRLD(
        linear_gaussian.model,
        step_size=0.05,
        metric=jnp.linalg.inv(cov),
        subsample_size=10,
        control_variate=False,  # data_evals below counts plain minibatches
    )
    mcmc = MCMC(kernel, num_warmup=10, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(1), A, x, **kwargs)
    stats = az.from_numpyro(mcmc).sample_stats
    assert int(stats["data_evals"].min()) == 10 * STEP_SIZE_STEPS_PER_SAMPLE and np.allclose(
        stats["step_size"], 0.05
    )
    assert np.all(np.isfinite(mcmc.get_samples()["theta"]))
    with pytest.raises(ValueError, match="metric"):
        SGRLD(linear_gaussian.model, step_size=0.05, metric=-jnp.eye(2)).init(
            jax.random.key(0), 0, None, (A, x), kwargs
        )


def test_full_data_steps_reuse_the_gradient_of_the_state_they_move():
    """With n = N a step reads the data once: ∇U(θ_{t−M}) comes from the step that made
    θ_{t−M} (or from ``init``), and the chain is the one that recomputes it every step."""
    M = 3
    potential = logistic_potential()
    step, start = make_step(potential, 0.3, M, damping=0.5, initial_scale=0.2)
    states, infos, _, _ = run_chain(step, start(jnp.full(4, 0.5)), 12)
    assert all(int(info.data_evals) == potential.N for info in infos)  # one pass, not two
    jit_grad = jax.jit(potential.grad)
    for state in states[1:]:  # every stored gradient is ∇U at its stored state
        for slot in range(M):
            np.testing.assert_allclose(
                state.history_gradients[slot],
                jit_grad(state.history[slot], jnp.arange(potential.N)),
                rtol=1e-12,
                atol=1e-14,
            )
    # a minibatch potential keeps two gradients per step and stores none
    mini = build_estimator(potential.terms, dim=4, N=potential.N, n=4)
    step, start = make_step(mini, 0.3, M)
    mini_states, mini_infos, _, _ = run_chain(step, start(jnp.full(4, 0.5)), 4)
    assert int(mini_infos[-1].data_evals) == 2 * 4
    assert not np.any(mini_states[-1].history_gradients)
