"""HAMCMC vs SGLD, pSGLD and SGRLD on the linear Gaussian model: the paper's Fig. 2.

Şimşekli et al. (2016) §4.1: θ ~ N(0, I), x_n ~ N(a_nᵀθ, σ_x²) (eq. 14) with a correlated
design, minibatches of N/100, step sizes ε_t = (a/t)^0.51 for every method, and the error
‖θ̄ − θ̂_t‖² of the ε-weighted running mean θ̂_t (eq. 12) against the analytic posterior mean
θ̄, as a function of iterations and of wall-clock time, for D = 10 and D = 100 and HAMCMC
memory M ∈ {2, 3}.

What the paper fixes and what it leaves open.  Fixed (§4.1, App. B Table 1): eq. (14),
σ_x² = 10, N_Ω = N/100 drawn with replacement, ε_t = (a_ε/t)^0.51 with a_ε tuned *per method*
("for each method, we have tried several values ... with the same rigor and we report the best
results"), HAMCMC λ = 1, M ∈ {2, 3}, error against the posterior mean.  Open: N, how the
correlated a_n are drawn, θ_0, and T for Fig. 2.  N matters most, and it is the regime knob:
the posterior sd shrinks like N^(−1/2), so at large N the start θ_0 = 0 is hundreds of
posterior sds from θ̄ (printed per D) and most of the run is drift-dominated, where HAMCMC's
pairs follow descent directions and its base step γε can exceed SGLD's stable step several
times.  At N = 1000 (N_Ω = 10 < D = 100) the pairs are dominated by the injected noise and
HAMCMC behaves like SGLD.  The default N = 10⁵ is the large-data regime SG-MCMC is for, with
N_Ω = 1000 ≥ D so the minibatch curvature in y_t has full rank; ``--N 1000`` gives the other
regime (both are quoted in docs/samplers/hamcmc.md).

Protocol (the same rigour for every method, as the paper asks):
* Data: ``models.linear_gaussian.load_data(N, D, σ_x² = 10, correlation = ρ)``, rows
  a_n ~ N(0, C) with C_ij = ρ^|i−j| (ρ = 0.99: a broad spectrum, κ ≈ 10³–10⁴);
  θ_0 = 0 (the prior mean) for every chain; T = 20 000 (the paper's T of Fig. 1).
* Step sizes are scanned on a grid per method in units of 1/L, L = λ_max(P) (the largest
  posterior curvature, which a user would estimate by power iteration at the MAP): SGLD's ε_1
  and HAMCMC's γε_1 are multiples of 1/L; SGRLD's ε_1 and HAMCMC's ε_1 are unitless (their
  metric carries the scale); pSGLD's ε_1 is absolute.  The first step ε_1 = a^0.51 fixes a.
  Every grid runs past its method's stability limit (the diverging entries, printed), so the
  SGLD baseline is the best *stable* SGLD; a winner on the grid's upper edge is flagged.
  Each grid point runs ``tune_chains`` chains on tuning keys; the lowest mean final error
  wins; the winner is then rerun on fresh evaluation keys, and those curves are reported.
  HAMCMC: λ = 1 (paper, Table 1), and its 2M SGLD start steps use the step 1/L.
* SGLD and pSGLD are the updates of :mod:`pplsamplers.kernels.sgmcmc.sgld` with the schedule; the
  SGLD update is checked to agree with the package kernel step for step, and pSGLD is Li et
  al.'s Alg. 1 with the package's metric G = 1/(λ + √a), updated at every step (the
  package's PSGLD freezes G after warmup).
  SGRLD uses the constant metric G = P (the expected Fisher information of this model plus
  the prior), :mod:`pplsamplers.kernels.sgmcmc.sgrld`.
* Cost: a single chain runs ``time_steps`` steps in one compiled ``lax.scan``; the best of
  five round-robin timings gives µs per iteration.  The wall-clock axis is iterations × that cost.
  SGRLD's wall-clock uses a Cholesky factorisation at every step, as the paper does (its
  footnote 3); its cost with the factor computed once is printed too.

Run ``python benchmarks/hamcmc_linear_gaussian.py`` (≈ 11 min on 2 shared CPU cores at the
default N = 10⁵; ≈ 2–4 min with ``--N 1000``) or with ``--quick`` (≈ 1–2 min).  It prints the
tables and writes ``docs/_static/figures/hamcmc_linear_gaussian.png`` (or ``--out``), the HAMCMC
page's figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import linear_gaussian  # noqa: E402
from pplsamplers.estimator import Estimator  # noqa: E402
from pplsamplers.kernels.sgmcmc import hamcmc, sgld, sgrld  # noqa: E402
from pplsamplers.kernels.sgmcmc.step_size import step_size_at  # noqa: E402
from pplsamplers.model import make_potential  # noqa: E402

NOISE_VAR, DAMPING, EXPONENT = 10.0, 1.0, 0.51


# ----------------------------------------------------------------------------- samplers


def scheduled_sgld(
    estimator: Estimator,
    a,
    *,
    preconditioned: bool,
    schedule: str = "polynomial",
    rmsprop_decay: float = 0.99,
    rmsprop_eps: float = 1e-5,
):
    """The SGLD / pSGLD update of :mod:`pplsamplers.kernels.sgmcmc.sgld` with ε_t = (a/t)^0.51.

    State ``(position, RMSprop average, t)``.  With ``schedule="constant"`` SGLD is the package
    kernel (checked by :func:`check_against_package`); pSGLD updates its metric every step.
    """

    def step(key, state):
        position, square_avg, t = state
        t = t + 1
        eps = step_size_at(t, a, 1, schedule, EXPONENT)
        batch_key, noise_key = jax.random.split(key)
        grad = estimator.grad(position, estimator.sample_indices(batch_key))
        if preconditioned:
            fresh = jnp.all(square_avg == 0.0)
            square_avg = jnp.where(
                fresh, grad**2, rmsprop_decay * square_avg + (1 - rmsprop_decay) * grad**2
            )
            metric = sgld.rmsprop_metric(square_avg, rmsprop_eps)
        else:
            metric = jnp.ones_like(grad)
        noise = jax.random.normal(noise_key, grad.shape, grad.dtype)
        position = position - eps * metric * grad + jnp.sqrt(2 * eps * metric) * noise
        return (position, square_avg, t), eps

    init = lambda x: (x, jnp.zeros_like(x), jnp.asarray(0))
    return step, init, lambda state: state[0]


def check_against_package(estimator: Estimator) -> None:
    """The benchmark's SGLD update equals the package kernel (constant ε)."""
    ours, init, position = scheduled_sgld(
        estimator, 1e-4, preconditioned=False, schedule="constant"
    )
    theirs, params = sgld.build_kernel(), sgld.SGLDParams(1e-4, jnp.ones(estimator.dim))
    start = jnp.zeros(estimator.dim)
    a, b = init(start), sgld.init(jax.random.key(0), start, estimator, params)
    for key in jax.random.split(jax.random.key(0), 3):
        a, _ = ours(key, a)
        b, _ = theirs(key, b, estimator, params)
    np.testing.assert_allclose(position(a), b.position, rtol=1e-12)


@dataclass
class Method:
    name: str
    build: Callable  # (*hyper) -> (step(key, state) -> (state, eps), init(x), position(state))
    grid: list[tuple]  # hyperparameter tuples, traced (one compile per grid)
    label: Callable[[tuple], str]


def methods_for(estimator, precision, memory_sizes, quick):
    L = float(np.linalg.eigvalsh(precision).max())
    to_a = lambda eps1: eps1 ** (1 / EXPONENT)  # ε_1 = a^0.51

    def with_step_size(kernel, params, init):
        """``(step(k, s) -> (state, ε_t), init, position)`` of a package kernel."""

        def step(key, state):
            state, info = kernel(key, state, estimator, params)
            return state, info.step_size

        return step, init, lambda state: state.position

    def sgld_method(preconditioned):
        def build(eps1):
            return scheduled_sgld(estimator, to_a(eps1), preconditioned=preconditioned)

        return build

    def sgrld_method(factorize=False):
        def build(eps1):
            kernel = sgrld.build_kernel("polynomial", factorize)
            params = sgrld.make_params(to_a(eps1), jnp.asarray(precision), EXPONENT)
            return with_step_size(kernel, params, lambda x: sgrld.init(None, x, estimator, params))

        return build

    def hamcmc_method(memory_size):
        def build(eps1, base):
            kernel = hamcmc.build_kernel(memory_size, "polynomial")
            params = hamcmc.HAMCMCParams(
                to_a(eps1),
                initial_scale=base / (L * eps1),
                damping=DAMPING,
                decay_exponent=EXPONENT,
                sgld_step_size=1.0 / L,
            )
            start = lambda x: hamcmc.init(None, x, estimator, params, memory_size=memory_size)
            return with_step_size(kernel, params, start)

        return build

    # Each grid brackets its optimum: the largest value diverges or is worse (checked by
    # ``edge_note``; the first steps of the (a/t)^0.51 schedule may exceed the stable step).
    sgld_grid = [1, 2, 4, 8] if quick else [1, 2, 3, 4, 6, 8, 12]
    psgld_grid = [0.1, 1.0, 3.0] if quick else [0.03, 0.1, 0.3, 1.0, 3.0, 10.0]
    sgrld_grid = [0.3, 1.0, 2.0] if quick else [0.1, 0.3, 0.5, 1.0, 1.5, 2.0]
    ham_eps = [1.0, 2.0] if quick else [0.5, 1.0, 2.0, 3.0]
    ham_base = [4, 16] if quick else [2, 4, 8, 16, 32]
    methods = [
        Method(
            "SGLD",
            sgld_method(False),
            [(c / L,) for c in sgld_grid],
            lambda h: f"ε1 = {h[0] * L:g}/L",
        ),
        Method(
            "pSGLD",
            sgld_method(True),
            [(e,) for e in psgld_grid],
            lambda h: f"ε1 = {h[0]:g} (β 0.99, λ 1e-5)",
        ),
        Method(
            "SGRLD", sgrld_method(), [(e,) for e in sgrld_grid], lambda h: f"ε1 = {h[0]:g}, G = P"
        ),
    ]
    for M in memory_sizes:
        methods.append(
            Method(
                f"HAMCMC M={M}",
                hamcmc_method(M),
                [(e, b) for e in ham_eps for b in ham_base],
                lambda h: f"ε1 = {h[0]:g}, γε1 = {h[1]:g}/L, λ = 1",
            )
        )
    return methods, sgrld_method(factorize=True), L


# ------------------------------------------------------------------------------ running


def make_error_runner(build, dim, mean, num_steps):
    """Compiled (hyper..., keys) -> error curves ‖θ̄ − θ̂_t‖², shape (grid, chains, steps)."""

    def chain(hyper, key):
        step, init, position = build(*hyper)

        def body(carry, k):
            state, weighted_sum, weight = carry
            state, eps = step(k, state)
            weighted_sum = weighted_sum + eps * position(state)  # eq. (12)
            weight = weight + eps
            error = jnp.sum((weighted_sum / weight - mean) ** 2)
            return (state, weighted_sum, weight), error

        carry = (init(jnp.zeros(dim)), jnp.zeros(dim), jnp.asarray(0.0))
        return jax.lax.scan(body, carry, jax.random.split(key, num_steps))[1]

    over_keys = jax.vmap(chain, (None, 0))
    return jax.jit(jax.vmap(over_keys, (0, None)))


def edge_note(grid, best):
    """Name the hyperparameters whose tuned value is the largest one on the grid."""
    values = np.asarray(grid, dtype=float)
    edges = [
        str(k + 1)
        for k in range(values.shape[1])
        if np.unique(values[:, k]).size > 1 and values[best, k] == values[:, k].max()
    ]
    return f"  [at the grid's upper edge in hyperparameter {', '.join(edges)}]" if edges else ""


def tune_and_evaluate(method, dim, mean, num_steps, tune_chains, eval_chains, seed):
    grid = jnp.asarray(method.grid)
    runner = make_error_runner(method.build, dim, mean, num_steps)
    tune_keys = jax.random.split(jax.random.key(seed), tune_chains)
    curves = np.asarray(runner(tuple(grid.T), tune_keys))
    final = np.where(np.isfinite(curves[:, :, -1]), curves[:, :, -1], np.inf).mean(axis=1)
    best = int(np.argmin(final))
    eval_keys = jax.random.split(jax.random.key(seed + 1000), eval_chains)
    hyper = tuple(grid[best : best + 1].T)
    curve = np.asarray(runner(hyper, eval_keys))[0].mean(axis=0)
    return method.grid[best], final, curve, edge_note(method.grid, best)


def compiled_timer(build, hyper, dim, num_steps):
    """A compiled single-chain run of ``num_steps`` steps, called once (compile + warm-up)."""
    step, init, position = build(*hyper)

    @jax.jit
    def run(key):
        def body(state, k):
            state, _ = step(k, state)
            return state, None

        state, _ = jax.lax.scan(body, init(jnp.zeros(dim)), jax.random.split(key, num_steps))
        return position(state)

    run(jax.random.key(0)).block_until_ready()
    return run


def time_per_iteration(timers: dict, num_steps: int, rounds: int = 5) -> dict:
    """µs per iteration of each timer: the best of ``rounds`` round-robin timings.

    Round robin, so that a change of machine load during the benchmark hits every method.
    """
    best = dict.fromkeys(timers, np.inf)
    for r in range(rounds):
        for name, run in timers.items():
            start = time.perf_counter()
            run(jax.random.key(r + 1)).block_until_ready()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: 1e6 * seconds / num_steps for name, seconds in best.items()}


# ------------------------------------------------------------------------------ reporting


def first_reach(curve, level):
    hits = np.nonzero(curve <= level)[0]
    return int(hits[0]) + 1 if hits.size else None


def report(dim, results, costs, sgrld_fixed_cost, num_steps):
    names = list(results)
    checkpoints = [c for c in (100, 300, 1000, 3000, 10000, 30000, 100000) if c <= num_steps]
    if checkpoints[-1] != num_steps:
        checkpoints.append(num_steps)
    print(f"\n=== D = {dim}: error ‖θ̄ − θ̂_t‖² vs iterations (mean of evaluation chains)")
    print(f"{'method':<13}" + "".join(f"{c:>11,d}" for c in checkpoints) + "   tuned")
    for name in names:
        hyper, curve = results[name]
        row = "".join(f"{curve[c - 1]:11.3e}" for c in checkpoints)
        print(f"{name:<13}{row}   {hyper}")

    total = {name: costs[name] * num_steps * 1e-6 for name in names}
    times = np.geomspace(min(total.values()) / 30, max(total.values()), 6)
    print(f"\n=== D = {dim}: error vs wall-clock (iterations × measured cost per iteration)")
    print(f"{'method':<13}" + "".join(f"{t:>10.3f}s" for t in times))
    for name in names:
        curve = results[name][1]
        cells = []
        for t in times:
            iterations = int(t / (costs[name] * 1e-6))
            cells.append(
                f"{curve[iterations - 1]:11.3e}" if 1 <= iterations <= num_steps else f"{'—':>11}"
            )
        print(f"{name:<13}" + "".join(cells))

    print(f"\n=== D = {dim}: cost per iteration (one chain, compiled scan, best of 5 rounds)")
    for name in names:
        note = (
            f"  (factor once: {sgrld_fixed_cost:.1f} µs; shown: Cholesky every step, "
            "paper protocol)"
            if name == "SGRLD"
            else ""
        )
        print(f"{name:<13}{costs[name]:9.1f} µs   {costs[name] / costs['SGLD']:5.2f}× SGLD{note}")

    sgld_final = results["SGLD"][1][-1]
    print(
        f"\n=== D = {dim}: iterations to reach SGLD's final error {sgld_final:.3e} "
        f"(SGLD: {num_steps:,d}; target ≤ 1/10)"
    )
    for name in names:
        if name == "SGLD":
            continue
        reach = first_reach(results[name][1], sgld_final)
        text = "never" if reach is None else f"{reach:,d} ({reach / num_steps:.3f} of SGLD's)"
        print(f"{name:<13}{text}")


def plot(all_results, all_costs, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = list(all_results)
    fig, axes = plt.subplots(len(dims), 2, figsize=(11, 4 * len(dims)), squeeze=False)
    for row, dim in enumerate(dims):
        for name, (_, curve) in all_results[dim].items():
            iterations = np.arange(1, curve.size + 1)
            style = "--" if name.startswith("HAMCMC") and name.endswith("3") else "-"
            axes[row, 0].loglog(iterations, curve, style, label=name)
            axes[row, 1].loglog(iterations * all_costs[dim][name] * 1e-6, curve, style, label=name)
        axes[row, 0].set(xlabel="iteration", ylabel="‖θ̄ − θ̂‖²", title=f"D = {dim}")
        axes[row, 1].set(xlabel="wall-clock (s)", title=f"D = {dim}")
        axes[row, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"\nwrote {out}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small grids and runs (~1 min)")
    parser.add_argument(
        "--out",
        default=os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            "docs",
            "_static",
            "figures",
            "hamcmc_linear_gaussian.png",
        ),
    )
    parser.add_argument("--dims", default="10,100")
    parser.add_argument("--N", type=int, default=100_000)
    parser.add_argument("--correlation", type=float, default=0.99)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    num_steps = args.steps or (3000 if args.quick else 20000)
    tune_chains, eval_chains = (2, 2) if args.quick else (3, 4)
    time_steps = 2000 if args.quick else 5000
    started = time.perf_counter()
    print(
        f"linear Gaussian (eq. 14): N = {args.N}, n = N/100, σ_x² = {NOISE_VAR}, "
        f"ρ = {args.correlation}, θ_0 = 0, ε_t = (a/t)^{EXPONENT}, {num_steps:,d} iterations; "
        f"tuning {tune_chains} chains per grid point, evaluation {eval_chains} fresh chains"
    )
    all_results, all_costs = {}, {}
    for dim in (int(d) for d in args.dims.split(",")):
        model_args, model_kwargs = linear_gaussian.load_data(
            N=args.N, D=dim, noise_var=NOISE_VAR, correlation=args.correlation, seed=args.seed
        )
        estimator = make_potential(
            linear_gaussian.model, model_args, model_kwargs, subsample_size=max(1, args.N // 100)
        ).estimator
        check_against_package(estimator)
        mean, cov = linear_gaussian.posterior(*model_args, **model_kwargs)
        precision = np.linalg.inv(cov)
        methods, sgrld_factorizing, L = methods_for(estimator, precision, (2, 3), args.quick)
        eig = np.linalg.eigvalsh(precision)
        print(
            f"\nD = {dim}: posterior precision eigenvalues {eig.min():.3g} … {eig.max():.3g} "
            f"(κ = {eig.max() / eig.min():.3g}); ‖θ̄‖² = {mean @ mean:.3g}; the start θ_0 = 0 "
            f"is {np.sqrt(mean @ precision @ mean):.3g} posterior sds (Mahalanobis) from θ̄"
        )
        results, timers, hypers = {}, {}, {}
        for method in methods:
            t0 = time.perf_counter()
            hyper, final, curve, edge = tune_and_evaluate(
                method, dim, jnp.asarray(mean), num_steps, tune_chains, eval_chains, args.seed
            )
            results[method.name] = (method.label(hyper), curve)
            hypers[method.name] = hyper
            timers[method.name] = compiled_timer(method.build, hyper, dim, time_steps)
            grid_text = ", ".join(f"{f:.2g}" for f in final)
            print(
                f"  {method.name:<12} grid final errors [{grid_text}] -> {method.label(hyper)}"
                f"{edge}  ({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
        timers["SGRLD (factor once)"] = timers.pop("SGRLD")
        timers["SGRLD"] = compiled_timer(sgrld_factorizing, hypers["SGRLD"], dim, time_steps)
        costs = time_per_iteration(timers, time_steps)
        sgrld_fixed_cost = costs.pop("SGRLD (factor once)")
        report(dim, results, costs, sgrld_fixed_cost, num_steps)
        all_results[dim], all_costs[dim] = results, costs
    plot(all_results, all_costs, args.out)
    print(f"total {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
