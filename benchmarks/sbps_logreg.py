"""SBPS / pSBPS against SGLD and NumPyro NUTS on the SBPS paper's logistic regression (§7.1).

    .venv/bin/python benchmarks/sbps_logreg.py            # N = 1000 and N = 100,000 (≈ 5–9 min)
    .venv/bin/python benchmarks/sbps_logreg.py --quick    # fewer samples (≈ 2–4 min)

Data: ``models.logistic_regression.load_data(N, d=20, seed=0, ill_conditioned=True)``
(covariate 0 has variance 6, the paper's pSBPS design).  Every sampler is a NumPyro
``MCMCKernel`` driven by the same harness: ``kernel.init`` then one jitted ``lax.scan`` of
``kernel.sample`` for warmup and another for sampling, chains one after the other.
Compilation is timed separately and excluded from "sample s"; warmup time includes its
compilation (and, for the +CV rows, the optax MAP search in ``init``).  SBPS and SGLD chains
start at the MAP (the control-variate anchor, or the MAP passed as ``init_params``; SGLD as in
the paper's scan); NUTS starts from NumPyro's default and adapts.  The comparison is of
stationary efficiency.  "+CV" rows use ``control_variate=True`` (the minibatch gradient
estimator anchored at the MAP).

Columns: min bulk ESS over the 20 coordinates; ESS/s = min ESS / sampling seconds;
ESS/epoch = min ESS / (per-datum likelihood evaluations / N) in the sampling phase;
max |z| = max_j |mean_j − ref_j| / sd_ref_j; max |sd−1| = max_j |sd_j / sd_ref_j − 1|.
References: N = 1000, the stored NumPyro NUTS run ``tests/data/logreg_nuts_n1000_d20_ill.json``
(40,000 draws); N = 100,000, the Laplace approximation at the MAP (d/N = 2·10⁻⁴, where it is
accurate to far below the tolerances quoted).  SGLD's step size comes from the paper's scan
(Supp. F): the largest h in {10^(−i/2)} (ε = h/N in our units) whose per-datum NLL variance
from the MAP stays below the Laplace value d/(2N²).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import arviz as az  # noqa: E402
from numpyro.infer import NUTS  # noqa: E402

from models import logistic_regression as logreg  # noqa: E402
from pplsamplers.infer import SBPS, SGLD  # noqa: E402
from pplsamplers.model import make_potential  # noqa: E402
from pplsamplers.registry import PSBPS  # noqa: E402
from pplsamplers.warmup import find_map  # noqa: E402

D, SUBSAMPLE, K = 20, 100, 3.0
REFERENCE_1000 = ROOT / "tests" / "data" / "logreg_nuts_n1000_d20_ill.json"


def run_kernel(kernel, data, key, num_warmup, num_samples, num_chains, fields, init_params=None):
    """Warmup and sampling scans of ``kernel.sample`` (the NumPyro MCMC loop without its
    Python bookkeeping).  Returns draws (C, S, D), summed extra fields, and timings."""
    X, y = data
    warmup_seconds = sample_seconds = compile_seconds = 0.0
    draws, totals = [], {f: 0.0 for f in fields}

    def scan_of(length, collect):
        def loop(state):
            def body(state, _):
                state = kernel.sample(state, (X, y), {})
                out = (state.z["w"], {f: getattr(state, f) for f in fields}) if collect else None
                return state, out

            return jax.lax.scan(body, state, None, length=length)

        return jax.jit(loop)

    for chain_key in jax.random.split(key, num_chains):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = kernel.init(chain_key, num_warmup, init_params, (X, y), {})
        state, _ = scan_of(num_warmup, False)(state)
        jax.block_until_ready(state)
        warmup_seconds += time.perf_counter() - start
        start = time.perf_counter()
        compiled = scan_of(num_samples, True).lower(state).compile()
        compile_seconds += time.perf_counter() - start
        start = time.perf_counter()
        state, (w, extra) = compiled(state)
        jax.block_until_ready(w)
        sample_seconds += time.perf_counter() - start
        draws.append(np.asarray(w, np.float64))
        for f in fields:
            totals[f] += float(np.sum(np.asarray(extra[f], np.float64)))
    return np.stack(draws), totals, warmup_seconds, sample_seconds, compile_seconds


def laplace_reference(potential):
    """MAP (optax) and the inverse full-data Hessian there."""
    estimator = potential.estimator
    w_map = find_map(jax.random.key(0), estimator, potential.init_position, num_steps=1000).position
    hessian = jax.jacfwd(lambda w: estimator.full_value_and_grad(w)[1])(w_map)
    cov = np.linalg.inv(np.asarray(hessian, np.float64))
    return np.asarray(w_map, np.float64), np.sqrt(np.diag(cov)), w_map


def sgld_scan(estimator, w_map, key, steps):
    """Supp. F: the largest h = 10^(−i/2) whose per-datum NLL variance ≤ d/(2N²)."""
    N = estimator.N
    target = D / (2 * N**2)
    nll = jax.jit(lambda w: estimator.full_value_and_grad(w)[0])
    chosen, table = None, []
    for i in range(10):
        h = 10 ** (-i / 2)
        eps = h / N

        @jax.jit
        def chain(key, eps=eps):
            def body(x, k):
                batch_key, noise_key = jax.random.split(k)
                g = estimator.grad(x, estimator.sample_indices(batch_key))
                x = x - eps * g + jnp.sqrt(2 * eps) * jax.random.normal(noise_key, x.shape, x.dtype)
                return x, x

            _, xs = jax.lax.scan(body, w_map, jax.random.split(key, steps))
            return xs[steps // 2 :: max(steps // 400, 1)]

        xs = chain(jax.random.fold_in(key, i))
        values = np.asarray(jax.lax.map(nll, xs), np.float64) / N
        variance = float(np.var(values)) if np.all(np.isfinite(values)) else np.inf
        table.append((h, variance))
        if chosen is None and variance <= target:
            chosen = h
    return (chosen if chosen is not None else 10 ** (-9 / 2)), table, target


def row(name, draws, totals, warm, sample, compile_, N, ref_mean, ref_sd, epochs=None, extra=""):
    ess = np.array([float(az.ess(draws[:, :, j])) for j in range(D)])
    flat = draws.reshape(-1, D)
    if epochs is None:
        epochs = totals["data_evals"] / N
    if ess.min() < 100:
        extra = "min ESS < 100: unreliable; " + extra
    z = np.max(np.abs(flat.mean(0) - ref_mean) / ref_sd)
    sd = np.max(np.abs(flat.std(0, ddof=1) / ref_sd - 1.0))
    print(
        f"{name:<22}{warm:>9.1f}{sample:>9.1f}{compile_:>8.1f}{ess.min():>8.0f}"
        f"{ess.min() / sample:>9.1f}{ess.min() / epochs:>11.4f}{z:>8.3f}{sd:>9.3f}  {extra}",
        flush=True,
    )
    return dict(
        name=name,
        min_ess=float(ess.min()),
        ess_per_s=float(ess.min() / sample),
        ess_per_epoch=float(ess.min() / epochs),
        max_z=float(z),
        max_sd=float(sd),
    )


def benchmark(N, settings, key):
    data, _ = logreg.load_data(N=N, d=D, seed=0, ill_conditioned=True)
    potential = make_potential(logreg.model, data, {}, subsample_size=SUBSAMPLE)
    start = time.perf_counter()
    lap_mean, lap_sd, w_map = laplace_reference(potential)
    map_seconds = time.perf_counter() - start
    if N == 1000:
        with open(REFERENCE_1000) as handle:
            ref = json.load(handle)
        ref_mean, ref_sd, ref_name = np.asarray(ref["mean"]), np.asarray(ref["sd"]), "NUTS 40k"
    else:
        ref_mean, ref_sd, ref_name = lap_mean, lap_sd, "Laplace"
    chains = settings["chains"]
    print(
        f"\nN = {N:,}, d = {D}, n = {SUBSAMPLE}, k = {K:g}, {chains} chains; reference: "
        f"{ref_name} (MAP + Hessian {map_seconds:.1f} s)"
    )
    print(
        f"{'method':<22}{'warm s':>9}{'sample s':>9}{'jit s':>8}{'minESS':>8}{'ESS/s':>9}"
        f"{'ESS/epoch':>11}{'max|z|':>8}{'max|sd-1|':>9}  notes"
    )
    results = {}

    nuts = NUTS(logreg.model)
    draws, totals, warm, sample, comp = run_kernel(
        nuts, data, key, settings["nuts_warmup"], settings["nuts_samples"], chains, ("num_steps",)
    )
    results["NUTS"] = row(
        "NUTS",
        draws,
        totals,
        warm,
        sample,
        comp,
        N,
        ref_mean,
        ref_sd,
        epochs=totals["num_steps"],
        extra=f"{totals['num_steps'] / (chains * settings['nuts_samples']):.1f} grads/draw",
    )

    h, table, target = sgld_scan(
        potential.estimator, w_map, jax.random.fold_in(key, 1), settings["scan_steps"]
    )
    scan_text = " ".join(f"{hh:.0e}:{v / target:.2g}" for hh, v in table)
    sgld = SGLD(logreg.model, step_size=h / N, subsample_size=SUBSAMPLE)
    draws, totals, warm, sample, comp = run_kernel(
        sgld,
        data,
        jax.random.fold_in(key, 2),
        1000,
        settings["sgld_steps"],
        chains,
        ("data_evals",),
        init_params=w_map,
    )
    results["SGLD"] = row(
        f"SGLD h={h:.0e}",
        draws,
        totals,
        warm,
        sample,
        comp,
        N,
        ref_mean,
        ref_sd,
        extra="scan var/Laplace " + scan_text,
    )

    for control_variate in settings["control_variates"]:
        for cls in (SBPS, PSBPS):
            kernel = cls(
                logreg.model, k=K, subsample_size=SUBSAMPLE, control_variate=control_variate
            )
            draws, totals, warm, sample, comp = run_kernel(
                kernel,
                data,
                jax.random.fold_in(key, 3),
                settings["sbps_warmup"],
                settings["sbps_samples"],
                chains,
                ("data_evals", "num_proposals", "num_bounces", "bound_violations"),
                init_params=None if control_variate else w_map,
            )
            name = cls.__name__.replace("PSBPS", "pSBPS") + (" +CV" if control_variate else "")
            viol = totals["bound_violations"] / max(totals["num_proposals"], 1)
            note = (
                f"viol {viol:.2%}, {totals['num_proposals'] / totals['num_bounces']:.1f} "
                "prop/bounce"
            )
            results[name] = row(
                name, draws, totals, warm, sample, comp, N, ref_mean, ref_sd, extra=note
            )
    return results


SETTINGS = {
    "default": {
        1000: dict(
            chains=2,
            nuts_warmup=500,
            nuts_samples=2000,
            scan_steps=4000,
            sgld_steps=40000,
            sbps_warmup=500,
            sbps_samples=5000,
            control_variates=(False, True),
        ),
        100_000: dict(
            chains=2,
            nuts_warmup=300,
            nuts_samples=800,
            scan_steps=4000,
            sgld_steps=40000,
            sbps_warmup=500,
            sbps_samples=5000,
            control_variates=(False, True),
        ),
    },
    "quick": {
        1000: dict(
            chains=2,
            nuts_warmup=300,
            nuts_samples=500,
            scan_steps=2000,
            sgld_steps=10000,
            sbps_warmup=300,
            sbps_samples=1500,
            control_variates=(False,),
        ),
        100_000: dict(
            chains=2,
            nuts_warmup=200,
            nuts_samples=200,
            scan_steps=2000,
            sgld_steps=10000,
            sbps_warmup=300,
            sbps_samples=1500,
            control_variates=(True,),
        ),
    },
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (2-4 min)")
    parser.add_argument("--sizes", default="1000,100000", help="comma-separated N values")
    parser.add_argument("--x64", action="store_true", help="run in float64 (default float32)")
    args = parser.parse_args(argv)
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    settings = SETTINGS["quick" if args.quick else "default"]
    start = time.perf_counter()
    print(
        f"pplsamplers SBPS benchmark; jax {jax.__version__} on {jax.devices()[0].platform}, "
        f"{'float64' if args.x64 else 'float32'}{', quick' if args.quick else ''}"
    )
    summary = {}
    for N in (int(s) for s in args.sizes.split(",")):
        summary[N] = benchmark(N, settings.get(N, settings[100_000]), jax.random.key(N))
    print()
    for N, results in summary.items():
        nuts = results["NUTS"]["ess_per_s"]
        for name, r in results.items():
            if name != "NUTS":
                print(
                    f"N = {N:>7,}: {name:<14} min-ESS/s = {r['ess_per_s'] / nuts:6.2f} x NUTS, "
                    f"ESS/epoch = {r['ess_per_epoch'] / results['NUTS']['ess_per_epoch']:7.1f}"
                    f" x NUTS, max|z| {r['max_z']:.3f}"
                )
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
