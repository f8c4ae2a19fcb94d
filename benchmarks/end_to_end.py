"""End-to-end speed from a cold start: every sampler on logistic regression, one process each.

    .venv/bin/python benchmarks/end_to_end.py                          # N = 1e4, 1e5, 1e6, float32
    .venv/bin/python benchmarks/end_to_end.py --sizes 10000 --dtype float32 --warmup 100 \\
        --draws 200 --samplers nuts sbps auto --no-warm                # a quick smoke run
    .venv/bin/python benchmarks/end_to_end.py --micro                  # block vs gather only
    .venv/bin/python benchmarks/end_to_end.py --profile sbps --sizes 1000000   # cold-start profile
    .venv/bin/python benchmarks/end_to_end.py --replot a.json b.json --plot out.png  # one plot

Model: ``pplsamplers.datasets.logistic_regression``, ``load_data(N, d=20, seed=0)`` cast to
``--dtype``.  Each (N, dtype, sampler) runs in its own fresh Python process, so every row
pays imports-excluded JAX start-up and all its compilations:

* **cold**: the persistent compilation cache off (``PPLSAMPLERS_NO_COMPILATION_CACHE=1``);
* **warm cache**: the same program run once before in a fresh process with
  :func:`pplsamplers.cache.enable_compilation_cache` on (a throw-away directory of this run),
  then measured in a third process: what a user's second session costs (``--no-warm`` skips).

Columns: ``wall`` is the wall clock from building the kernel (HMCECS's SVI MAP and
AutoSampler's decision included) and ``MCMC(...)`` to blocked draws; ``ESS/s`` = min ArviZ
bulk ESS over the 20 weights / wall; ``steady ESS/s``: the warmed-up kernel's ``sample`` in a
compiled ``lax.scan`` of as many draws (compilation and set-up excluded, as in
``boomerang_logreg.py``); ``ESS/ep``: min ESS per epoch, epochs = data evaluations / N with the
warmup counted at the sampling rate (``data_evals``; NUTS N per leapfrog step; HMCECS n per
step) and the set-up passes NOT counted (the adapter does not report them);
``s/prop``: steady seconds per proposal (per ``data_evals / n``); ``mean err`` =
max |Δmean| / sd, ``sd err`` = max |sd ratio − 1| against the reference: the stored NUTS runs
``tests/data/logreg_N<N>_nuts.json`` (4 × 2000 draws, float64) where they exist, else the
Laplace approximation at the float64 MAP (Newton), whose error is O(N^-1/2) sd, below 0.01
sd at N ≥ 1e6.

Cold-start profile (``--profile sbps --sizes 1000000``; the figures are in
``docs/benchmarks/end_to_end.md``; on a loaded 2-core machine read the split, not the seconds):

* ``setup`` (``pplsamplers.warmup.setup``, once per data set): ``inspect``, one
  permutation of the per-datum arrays, ``make_potential`` (one trace of the model, one
  validation pass), the mode search and its polish in the Laplace metric, ``posterior_scale``
  (the curvature from full-data passes), the mode probe for ``control_variate="auto"``,
  ``suggest_batch_size`` (the gradient-noise probe) and the Laplace check (vmapped full-data
  passes; a Gaussian variational fit follows only where the check fails);
* the sampling loop: NumPyro compiles ``fori_collect`` once for ``mcmc.run`` (warmup and
  sampling in one program); ``mcmc.warmup`` then ``mcmc.run`` compile it twice, once per
  length;
* the draws: NumPyro's vectorised ``postprocess_fn`` (one more compile);
* AutoSampler (``--profile auto``): above 5000 data its features run on the shared warmup's
  mode stage, which it hands to the chosen kernel's set-up, so the decision adds the
  features' probes to the chosen kernel's cold start.

The listener of ``jax.monitoring`` sums trace, lowering and backend-compile seconds; with
``--profile`` every XLA compile is listed, grouped by program name with its count
(``jax.log_compiles``).

Block versus gather (``--micro``): seconds per minibatch gradient at N = 1e6, d = 20, float32
for a random gather (``randint`` rows, the package's scheme before the shared warmup shuffled
the rows) and a contiguous block of pre-shuffled rows (``dynamic_slice`` at a uniform start,
wrapping circularly; the package now draws such blocks through the model's own gather,
``pplsamplers.model.shuffle``).  The block is
unbiased conditionally on the one shuffle: with the rows permuted once and the start drawn
uniformly on {0, ..., N − 1} with wrap-around (or on the N / n aligned blocks), every row is
in the block with probability exactly n / N, so (N / n) Σ_block f_i has expectation Σ f_i for
every permutation; a start uniform on {0, ..., N − n} without wrap-around is biased for a
fixed permutation (the first and last rows are under-weighted; it is unbiased only averaged
over permutations, which a chain never sees).  A fresh start per proposal keeps estimates
independent given the state (what PDMP thinning needs); sweeping blocks in order would not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# what `import pplsamplers` before JAX sets for users (pplsamplers/__init__.py); the workers
# inherit it, and JAX reads it at import ("0" here measures JAX's default instead)
os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
D = 20
DATA = ROOT / "tests" / "data"
REF_CACHE = Path(tempfile.gettempdir()) / "pplsamplers_end_to_end_refs"
ALL = (
    "nuts",
    "hmcecs",
    "sgld",
    "psgld",
    "csgld",
    "sgrld",
    "sgbd",
    "hamcmc",
    "bps",
    "sigmabps",
    "sbps",
    "psbps",
    "boomerang",
    "auto",
)


# ----------------------------------------------------------------- worker (one process)
def _compile_listener(totals: dict) -> None:
    import jax

    def on_duration(event: str, duration: float, **_: object) -> None:
        if event.startswith("/jax/core/compile/"):
            key = event.rsplit("/", 1)[-1].replace("_duration", "")
            totals[key] = totals.get(key, 0.0) + duration
            if key == "backend_compile":
                totals["compiles"] = totals.get("compiles", 0) + 1

    def on_event(event: str, **_: object) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            totals["cache_hits"] = totals.get("cache_hits", 0) + 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)


def _patch_timers(timers: dict) -> None:
    """Time the set-up steps by wrapping the names the adapter and AutoSampler call."""
    import importlib

    import jax

    import pplsamplers.select.auto as auto
    import pplsamplers.warmup as warmup

    stages = importlib.import_module("pplsamplers.warmup.setup")  # warmup.setup: the function

    def wrap(module, name):
        inner = getattr(module, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            out = inner(*args, **kwargs)
            try:
                jax.block_until_ready(out)
            except Exception:  # noqa: BLE001 - non-array leaves
                pass
            entry = timers.setdefault(name, [0.0, 0])
            entry[0] += time.perf_counter() - started
            entry[1] += 1
            return out

        setattr(module, name, timed)

    for name in (
        "inspect",
        "make_potential",
        "find_map",
        "posterior_scale",
        "count_modes",
        "suggest_batch_size",
    ):
        if hasattr(stages, name):
            wrap(stages, name)
    wrap(warmup, "setup")  # the adapter calls ``warmup.setup``: the whole shared warmup
    for name in ("model_features", "run_pilot"):
        wrap(auto, name)


def _compile_log(records: list) -> None:
    import logging
    import re

    import jax

    pattern = re.compile(r"Finished XLA compilation of (.+) in ([0-9.e+-]+) sec")

    class Grab(logging.Handler):
        def emit(self, record):
            match = pattern.search(record.getMessage())
            if match:
                records.append((match.group(1), float(match.group(2))))

    logging.getLogger("jax").addHandler(Grab())
    jax.config.update("jax_log_compiles", True)
    logging.getLogger("jax").setLevel(logging.WARNING)


def _build(name: str, model, args, kwargs, cfg: dict):
    """(kernel, run kwargs, extra fields, evals per draw from the extra fields)."""
    from numpyro.infer import HMCECS, NUTS, SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoDelta
    from numpyro.optim import Adam

    from pplsamplers import AutoSampler
    from pplsamplers.model import all_data_model
    from pplsamplers.registry import make_kernel

    N = args[0].shape[0]
    if name == "nuts":
        return NUTS(all_data_model(model)), {}, ("num_steps",), lambda e: N * e["num_steps"]
    if name == "hmcecs":
        import jax

        n = cfg["hmcecs_batch"] or max(1, N // 100)
        svi = SVI(model, AutoDelta(model), Adam(0.01), Trace_ELBO())
        fit = svi.run(jax.random.key(1), 3000, *args, subsample_size=n, progress_bar=False)
        proxy = HMCECS.taylor_proxy({"w": fit.params["w_auto_loc"]})
        kernel = HMCECS(NUTS(model), num_blocks=100, proxy=proxy)
        evals = lambda e: n * (e["hmc_state.num_steps"] + 2)  # noqa: E731
        return kernel, {"subsample_size": n}, ("hmc_state.num_steps",), evals
    if name == "auto":
        kernel = AutoSampler(model)
        decision = kernel.decide(args, kwargs)
        cfg["chosen"] = decision.kernel
        if decision.kernel == "nuts":
            return kernel, {}, ("num_steps",), lambda e: N * e["num_steps"]
        return kernel, {}, ("data_evals",), lambda e: e["data_evals"]
    return make_kernel(name, model), {}, ("data_evals",), lambda e: e["data_evals"]


def _steady(mcmc, args, kwargs, num_samples, evals_of, fields):
    """Seconds, draws and evals of the warmed-up kernel's ``sample`` in a compiled scan."""
    import jax

    kernel, state = mcmc.sampler, mcmc.last_state

    def field(carry, path):
        for part in path.split("."):
            carry = getattr(carry, part)
        return carry

    def loop(state, args, kwargs):
        def body(carry, _):
            carry = kernel.sample(carry, args, kwargs)
            return carry, (carry.z["w"], {f: field(carry, f) for f in fields})

        return jax.lax.scan(body, state, None, length=num_samples)[1]

    compiled = jax.jit(loop).lower(state, args, kwargs).compile()
    started = time.perf_counter()
    draws, extra = jax.block_until_ready(compiled(state, args, kwargs))
    return time.perf_counter() - started, draws, _total_evals(evals_of, extra)


def _total_evals(evals_of, extra) -> float:
    """Σ data evaluations, in float64: N · num_steps summed over draws overflows int32."""
    import numpy as np

    as_float = {k: np.asarray(v, np.float64) for k, v in extra.items()}
    return float(np.sum(evals_of(as_float)))


def _min_ess(draws) -> float:
    import arviz as az
    import numpy as np

    return float(np.min(az.ess(np.asarray(draws))))


def worker(cfg: dict) -> dict:
    import jax

    if cfg["dtype"] == "float64":
        jax.config.update("jax_enable_x64", True)
    from pplsamplers.cache import enable_compilation_cache

    cache_dir = enable_compilation_cache() if cfg["cache"] else None
    totals, timers, compiles = {}, {}, []
    _compile_listener(totals)
    if cfg["profile"]:
        _compile_log(compiles)
    import jax.numpy as jnp
    import numpy as np
    from numpyro.infer import MCMC

    from pplsamplers.datasets import logistic_regression as lr

    _patch_timers(timers)
    N, name = cfg["N"], cfg["sampler"]
    (X, y), kwargs = lr.load_data(N=N, d=D, seed=0)
    args = jax.block_until_ready((jnp.asarray(X, cfg["dtype"]), jnp.asarray(y, cfg["dtype"])))
    before = dict(totals)
    started = time.perf_counter()
    kernel, run_kwargs, fields, evals_of = _build(name, lr.model, args, kwargs, cfg)
    built = time.perf_counter()
    chains = cfg["chains"]
    exact = name in ("nuts", "hmcecs") or cfg.get("chosen") == "nuts"
    warmup, draws = (cfg["warmup"], cfg["draws"]) if exact else (cfg["sg_warmup"], cfg["sg_draws"])
    mcmc = MCMC(
        kernel,
        num_warmup=warmup,
        num_samples=draws,
        num_chains=chains,
        chain_method=cfg["chain_method"],
        progress_bar=False,
    )
    mcmc.run(jax.random.key(cfg["seed"]), *args, extra_fields=fields, **run_kwargs)
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))["w"]
    extra = jax.block_until_ready(mcmc.get_extra_fields(group_by_chain=True))
    wall = time.perf_counter() - started
    compile_s = {k: v - before.get(k, 0) for k, v in totals.items()}
    samples = np.asarray(samples, np.float64)
    sampling_evals = _total_evals(evals_of, extra)
    evals = sampling_evals * (1 + warmup / draws)
    estimator = getattr(getattr(kernel, "delegate", None) or kernel, "estimator", None)
    n = int(estimator.n) if estimator is not None and hasattr(estimator, "n") else None
    if name == "hmcecs":
        n = run_kwargs["subsample_size"]
    if exact and name == "nuts" or cfg.get("chosen") == "nuts":
        n = N
    inner = getattr(kernel, "delegate", None) or kernel
    setup = getattr(inner, "setup", None)
    out = {
        **{k: cfg[k] for k in ("N", "dtype", "sampler", "chains", "chain_method", "cache")},
        "chosen": cfg.get("chosen"),
        "cache_dir": cache_dir,
        "warmup": warmup,
        "draws": draws,
        "wall": wall,
        "build": built - started,
        "min_ess": _min_ess(samples),
        "mean": samples.reshape(-1, D).mean(0).tolist(),
        "sd": samples.reshape(-1, D).std(0, ddof=1).tolist(),
        "epochs": evals / N,
        "n": n,
        "notes": dict(setup.notes) if setup is not None else {},
        "compile": compile_s,
        "timers": timers,
        "compiles": sorted(compiles, key=lambda c: -c[1]),
    }
    if chains == 1 and cfg["steady"]:
        try:
            seconds, steady_draws, steady_evals = _steady(
                mcmc, args, run_kwargs, draws, evals_of, fields
            )
        except jax.errors.JAXTypeError as error:  # HMCECS's sample is not traceable as a whole
            out["steady_error"] = type(error).__name__
            return out
        out["steady_s"] = seconds
        out["steady_ess"] = _min_ess(np.asarray(steady_draws)[None])
        if n:
            out["s_per_prop"] = seconds / max(steady_evals / n, 1.0)
    return out


# ----------------------------------------------------------------------- references
def laplace_reference(N: int) -> dict:
    """Mean and sd of the Laplace approximation at the float64 MAP (Newton, chunked)."""
    import numpy as np

    from pplsamplers.datasets import logistic_regression as lr

    (X, y), _ = lr.load_data(N=N, d=D, seed=0)
    X, y = np.asarray(X), np.asarray(y, np.float64)
    w = np.zeros(D)
    for _ in range(50):
        grad, hess = w.copy(), np.eye(D)
        for s in range(0, N, 1_000_000):
            Xc = X[s : s + 1_000_000].astype(np.float64)
            p = 1 / (1 + np.exp(-(Xc @ w)))
            grad += Xc.T @ (p - y[s : s + 1_000_000])
            hess += (Xc * (p * (1 - p))[:, None]).T @ Xc
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-12:
            break
    return {"mean": w.tolist(), "sd": np.sqrt(np.diag(np.linalg.inv(hess))).tolist()}


def reference(N: int) -> tuple[dict, str]:
    stored = DATA / f"logreg_N{N}_nuts.json"
    if stored.exists():
        return json.loads(stored.read_text()), f"NUTS 4x2000 float64 ({stored.name})"
    REF_CACHE.mkdir(parents=True, exist_ok=True)
    path = REF_CACHE / f"laplace_N{N}.json"
    if not path.exists():
        out = _spawn(["--laplace", str(N)], os.environ.copy())
        path.write_text(json.dumps(out))
    return json.loads(path.read_text()), "Laplace at the float64 MAP"


# --------------------------------------------------------------------- micro-benchmark
def _per_gradient(n: int, N: int, X, y, Xs, ys, steps: int) -> dict:
    """Best of three seconds per minibatch gradient, gather and block, batch size ``n``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    Xp = jnp.asarray(np.concatenate([Xs, Xs[:n]]))  # wrap-around: n extra rows
    yp = jnp.asarray(np.concatenate([ys, ys[:n]]))

    def nll(w, Xb, yb):
        logits = Xb @ w
        return (N / n) * jnp.sum(jnp.logaddexp(0.0, logits) - yb * logits)

    def gather(key, Xa, ya):
        idx = jax.random.randint(key, (n,), 0, N)
        return Xa[idx], ya[idx]

    def block(key, Xa, ya):
        start = jax.random.randint(key, (), 0, N)
        return (
            jax.lax.dynamic_slice_in_dim(Xa, start, n),
            jax.lax.dynamic_slice_in_dim(ya, start, n),
        )

    out = {}
    for label, pick, Xa, ya in (("gather", gather, X, y), ("block", block, Xp, yp)):

        def loop(key, Xa, ya, pick=pick):
            def body(w, key):
                g = jax.grad(nll)(w, *pick(key, Xa, ya))
                return w - 1e-7 * g, None

            return jax.lax.scan(body, jnp.zeros(D, Xa.dtype), jax.random.split(key, steps))[0]

        compiled = jax.jit(loop).lower(jax.random.key(0), Xa, ya).compile()
        jax.block_until_ready(compiled(jax.random.key(0), Xa, ya))
        best = math.inf
        for rep in range(3):
            started = time.perf_counter()
            jax.block_until_ready(compiled(jax.random.key(rep + 1), Xa, ya))
            best = min(best, (time.perf_counter() - started) / steps)
        out[f"{label} n={n}"] = best
    return out


def micro(N: int = 1_000_000, sizes: tuple[int, ...] = (100, 1000), steps: int = 2000) -> dict:
    """Seconds per minibatch gradient: random row gather against a circular contiguous block
    of pre-shuffled rows (module docstring), and one full-data gradient for scale."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pplsamplers.datasets import logistic_regression as lr

    (X, y), _ = lr.load_data(N=N, d=D, seed=0)
    perm = np.random.default_rng(1).permutation(N)
    Xs, ys = np.asarray(X)[perm], np.asarray(y)[perm]
    results = {}
    for n in sizes:
        results.update(_per_gradient(n, N, X, y, Xs, ys, steps))
    nll = lambda w, X, y: jnp.sum(jnp.logaddexp(0.0, X @ w) - y * (X @ w))  # noqa: E731
    full = jax.jit(jax.grad(nll))
    w0 = jnp.zeros(D, X.dtype)
    jax.block_until_ready(full(w0, X, y))
    started = time.perf_counter()
    for _ in range(10):
        jax.block_until_ready(full(w0, X, y))
    results["full pass"] = (time.perf_counter() - started) / 10
    return results


# ------------------------------------------------------------------------------ parent
def _spawn(argv: list[str], env: dict, timeout: float | None = None) -> dict:
    """Run this script with ``argv`` in a fresh process; its last ``RESULT`` line, or the
    failure as ``{"error": ...}``."""
    try:
        proc = subprocess.run(
            [sys.executable, __file__, *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    if proc.returncode in (-9, 137) or any("RESOURCE_EXHAUSTED" in t for t in tail):
        return {"error": "out of memory"}
    return {"error": f"exit {proc.returncode}: {' | '.join(tail)[-300:]}"}


def _available_bytes() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return float(line.split()[1]) * 1024
    return math.inf


def measure(cfg: dict, cache_dir: str, warm: bool, timeout: float) -> dict:
    """The cold row, and the warm-cache wall if ``warm`` (pre-warm, then measure)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    itemsize = 4 if cfg["dtype"] == "float32" else 8
    if cfg["sampler"] == "hmcecs" and 4 * cfg["N"] * D * D * itemsize > 0.5 * _available_bytes():
        need = 4 * cfg["N"] * D * D * itemsize / 2**30
        return {**cfg, "error": f"out of memory (Taylor proxy needs ~{need:.0f} GiB)"}
    cold = _spawn(
        ["--worker", json.dumps({**cfg, "cache": False})],
        {**env, "PPLSAMPLERS_NO_COMPILATION_CACHE": "1"},
        timeout,
    )
    if warm and "error" not in cold:
        env = {**env, "PPLSAMPLERS_CACHE_DIR": cache_dir}
        env.pop("PPLSAMPLERS_NO_COMPILATION_CACHE", None)
        quick = {**cfg, "cache": True, "steady": False}
        _spawn(["--worker", json.dumps(quick)], env, timeout)
        again = _spawn(["--worker", json.dumps(quick)], env, timeout)
        cold["warm_wall"] = again.get("wall")
        cold["warm_ess_s"] = again["min_ess"] / again["wall"] if "wall" in again else None
    return {**cfg, **cold}


def _label(r: dict) -> str:
    label = r["sampler"] + (f"->{r['chosen']}" if r.get("chosen") else "")
    return label + (f" x{r['chains']} {r['chain_method'][:3]}" if r["chains"] > 1 else "")


def print_table(rows: list[dict], ref: dict, ref_name: str, nuts: dict | None) -> None:
    import numpy as np

    r0 = rows[0]
    print(f"\n== N = {r0['N']}, d = {D}, {r0['dtype']}, reference: {ref_name} ==")
    head = (
        f"{'sampler':<24}{'n':>6}{'wall':>7}{'warm':>7}{'ESS':>7}{'ESS/s':>8}{'xNUTS':>6}"
        f"{'steady':>8}{'xNUTS':>6}{'ESS/ep':>8}{'s/prop':>9}{'mean':>6}{'sd':>6}"
    )
    print(head + "\n" + "-" * len(head))
    ref_mean, ref_sd = np.asarray(ref["mean"]), np.asarray(ref["sd"])
    for r in rows:
        if "error" in r:
            print(f"{_label(r):<24}  {r['error']}")
            continue
        mean, sd = np.asarray(r["mean"]), np.asarray(r["sd"])
        r["mean_err"] = float(np.max(np.abs(mean - ref_mean) / ref_sd))
        r["sd_err"] = float(np.max(np.abs(sd / ref_sd - 1)))
        r["ess_s"] = r["min_ess"] / r["wall"]
        steady = r["steady_ess"] / r["steady_s"] if "steady_s" in r else None
        r["steady_ess_s"] = steady
        base = nuts if nuts and "error" not in nuts else None
        x = f"{r['ess_s'] / (base['min_ess'] / base['wall']):.1f}" if base else "-"
        xs = (
            f"{steady / (base['steady_ess'] / base['steady_s']):.1f}"
            if base and steady and "steady_s" in base
            else "-"
        )
        warm = f"{r['warm_wall']:.1f}" if r.get("warm_wall") else "-"
        print(
            f"{_label(r):<24}{r['n'] or 0:>6}{r['wall']:>7.1f}{warm:>7}{r['min_ess']:>7.0f}"
            f"{r['ess_s']:>8.1f}{x:>6}{f'{steady:.0f}' if steady else '-':>8}{xs:>6}"
            f"{r['min_ess'] / max(r['epochs'], 1e-9):>8.2f}{r.get('s_per_prop', math.nan):>9.1e}"
            f"{r['mean_err']:>6.2f}{r['sd_err']:>6.2f}"
        )


def print_profile(r: dict) -> None:
    print(f"\n-- cold-start profile: {_label(r)}, N = {r['N']}, {r['dtype']} --")
    print(f"wall {r['wall']:.2f} s; kernel construction (SVI / decide) {r['build']:.2f} s")
    for name, (seconds, calls) in sorted(r["timers"].items(), key=lambda t: -t[1][0]):
        print(f"  {name:<20}{seconds:>7.2f} s  ({calls} call{'s' * (calls > 1)})")
    c = r["compile"]
    print(
        "  JAX: trace {:.2f} s, lower {:.2f} s, XLA compile {:.2f} s over {} compiles, "
        "{} cache hits".format(
            c.get("jaxpr_trace", 0),
            c.get("jaxpr_to_mlir_module", 0),
            c.get("backend_compile", 0),
            c.get("compiles", 0),
            c.get("cache_hits", 0),
        )
    )
    programs: dict[str, list[float]] = {}
    for fun, seconds in r["compiles"]:
        programs.setdefault(fun, []).append(seconds)
    print(f"  every program compiled ({len(programs)} names, {len(r['compiles'])} compiles):")
    for fun, times in sorted(programs.items(), key=lambda item: -sum(item[1])):
        print(f"    compile {sum(times):6.2f} s  {len(times):3d} ×  {fun}")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    names = sorted({_label(r) for r in rows if r["chains"] == 1})
    dtypes = sorted({r["dtype"] for r in rows})
    for color, name in enumerate(names):
        for dtype in dtypes:  # one line per sampler and dtype: float32 solid, float64 dashed
            pts = sorted(
                (r["N"], r["ess_s"])
                for r in rows
                if _label(r) == name and r["dtype"] == dtype and r.get("ess_s")
            )
            if pts:
                label = name if len(dtypes) == 1 else f"{name} {dtype}"
                style = "--" if dtype == "float64" else "-"
                ax.plot(*zip(*pts, strict=True), style, marker="o", color=f"C{color}", label=label)
    ax.set(xscale="log", yscale="log", xlabel="N", ylabel="min ESS / s (end to end, cold)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot: {path} ({path.stat().st_size // 1024} KB)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--dtype", nargs="*", default=["float32"], choices=["float32", "float64"])
    p.add_argument("--samplers", nargs="*", default=list(ALL), choices=ALL)
    p.add_argument("--warmup", type=int, default=500, help="NUTS / HMCECS warmup")
    p.add_argument("--draws", type=int, default=1000, help="NUTS / HMCECS draws")
    p.add_argument("--sg-warmup", type=int, default=500, help="minibatch kernels' warmup")
    p.add_argument("--sg-draws", type=int, default=2000, help="minibatch kernels' draws")
    p.add_argument("--chains-compare", nargs="*", default=["sbps", "sgld"], choices=ALL)
    p.add_argument("--hmcecs-batch", type=int, default=None, help="HMCECS n (N / 100)")
    p.add_argument("--no-warm", action="store_true", help="skip the warm-cache column")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--micro", action="store_true", help="block vs gather only")
    p.add_argument("--micro-n", type=int, default=1_000_000, help="N of --micro")
    p.add_argument("--profile", choices=ALL, help="profile one sampler's cold start")
    p.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "end_to_end.png")
    p.add_argument("--json", type=Path, default=None, help="write all rows here")
    p.add_argument(
        "--replot", type=Path, nargs="*", help="only plot the rows of these --json files"
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--laplace", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))), flush=True)
        return
    if args.laplace:
        print("RESULT " + json.dumps(laplace_reference(args.laplace)), flush=True)
        return
    if args.replot:  # runs measured separately (one N each) on one plot
        plot([row for path in args.replot for row in json.loads(path.read_text())], args.plot)
        return
    print(f"machine: {os.cpu_count()} cores; load {os.getloadavg()}")
    if args.micro:
        out = micro(N=args.micro_n)
        for key, seconds in out.items():
            print(f"{key:<16}{seconds * 1e6:>10.1f} us")
        return
    base = {
        "seed": 0,
        "warmup": args.warmup,
        "draws": args.draws,
        "sg_warmup": args.sg_warmup,
        "sg_draws": args.sg_draws,
        "hmcecs_batch": args.hmcecs_batch,
        "steady": True,
        "profile": False,
        "chains": 1,
        "chain_method": "sequential",
    }
    cache_dir = tempfile.mkdtemp(prefix="pplsamplers_e2e_cache_")
    if args.profile:
        for N in args.sizes:
            for dtype in args.dtype:
                cfg = {**base, "N": N, "dtype": dtype, "sampler": args.profile, "profile": True}
                r = measure(cfg, cache_dir, warm=False, timeout=args.timeout)
                print(r["error"]) if "error" in r else print_profile(r)
        return
    rows = []
    for N in args.sizes:
        ref, ref_name = reference(N)
        for dtype in args.dtype:
            block = []
            for name in args.samplers:
                cfg = {**base, "N": N, "dtype": dtype, "sampler": name}
                block.append(measure(cfg, cache_dir, not args.no_warm, args.timeout))
                print(f"  done {name} ({N}, {dtype}, load {os.getloadavg()[0]:.1f})", flush=True)
            for name in args.chains_compare:
                for method in ("vectorized", "sequential"):
                    cfg = {**base, "N": N, "dtype": dtype, "sampler": name, "chains": 4}
                    cfg.update(chain_method=method, steady=False)
                    block.append(measure(cfg, cache_dir, False, args.timeout))
            nuts = next((r for r in block if r["sampler"] == "nuts" and r["chains"] == 1), None)
            print_table(block, ref, ref_name, nuts)
            rows += block
    good = [r for r in rows if "error" not in r]
    if good:
        plot(good, args.plot)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
