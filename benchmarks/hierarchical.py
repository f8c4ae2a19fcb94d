"""Mixed models at scale: every sampler at its defaults, and AutoSampler, against NumPyro NUTS.

    .venv/bin/python benchmarks/hierarchical.py                          # every configuration
    .venv/bin/python benchmarks/hierarchical.py --configs logit-1e5-1e3 --samplers boomerang
    .venv/bin/python benchmarks/hierarchical.py --configs logit-1e5-1e3 --subsample-size 1000

Models: ``models/mixed_glm.py`` (varying-intercept logistic and Poisson-with-exposure GLMMs, one
varying-slope logistic), lognormal group sizes from 1 row to a few percent of N, raw covariates,
non-centred group effects as NumPyro's examples write them, float32 data.  Configurations are
``<family>-<N>-<groups>`` (``CONFIGS``).

Reference: NumPyro NUTS on the same model and data (a dense mass matrix up to
``DENSE_UP_TO`` latents, diagonal beyond), 2 chains × (1000 warmup + 2000 draws) by default
(``--reference-warmup``, ``--reference-draws``), cached as JSON in ``--cache``; its own run is
the NUTS row (its ESS/s does not depend on the number of draws).  Each sampler then runs in a fresh process
(all its compilations and its set-up counted): ``MCMC(kernel, num_warmup, num_samples,
num_chains=2, chain_method="vectorized")``.

Columns: ``n`` the minibatch; ``wall`` seconds from building the kernel to blocked draws
(cold start); ``ESS`` the minimum ArviZ bulk ESS over every latent coordinate; ``ESS/s`` =
ESS / wall; ``steady`` = ESS of a second, already compiled run of the warmed-up chains /
its seconds; ``ESS/ep`` = ESS per epoch (data evaluations / N over the whole run, set-up not
counted); ``glob`` max |Δmean| / sd and ``sd`` max |sd ratio − 1| over the global latents;
``u rms`` the root mean square over the group effects of |Δmean| / sd; ``ok`` when within
0.25, 0.30 and 0.15; ``warn`` when the run issued a self-check warning; ``×NUTS`` the ratio of
end-to-end ESS/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONFIGS = {
    "logit-1e5-1e3": {"family": "logistic", "N": 100_000, "num_groups": 1_000},
    "logit-1e5-1e4": {"family": "logistic", "N": 100_000, "num_groups": 10_000},
    "logit-1e6-1e3": {"family": "logistic", "N": 1_000_000, "num_groups": 1_000},
    "poisson-1e5-1e3": {"family": "poisson", "N": 100_000, "num_groups": 1_000},
    "poisson-1e6-1e3": {"family": "poisson", "N": 1_000_000, "num_groups": 1_000},
    "slope-1e5-1e3": {"family": "logistic", "N": 100_000, "num_groups": 1_000, "slope": True},
}
SAMPLERS = ("sgld", "sgbd", "hamcmc", "bps", "boomerang", "sbps", "auto")
GLOBALS = ("alpha", "beta", "tau", "tau_slope")
GROUP_SITES = ("z", "z_slope")
DENSE_UP_TO = 200
"""NUTS adapts a dense mass matrix up to this many latents: at D = 1005 (N = 10⁵) a run with a
dense one adapted in 1000 warmup draws had not finished after 50 min, where the diagonal one
takes about 10."""
MEAN_TOL, SD_TOL, GROUP_TOL = 0.25, 0.30, 0.15


def load(config: str) -> tuple:
    from models import mixed_glm

    spec = dict(CONFIGS[config])
    return mixed_glm.model, *mixed_glm.load_data(**spec)


def _flat(samples: dict, sites: tuple) -> dict:
    """``{site: (chains, draws, size)}`` of the named sites present."""
    import numpy as np

    out = {}
    for site in sites:
        if site in samples:
            value = np.asarray(samples[site], np.float64)
            out[site] = value.reshape(value.shape[0], value.shape[1], -1)
    return out


def _summary(samples: dict) -> dict:
    """Means, sds and min bulk ESS of the global and group sites (chains first)."""
    import arviz as az
    import numpy as np

    flat = _flat(samples, GLOBALS + GROUP_SITES)
    ess = min(float(np.min(az.ess(v))) for v in flat.values())
    moments = {
        site: [v.mean((0, 1)).tolist(), v.std((0, 1), ddof=1).tolist()] for site, v in flat.items()
    }
    return {"moments": moments, "min_ess": ess}


def _evals(extra: dict, N: int) -> float:
    """Data evaluations of the run's sampling phase (NUTS: N per leapfrog step)."""
    import numpy as np

    if "data_evals" in extra:
        return float(np.sum(np.asarray(extra["data_evals"], np.float64)))
    return float(np.sum(np.asarray(extra["num_steps"], np.float64))) * N


def nuts_reference(config: str, cache: Path, warmup: int, draws: int) -> dict:
    """The NUTS run of ``config`` (module docstring), cached."""
    path = cache / f"{config}_nuts_{warmup}_{draws}.json"
    if path.exists():
        return json.loads(path.read_text())
    import jax
    from numpyro.infer import MCMC, NUTS

    model, args, kwargs = load(config)
    args = jax.block_until_ready(args)
    started = time.perf_counter()
    dim = kwargs["num_groups"] * (2 if kwargs.get("slope") else 1) + 6
    kernel = NUTS(model, dense_mass=dim <= DENSE_UP_TO)
    mcmc = MCMC(
        kernel, num_warmup=warmup, num_samples=draws, num_chains=2,
        chain_method="vectorized", progress_bar=False,
    )  # fmt: skip
    mcmc.run(jax.random.key(1), *args, extra_fields=("num_steps",), **kwargs)
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    wall = time.perf_counter() - started
    N = args[0].shape[0]
    result = {
        "sampler": "nuts",
        "wall": wall,
        "n": N,
        "epochs": _evals(mcmc.get_extra_fields(), N) * (1 + warmup / draws) / N,
        **_summary(samples),
    }
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def worker(cfg: dict) -> dict:
    """One sampler on one configuration, in this fresh process (module docstring)."""
    import jax
    import numpy as np
    from numpyro.infer import MCMC

    from pplsamplers import AutoSampler, SelfCheckWarning
    from pplsamplers.registry import make_kernel

    model, args, kwargs = load(cfg["config"])
    args = jax.block_until_ready(args)
    N, name = args[0].shape[0], cfg["sampler"]
    options = {} if cfg["subsample_size"] is None else {"subsample_size": cfg["subsample_size"]}
    started = time.perf_counter()
    kernel = (
        AutoSampler(model, **options) if name == "auto" else make_kernel(name, model, **options)
    )
    mcmc = MCMC(
        kernel, num_warmup=cfg["warmup"], num_samples=cfg["draws"], num_chains=2,
        chain_method="vectorized", progress_bar=False,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.key(cfg["seed"]), *args, **kwargs)
        samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    wall = time.perf_counter() - started
    extra = mcmc.get_extra_fields()
    inner = getattr(kernel, "delegate", None) or kernel
    chosen = kernel.decision.kernel if name == "auto" else name
    exact = chosen == "nuts"
    n = N if exact else int(inner.estimator.n)
    if exact or "data_evals" in extra or "num_steps" in extra:
        epochs = _evals(extra, N) * (1 + cfg["warmup"] / cfg["draws"]) / N
    else:
        epochs = float("nan")
    # steady state: the warmed-up chains again, the sampling loop already compiled
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(jax.random.key(cfg["seed"] + 1), *args, **kwargs)  # compiles the loop
    mcmc.post_warmup_state = mcmc.last_state
    again = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(cfg["seed"] + 2), *args, **kwargs)
        steady = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    steady_s = time.perf_counter() - again
    checks = [str(w.message) for w in caught if issubclass(w.category, SelfCheckWarning)]
    notes = dict(getattr(inner, "setup", None).notes) if hasattr(inner, "setup") else {}
    return {
        "sampler": name,
        "chosen": chosen,
        "wall": wall,
        "n": n,
        "epochs": epochs,
        "steady_s": steady_s,
        "steady_ess": _summary(steady)["min_ess"],
        "warnings": checks,
        "notes": notes,
        **_summary(samples),
        "finite": bool(all(np.all(np.isfinite(np.asarray(v))) for v in samples.values())),
    }


def accuracy(row: dict, reference: dict) -> dict:
    """Global and group-effect errors of ``row`` against the NUTS ``reference``."""
    import numpy as np

    glob, sd, groups = 0.0, 0.0, []
    for site, (mean, sds) in reference["moments"].items():
        got_mean, got_sd = (np.asarray(a) for a in row["moments"][site])
        mean, sds = np.asarray(mean), np.asarray(sds)
        if site in GLOBALS:
            glob = max(glob, float(np.max(np.abs(got_mean - mean) / sds)))
            sd = max(sd, float(np.max(np.abs(got_sd / sds - 1))))
        else:
            groups.append((got_mean - mean) / sds)
    rms = float(np.sqrt(np.mean(np.concatenate(groups) ** 2)))
    ok = glob <= MEAN_TOL and sd <= SD_TOL and rms <= GROUP_TOL
    return {"glob": glob, "sd": sd, "rms": rms, "ok": ok}


def _spawn(cfg: dict, timeout: float) -> dict:
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps(cfg)],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"sampler": cfg["sampler"], "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
    return {"sampler": cfg["sampler"], "error": f"exit {proc.returncode}: {tail[-300:]}"}


def print_table(config: str, rows: list[dict], nuts: dict) -> None:
    header = (
        f"{'sampler':>16} {'n':>8} {'wall':>7} {'ESS':>6} {'ESS/s':>7} {'steady':>7} "
        f"{'ESS/ep':>7} {'glob':>6} {'sd':>6} {'u rms':>6} {'ok':>4} {'warn':>5} {'×NUTS':>6}"
    )
    print(f"\n{config}\n{header}")
    nuts_rate = nuts["min_ess"] / nuts["wall"]
    for row in [nuts, *rows]:
        if "error" in row:
            print(f"{row['sampler']:>16}  {row['error']}")
            continue
        label = row["sampler"] + (
            f"->{row['chosen']}" if row.get("chosen") not in (None, row["sampler"]) else ""
        )
        rate = row["min_ess"] / row["wall"]
        steady = row["steady_ess"] / row["steady_s"] if "steady_s" in row else float("nan")
        acc = row.get("accuracy", {"glob": 0.0, "sd": 0.0, "rms": 0.0, "ok": True})
        print(
            f"{label:>16} {row['n']:>8} {row['wall']:>7.1f} {row['min_ess']:>6.0f} "
            f"{rate:>7.2f} {steady:>7.2f} {row['min_ess'] / row['epochs']:>7.2f} "
            f"{acc['glob']:>6.3f} {acc['sd']:>6.3f} {acc['rms']:>6.3f} "
            f"{'ok' if acc['ok'] else 'MISS':>4} {'warn' if row.get('warnings') else '-':>5} "
            f"{rate / nuts_rate:>6.1f}"
        )
    for row in rows:
        for message in row.get("warnings", [])[:1]:
            print(f"  {row['sampler']}: {message[:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--reference-warmup", type=int, default=1000)
    parser.add_argument("--reference-draws", type=int, default=2000)
    parser.add_argument("--subsample-size", type=int, default=None)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".hierarchical")
    parser.add_argument("--out", type=Path, default=None, help="write every row as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))))
        return
    results = {}
    for config in args.configs:
        nuts = nuts_reference(config, args.cache, args.reference_warmup, args.reference_draws)
        rows = []
        for sampler in args.samplers:
            cfg = {
                "config": config, "sampler": sampler, "warmup": args.warmup,
                "draws": args.draws, "seed": args.seed, "subsample_size": args.subsample_size,
            }  # fmt: skip
            row = _spawn(cfg, args.timeout)
            if "error" not in row:
                row["accuracy"] = accuracy(row, nuts)
            rows.append(row)
        print_table(config, rows, nuts)
        results[config] = {"nuts": nuts, "rows": rows}
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
