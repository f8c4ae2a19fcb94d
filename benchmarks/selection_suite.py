"""Selection suite: every candidate on every model, on an equal data budget; AutoSampler's picks.

For each model (all in ``models/``) the suite runs every registered candidate kernel with the
same sampling budget in epochs (2 chains, with the settings ``competence.rank_candidates``
gives it, started and whitened by the shared warmup as in the pilot, and one PRNG key for all
candidates, i.e. common random numbers), scores it by min bulk ESS per epoch, and applies the pilot's bias
guard (``pilot.bias_guard``: IMQ kernel Stein discrepancy with full-data scores on 200
thinned draws, as an unbiased U-statistic with one kernel lengthscale for all candidates; a
candidate is rejected when its KSD² exceeds 4× the best one's, i.e. its KSD more than twice,
by over 3 standard errors, or exceeds 100× the best one's upper bound, or is not finite).  The best admissible candidate defines the regret
1 − score(chosen)/score(best) of AutoSampler(rules) and AutoSampler(pilot);
choosing a guard-rejected candidate counts as regret 1.

    python benchmarks/selection_suite.py [--quick] [--budget 20] [--models a,b]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # as the tests: float32 probes are too coarse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pplsamplers import AutoSampler  # noqa: E402
from pplsamplers.model import make_potential, model_info  # noqa: E402
from pplsamplers.registry import SAMPLERS, make_kernel  # noqa: E402
from pplsamplers.select import model_features, rank_candidates  # noqa: E402
from pplsamplers.select.auto import available_candidates, default_subsample_size  # noqa: E402
from pplsamplers.select.pilot import (  # noqa: E402
    bias_guard,
    common_lengthscale,
    evaluate_candidate,
    guard_statistics,
)


def suite(quick: bool) -> dict:
    """name -> (module, load_data kwargs)."""
    import importlib

    load = lambda name: importlib.import_module(f"models.{name}")
    big = 20_000 if quick else 100_000
    return {
        "breast_cancer_lr": (load("logistic_regression"), dict(dataset="breast_cancer")),
        "large_lr": (load("logistic_regression"), dict(N=big, d=20)),
        "correlated_gaussian_d50": (
            load("linear_gaussian"),
            dict(N=big // 2, D=50, correlation=0.9),
        ),
        "skew_normal": (load("skew_normal"), dict()),
        "heavy_tailed_lr": (load("heavy_tailed_logistic"), dict(N=big // 2, scales=(1.0, 10.0))),
        "hyperboloid": (load("hyperboloid"), dict(N=10_000)),
        "multimodal_mixture": (load("multimodal_mixture"), dict(N=10_000)),
        "digits_bnn": (load("bnn"), dict()),
    }


def run_model(name: str, module, data_kwargs: dict, budget: float, seed: int) -> dict:
    args, kwargs = module.load_data(**data_kwargs)
    info = model_info(module.model, args, kwargs)
    n = info.model_subsample_size or default_subsample_size(info.data_size)
    potential = make_potential(module.model, args, kwargs, n)
    features = model_features(module.model, args, kwargs, subsample_size=n)
    # every candidate runs with the scale-aware settings AutoSampler would give it
    tuned = {c.name: c.params for c in rank_candidates(features, available_candidates())}
    lengthscale = common_lengthscale(features)
    # the pilot's guard inputs, as it builds them
    to_flat = jax.jit(jax.vmap(potential.unconstrain))
    score_fn = jax.jit(jax.vmap(lambda x: -potential.estimator.full_value_and_grad(x)[1]))
    rows = {}
    for candidate in available_candidates():  # common random numbers: one key for all
        params = {} if candidate == "nuts" else {"subsample_size": n, **tuned.get(candidate, {})}
        if candidate == "boomerang":
            params["control_variate"] = True
        if SAMPLERS[candidate].minibatch:  # short runs, checked by check_run (as the pilot)
            params["self_check"] = False
        start = time.perf_counter()
        try:
            outcome = evaluate_candidate(
                lambda c=candidate, p=params: make_kernel(c, module.model, **p),
                args,
                kwargs,
                info.data_size,
                budget_epochs=budget,
                num_chains=2,
                rng_key=jax.random.PRNGKey(seed),
            )
            outcome["ksd_squared"], outcome["ksd_se"] = guard_statistics(
                to_flat(outcome.pop("samples")), score_fn, lengthscale, outcome["ess"], 200
            )
        except Exception as error:  # a kernel that fails on a model scores zero, loudly
            outcome = dict(
                ess_per_epoch=0.0, ksd_squared=float("inf"), ksd_se=0.0, error=str(error)[:80]
            )
        outcome["seconds"] = time.perf_counter() - start
        rows[candidate] = outcome
        print(
            f"    {name}: {candidate} {outcome['ess_per_epoch']:.3g} ESS/epoch, KSD² "
            f"{outcome['ksd_squared']:.3g} ± {outcome['ksd_se']:.2g}, "
            f"{outcome['seconds']:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    rejected = bias_guard({c: (r["ksd_squared"], r["ksd_se"]) for c, r in rows.items()})
    for c, r in rows.items():
        r["rejected"] = rejected[c]
    admissible = {c: r for c, r in rows.items() if not r["rejected"]}
    best = max(admissible, key=lambda c: admissible[c]["ess_per_epoch"])

    def regret(choice: str) -> float:
        r = rows.get(choice)
        if r is None or r["rejected"]:
            return 1.0
        return 1.0 - r["ess_per_epoch"] / max(admissible[best]["ess_per_epoch"], 1e-300)

    picks = {}
    for strategy in ("rules", "pilot"):
        sampler = AutoSampler(
            module.model,
            strategy=strategy,
            pilot_options=dict(budget_epochs=budget, ksd_points=200),
        )
        try:
            picks[strategy] = sampler.decide(args, kwargs).kernel
        except ValueError as error:  # printed, and counted as regret 1
            print(f"    {name}: AutoSampler({strategy}) failed: {error}", file=sys.stderr)
            picks[strategy] = "failed"
    return dict(
        rows=rows,
        best=best,
        picks=picks,
        regret={s: regret(k) for s, k in picks.items()},
        N=info.data_size,
        n=n,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller data sets")
    parser.add_argument("--budget", type=float, default=20.0, help="epochs per candidate")
    parser.add_argument("--models", default="", help="comma-separated subset")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    models = suite(args.quick)
    chosen = [m for m in args.models.split(",") if m] or list(models)
    candidates = available_candidates()
    print(
        f"budget {args.budget:g} epochs per candidate, 2 chains; score = min bulk ESS / epoch; "
        "x = rejected by the KSD guard"
    )
    header = f"{'model':<24} " + " ".join(f"{c:>9}" for c in candidates)
    header += f" | {'best':>9} {'rules':>9} {'pilot':>9} {'regret r':>8} {'regret p':>8}"
    print(header)
    print("-" * len(header))
    for name in chosen:
        module, data_kwargs = models[name]
        started = time.perf_counter()
        out = run_model(name, module, data_kwargs, args.budget, args.seed)
        cells = []
        for c in candidates:
            r = out["rows"][c]
            cells.append(f"{r['ess_per_epoch']:>8.3g}{'x' if r['rejected'] else ' '}")
        print(
            f"{name:<24} "
            + " ".join(cells)
            + f" | {out['best']:>9} {out['picks']['rules']:>9} {out['picks']['pilot']:>9}"
            f" {out['regret']['rules']:>8.2f} {out['regret']['pilot']:>8.2f}",
            flush=True,
        )
        print(
            f"{'  KSD²':<24} "
            + " ".join(f"{out['rows'][c]['ksd_squared']:>9.2g}" for c in candidates)
            + f" | {time.perf_counter() - started:>7.0f} s",
            flush=True,
        )
        errors = {c: r["error"] for c, r in out["rows"].items() if "error" in r}
        for c, message in errors.items():
            print(f"    {c} failed: {message}")
        # drop this model's compiled executables: after ~7 models of ~12 kernels each the
        # process otherwise hit "LLVM compilation error: Cannot allocate memory" (RAM was free)
        jax.clear_caches()


if __name__ == "__main__":
    main()
