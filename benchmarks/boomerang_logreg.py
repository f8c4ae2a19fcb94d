"""BPS, σBPS and the Boomerang against NumPyro NUTS and SGLD on Bayesian logistic regression.

    .venv/bin/python benchmarks/boomerang_logreg.py            # N = 10^4 and 10^5 (~5 min)
    .venv/bin/python benchmarks/boomerang_logreg.py --quick    # N = 10^4, short chains

Data: ``models/logistic_regression.py``, ``load_data(N, d=20, seed=0)``, float64, one chain
per sampler, the same key.  Every sampler starts from the MAP except NUTS (NumPyro's default
init).  Each sampler is timed twice:

* end to end, as a user runs it: model set-up, MAP / reference / control-variate set-up,
  ``MCMC.warmup`` and ``MCMC.run`` with their compilations, until the draws exist
  (``jax.block_until_ready``: NumPyro returns before an asynchronously dispatched chain has
  finished, so an unblocked clock misses most of a slow chain's sampling);
* steady state: the warmed-up kernel's own ``sample`` in a ``lax.scan`` of as many draws,
  compiled beforehand (compilation and set-up excluded).  NumPyro's NUTS and the
  pplsamplers adapters go through the same loop, with the data passed as arguments.

Columns
-------
min ESS      smallest ArviZ bulk ESS over the 20 weights (the end-to-end run's draws)
total s      end to end (above);  ESS/s = min ESS / total s
steady s     the steady-state loop;  ESS/s = its draws' min ESS / steady s
epochs       per-datum likelihood terms evaluated / N in the end-to-end run (warmup
             included; for the PDMPs, the shared set-up's passes (mode, curvature,
             control-variate anchor) are not counted)
ESS/ep       min ESS / epochs
mean err     max_j |mean_j − ref_j| / sd_ref_j
sd err       max_j |sd_j / sd_ref_j − 1|
bounce       PDMP bounces per sample;  viol: bound violations per 1000 proposals
The reference is the stored long NUTS run (tests/data/logreg_N<N>_nuts.json, 4 × 2000 draws,
made by tests/data/boomerang_reference.py), or this benchmark's own NUTS run if it is missing.
The minibatch size is n = N / 100 (``--batch``) for SGLD and every PDMP.

pdmp-jax (the JAX PDMP package) is imported if available; its releases pin jax < 0.5 and
cannot be installed next to jax 0.12, so it prints "not installed" rows here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

from models import logistic_regression  # noqa: E402
from pplsamplers.infer import BPS, SGLD, Boomerang  # noqa: E402
from pplsamplers.kernels.pdmp.reference import curvature_diagonal  # noqa: E402
from pplsamplers.model import all_data_model, make_potential  # noqa: E402
from pplsamplers.registry import SigmaBPS  # noqa: E402
from pplsamplers.warmup import find_map  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
D = 20
PDMP_FIELDS = ("data_evals", "num_bounces", "num_proposals", "bound_violations")

try:  # optional comparison; see the module docstring
    import pdmp_jax  # noqa: F401

    HAVE_PDMP_JAX = True
except ImportError:
    HAVE_PDMP_JAX = False


def run(
    make,
    data,
    num_warmup,
    num_samples,
    key,
    init_params=None,
    fields=("data_evals",),
):
    """Time set-up + compilation + warmup + sampling, blocked until the draws exist; count
    data evaluations."""
    started = time.perf_counter()
    kernel = make()
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, progress_bar=False)
    mcmc.warmup(key, *data, init_params=init_params, collect_warmup=True, extra_fields=fields)
    warm = {k: np.asarray(v) for k, v in mcmc.get_extra_fields().items()}  # blocks
    mcmc.run(mcmc.post_warmup_state.rng_key, *data, extra_fields=fields)
    jax.block_until_ready((mcmc.get_samples(), mcmc.get_extra_fields()))
    done = time.perf_counter()
    extra = {k: np.asarray(v) for k, v in mcmc.get_extra_fields().items()}
    timing = {"seconds": done - started, "steady": steady_state(mcmc, num_samples, data)}
    return kernel, np.asarray(mcmc.get_samples()["w"]), timing, warm, extra


def steady_state(mcmc, num_samples, data):
    """Steady-state seconds and min ESS: the warmed-up kernel's ``sample`` in a compiled
    ``lax.scan`` of ``num_samples`` draws (compilation excluded, data as arguments)."""
    kernel, state = mcmc.sampler, mcmc.last_state

    def loop(state, args):
        def body(carry, _):
            carry = kernel.sample(carry, args, {})
            return carry, carry.z["w"]

        return jax.lax.scan(body, state, None, length=num_samples)[1]

    compiled = jax.jit(loop).lower(state, data).compile()
    started = time.perf_counter()
    draws = jax.block_until_ready(compiled(state, data))
    seconds = time.perf_counter() - started
    return seconds, float(np.min(az.ess(np.asarray(draws)[None])))


def accuracy(draws, ref_mean, ref_sd):
    """(mean err, sd err) of ``draws`` against the reference (see Columns)."""
    mean_err = float(np.max(np.abs(draws.mean(0) - ref_mean) / ref_sd))
    sd_err = float(np.max(np.abs(draws.std(0, ddof=1) / ref_sd - 1)))
    return mean_err, sd_err


def row(name, draws, timing, evals, stats, N, ref_mean, ref_sd):
    ess = float(np.min(az.ess(draws[None])))
    steady_seconds, steady_ess = timing.pop("steady")
    mean_err, sd_err = accuracy(draws, ref_mean, ref_sd)
    epochs = evals / N
    return {
        "sampler": name,
        "N": N,
        "min_ess": ess,
        **timing,
        "ess_per_s": ess / timing["seconds"],
        "steady_seconds": steady_seconds,
        "steady_ess": steady_ess,
        "ess_per_steady_s": steady_ess / steady_seconds,
        "epochs": epochs,
        "ess_per_epoch": ess / epochs,
        "mean_err": mean_err,
        "sd_err": sd_err,
        **stats,
    }


def print_table(rows):
    header = (
        f"{'sampler':<31}{'min ESS':>8}{'total s':>8}{'ESS/s':>7}{'steady s':>9}"
        f"{'ESS/s':>7}{'epochs':>8}{'ESS/ep':>8}{'mean err':>9}{'sd err':>7}{'bounce':>7}"
        f"{'viol':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        if r.get("skipped"):
            print(f"{r['sampler']:<31}  {r['skipped']}")
            continue
        bounces = f"{r['bounces']:.2f}" if "bounces" in r else "-"
        viol = f"{r['violations']:.1f}" if "violations" in r else "-"
        print(
            f"{r['sampler']:<31}{r['min_ess']:>8.0f}{r['seconds']:>8.1f}{r['ess_per_s']:>7.1f}"
            f"{r['steady_seconds']:>9.2f}{r['ess_per_steady_s']:>7.0f}{r['epochs']:>8.0f}"
            f"{r['ess_per_epoch']:>8.2f}{r['mean_err']:>9.3f}{r['sd_err']:>7.3f}{bounces:>7}"
            f"{viol:>6}"
        )


def reference_for(N, fallback):
    path = DATA / f"logreg_N{N}_nuts.json"
    if path.exists():
        ref = json.loads(path.read_text())
        return np.asarray(ref["mean"]), np.asarray(ref["sd"]), path.name
    return fallback.mean(0), fallback.std(0, ddof=1), "this run's NUTS"


def benchmark(N, quick, n, seed=0):
    data, _ = logistic_regression.load_data(N=N, d=D, seed=0)
    key = jax.random.key(seed)
    scale = 0.4 if quick else 1.0
    model = logistic_regression.model
    nuts_warmup, nuts_samples = int(300 * scale), int(1000 * scale)
    pdmp_warmup, pdmp_samples = int(300 * scale), int(2000 * scale)

    # NUTS on the full data; warmup steps are not returned, count them at the sampling average
    _, nuts_draws, timing, _, extra = run(
        lambda: NUTS(all_data_model(model)),
        data,
        nuts_warmup,
        nuts_samples,
        key,
        fields=("num_steps",),
    )
    steps = extra["num_steps"]
    ref_mean, ref_sd, ref_name = reference_for(N, nuts_draws)
    evals = N * (steps.sum() + steps.mean() * nuts_warmup)
    rows = [row("NUTS (NumPyro, full data)", nuts_draws, timing, evals, {}, N, ref_mean, ref_sd)]

    # SGLD from the MAP, step 0.1 / max_j H_jj (H the Hessian diagonal at the MAP): stable,
    # and each step moves about 0.45 posterior sd in the stiffest direction
    started = time.perf_counter()
    potential = make_potential(model, data, {}, subsample_size=n)
    estimator = potential.estimator
    x_map = find_map(jax.random.PRNGKey(0), estimator, potential.init_position).position
    step = float(0.1 / np.max(curvature_diagonal(estimator, x_map)))
    setup = time.perf_counter() - started
    sgld_warmup, sgld_samples = int(500 * scale), int(5000 * scale)
    _, draws, timing, _, _ = run(
        lambda: SGLD(model, step_size=step, subsample_size=n),
        data,
        sgld_warmup,
        sgld_samples,
        key,
        init_params={"w": x_map},
    )
    timing["seconds"] += setup
    evals = n * (sgld_warmup + sgld_samples + 500) + 70 * N  # + MAP and curvature (about)
    rows.append(row(f"SGLD (eps={step:.0e})", draws, timing, evals, {}, N, ref_mean, ref_sd))

    pdmp = [
        ("BPS (CV)", lambda: BPS(model, subsample_size=n, control_variate=True, init_at_map=True)),
        (
            "sigmaBPS (CV)",
            lambda: SigmaBPS(model, subsample_size=n, control_variate=True, init_at_map=True),
        ),
        ("Boomerang (minibatch)", lambda: Boomerang(model, subsample_size=n)),
        ("Boomerang (CV)", lambda: Boomerang(model, subsample_size=n, control_variate=True)),
        (
            "Boomerang (CV, full H)",
            lambda: Boomerang(
                model,
                subsample_size=n,
                control_variate=True,
                curvature="full_hessian",
                target_evals_per_sample=10,
            ),
        ),
    ]
    for name, make in pdmp:
        kernel, draws, timing, warm, extra = run(
            make, data, pdmp_warmup, pdmp_samples, key, fields=PDMP_FIELDS
        )
        evals = warm["data_evals"].sum() + extra["data_evals"].sum()
        stats = {
            "bounces": float(extra["num_bounces"].mean()),
            "violations": 1000
            * extra["bound_violations"].sum()
            / max(1, extra["num_proposals"].sum()),
        }
        rows.append(row(name, draws, timing, evals, stats, N, ref_mean, ref_sd))
    for name in ("pdmp-jax BPS", "pdmp-jax Boomerang"):
        if HAVE_PDMP_JAX:  # pragma: no cover - not installable next to jax 0.12
            rows.append({"sampler": name, "N": N, "skipped": "installed, but not wired up"})
        else:
            rows.append(
                {
                    "sampler": name,
                    "N": N,
                    "skipped": "not installed (pdmp-jax "
                    f"pins jax<0.5; this environment has jax {jax.__version__})",
                }
            )
    return rows, ref_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^4 only, short chains")
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--batch", type=int, default=None, help="minibatch size n (N/100)")
    args = parser.parse_args()
    sizes = args.sizes or ([10_000] if args.quick else [10_000, 100_000])
    warnings.filterwarnings("ignore", message=".*There are not enough devices.*")
    summary = []
    for N in sizes:
        started = time.perf_counter()
        n = args.batch or N // 100
        rows, ref_name = benchmark(N, args.quick, n)
        print(
            f"\n== logistic regression, N = {N}, d = {D}, n = {n}, reference "
            f"{ref_name} ({time.perf_counter() - started:.0f} s) =="
        )
        print_table(rows)
        by = {r["sampler"]: r for r in rows if not r.get("skipped")}
        nuts = by["NUTS (NumPyro, full data)"]
        for name in ("Boomerang (CV)", "Boomerang (CV, full H)"):
            r = by[name]
            summary.append(
                f"N = {N}: {name} / NUTS min-ESS per second: "
                f"{r['ess_per_s'] / nuts['ess_per_s']:.1f}x end to end, "
                f"{r['ess_per_steady_s'] / nuts['ess_per_steady_s']:.1f}x steady state, "
                f"{r['ess_per_epoch'] / nuts['ess_per_epoch']:.1f}x per epoch"
            )
    print()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
