"""The runner shared by the benchmarks that compare every sampler with NumPyro NUTS on one
model family (``hierarchical.py``, ``enumeration.py``).

A :class:`Suite` names the configurations, how to load one, and which latent sites are
global (judged by max |Δmean|/sd and max |sd ratio − 1|) and which are group effects (judged
by the root mean square of |Δmean|/sd).  :func:`main` runs NumPyro NUTS once per
configuration (cached as JSON; that run is the NUTS row), then each sampler in a fresh
process (cold start: every compilation and the set-up counted) as ``MCMC(kernel,
num_warmup, num_samples, num_chains=2, chain_method="vectorized")``, and prints one table
per configuration.

Columns: ``n`` the minibatch; ``wall`` seconds from building the kernel to blocked draws
(cold start); ``ESS`` the minimum ArviZ bulk ESS over every judged coordinate; ``ESS/s`` =
ESS / wall; ``steady`` = ESS of a second, already compiled run of the warmed-up chains / its
seconds; ``ESS/ep`` = ESS per epoch (data evaluations / N over the whole run, set-up not
counted); ``glob`` and ``sd`` the global latents' errors; ``u rms`` the group effects' (0
without any); ``ok`` when within 0.25, 0.30 and 0.15; ``warn`` when the run issued a
self-check warning; ``×NUTS`` the ratio of end-to-end ESS/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLERS = ("sgld", "sgbd", "hamcmc", "bps", "boomerang", "sbps", "auto")
"""A suite's default samplers; ``--samplers`` takes any registry name besides NUTS."""
DENSE_UP_TO = 200
"""NUTS adapts a dense mass matrix up to this many latents: at D = 1005 (N = 10⁵) a run with a
dense one adapted in 1000 warmup draws had not finished after 50 min, where the diagonal one
takes about 10."""
MEAN_TOL, SD_TOL, GROUP_TOL = 0.25, 0.30, 0.15


class Reference(NamedTuple):
    """How NUTS samples a configuration whose model, as written, it cannot sample in a session:
    another parameterisation of the same posterior, its mass-matrix blocks, and the map from
    its draws back to the judged sites.  Its run is then both the reference and the NUTS row:
    NUTS as an expert would set it up, a stricter comparison than NUTS on the model as written.
    """

    label: str  # names the cache file and the NUTS row
    load: Callable[[], tuple]  # () -> (model, args, kwargs)
    dense_mass: bool | list  # NumPyro's ``dense_mass``: True, False or blocks of site names
    judged: Callable[[dict], dict]  # its draws (chains first) -> the judged sites' draws


class Suite(NamedTuple):
    """One benchmark: its configurations and how each is loaded and judged."""

    script: str  # the benchmark's file: each worker runs it again with --worker
    configs: dict[str, dict]
    load: Callable[[str], tuple]  # config -> (model, args, kwargs)
    dim: Callable[[str], int]  # config -> number of latents (NUTS's dense mass up to 200)
    globals: tuple[str, ...]
    groups: tuple[str, ...] = ()
    samplers: tuple[str, ...] = SAMPLERS
    cache: str = ".benchmark"  # the reference's cache folder, under benchmarks/
    start: Callable[[str], dict | None] = lambda config: None  # NUTS's initial values
    reference: Callable[[str], Reference | None] = lambda config: None  # NUTS's, where not as run


def _flat(samples: dict, sites: tuple) -> dict:
    """``{site: (chains, draws, size)}`` of the named sites present."""
    import numpy as np

    out = {}
    for site in sites:
        if site in samples:
            value = np.asarray(samples[site], np.float64)
            out[site] = value.reshape(value.shape[0], value.shape[1], -1)
    return out


def _summary(samples: dict, sites: tuple) -> dict:
    """Means, sds and min bulk ESS of the named sites (chains first)."""
    import arviz as az
    import numpy as np

    flat = _flat(samples, sites)
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


def nuts_reference(suite: Suite, config: str, cache: Path, warmup: int, draws: int) -> dict:
    """The NUTS run of ``config`` (module docstring), cached."""
    other = suite.reference(config)
    label = "nuts" if other is None else f"nuts-{other.label}"
    path = cache / f"{config}_{label}_{warmup}_{draws}.json"
    if path.exists():
        return json.loads(path.read_text())
    import jax
    from numpyro.infer import MCMC, NUTS, init_to_uniform, init_to_value

    model, args, kwargs = suite.load(config) if other is None else other.load()
    args = jax.block_until_ready(args)
    started = time.perf_counter()
    start = suite.start(config)
    init = init_to_uniform if start is None else init_to_value(values=start)
    dense = suite.dim(config) <= DENSE_UP_TO if other is None else other.dense_mass
    kernel = NUTS(model, dense_mass=dense, init_strategy=init)
    mcmc = MCMC(
        kernel, num_warmup=warmup, num_samples=draws, num_chains=2,
        chain_method="vectorized", progress_bar=False,
    )  # fmt: skip
    mcmc.run(jax.random.key(1), *args, extra_fields=("num_steps",), **kwargs)
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    wall = time.perf_counter() - started
    if other is not None:
        samples = other.judged(samples)
    N = args[0].shape[0]
    result = {
        "sampler": label,
        "wall": wall,
        "n": N,
        "epochs": _evals(mcmc.get_extra_fields(), N) * (1 + warmup / draws) / N,
        **_summary(samples, suite.globals + suite.groups),
    }
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def worker(suite: Suite, cfg: dict) -> dict:
    """One sampler on one configuration, in this fresh process (module docstring)."""
    import jax
    import numpy as np
    from numpyro.infer import MCMC

    from pplsamplers import AutoSampler, SelfCheckWarning
    from pplsamplers.registry import make_kernel

    model, args, kwargs = suite.load(cfg["config"])
    args = jax.block_until_ready(args)
    N, name = args[0].shape[0], cfg["sampler"]
    sites = suite.globals + suite.groups
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
    n = N if chosen == "nuts" else int(inner.estimator.n)
    if "data_evals" in extra or "num_steps" in extra:
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
        "steady_ess": _summary(steady, sites)["min_ess"],
        "warnings": checks,
        "notes": notes,
        **_summary(samples, sites),
        "finite": bool(all(np.all(np.isfinite(np.asarray(v))) for v in samples.values())),
    }


def accuracy(suite: Suite, row: dict, reference: dict) -> dict:
    """Global and group-effect errors of ``row`` against the NUTS ``reference``."""
    import numpy as np

    glob, sd, groups = 0.0, 0.0, []
    for site, (mean, sds) in reference["moments"].items():
        got_mean, got_sd = (np.asarray(a) for a in row["moments"][site])
        mean, sds = np.asarray(mean), np.asarray(sds)
        if site in suite.globals:
            glob = max(glob, float(np.max(np.abs(got_mean - mean) / sds)))
            sd = max(sd, float(np.max(np.abs(got_sd / sds - 1))))
        else:
            groups.append((got_mean - mean) / sds)
    rms = float(np.sqrt(np.mean(np.concatenate(groups) ** 2))) if groups else 0.0
    ok = glob <= MEAN_TOL and sd <= SD_TOL and rms <= GROUP_TOL
    return {"glob": glob, "sd": sd, "rms": rms, "ok": ok}


def _spawn(suite: Suite, cfg: dict, timeout: float) -> dict:
    try:
        proc = subprocess.run(
            [sys.executable, suite.script, "--worker", json.dumps(cfg)],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"sampler": cfg["sampler"], "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
    return {"sampler": cfg["sampler"], "error": f"exit {proc.returncode}: {tail[-300:]}"}


COLUMNS = ("sampler", "n", "wall", "ESS", "ESS/s", "steady", "ESS/ep", "glob", "sd", "u rms",
           "ok", "warn", "×NUTS")  # fmt: skip
WIDTHS = (16, 8, 7, 6, 7, 7, 7, 6, 6, 6, 4, 5, 6)


def _cells(row: dict, nuts_rate: float) -> list[str]:
    """One row's cells, in ``COLUMNS`` order."""
    label = row["sampler"] + (
        f"->{row['chosen']}" if row.get("chosen") not in (None, row["sampler"]) else ""
    )
    rate = row["min_ess"] / row["wall"]
    steady = row["steady_ess"] / row["steady_s"] if "steady_s" in row else float("nan")
    acc = row.get("accuracy", {"glob": 0.0, "sd": 0.0, "rms": 0.0, "ok": True})
    return [
        label, str(row["n"]), f"{row['wall']:.1f}", f"{row['min_ess']:.0f}", f"{rate:.2f}",
        f"{steady:.2f}", f"{row['min_ess'] / row['epochs']:.2f}", f"{acc['glob']:.3f}",
        f"{acc['sd']:.3f}", f"{acc['rms']:.3f}", "ok" if acc["ok"] else "MISS",
        "warn" if row.get("warnings") else "-", f"{rate / nuts_rate:.1f}",
    ]  # fmt: skip


def print_table(config: str, rows: list[dict], nuts: dict, markdown: bool = False) -> None:
    """The configuration's table: aligned text, or a Markdown table (``--markdown``)."""
    nuts_rate = nuts["min_ess"] / nuts["wall"]
    if markdown:
        print(f"\n{config}\n\n| " + " | ".join(COLUMNS) + " |")
        print("|" + "|".join("---" for _ in COLUMNS) + "|")
    else:
        print(f"\n{config}\n" + " ".join(f"{c:>{w}}" for c, w in zip(COLUMNS, WIDTHS, strict=True)))
    for row in [nuts, *rows]:
        if "error" in row:
            print(f"{row['sampler']:>16}  {row['error']}")
            continue
        cells = _cells(row, nuts_rate)
        if markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print(" ".join(f"{c:>{w}}" for c, w in zip(cells, WIDTHS, strict=True)))
    for row in rows:
        for message in row.get("warnings", [])[:1]:
            print(f"  {row['sampler']}: {message[:160]}")


def page_tables(page: Path) -> dict[str, list[list[str]]]:
    """The result rows of every table on a benchmark page (``--markdown`` output pasted into
    it), by the ``##`` section that holds them; NUTS's row once per section."""
    sections: dict[str, list[list[str]]] = {}
    title = ""
    for line in page.read_text().splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == len(COLUMNS) and cells[0] != COLUMNS[0]:
            rows = sections.setdefault(title, [])
            if not (cells[0].startswith("nuts") and any(r[0] == cells[0] for r in rows)):
                rows.append(cells)
    return sections


def plot_page(page: Path, figure: Path) -> None:
    """End-to-end ESS/s over NUTS's of every row on ``page`` that finished, one panel per
    section: green within the tolerances, red a miss, hatched where the run's self-check
    warned."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = {
        title: [r for r in rows if not r[0].startswith("nuts") and r[COLUMNS.index("×NUTS")]]
        for title, rows in page_tables(page).items()
    }
    heights = [len(rows) + 1.5 for rows in sections.values()]
    fig, axes = plt.subplots(
        len(sections), 1, sharex=True, figsize=(7, 0.6 + 0.25 * sum(heights)),
        gridspec_kw={"height_ratios": heights},
    )  # fmt: skip
    axes = list(np.atleast_1d(axes))
    for ax, (title, rows) in zip(axes, sections.items(), strict=True):
        ratio = np.array([float(r[COLUMNS.index("×NUTS")]) for r in rows])
        ok = [r[COLUMNS.index("ok")] == "ok" for r in rows]
        warned = [r[COLUMNS.index("warn")] == "warn" for r in rows]
        y = np.arange(len(rows))
        colours = ["tab:green" if o else "tab:red" for o in ok]
        bars = ax.barh(y, ratio - 1.0, left=1.0, color=colours, height=0.7)
        for bar, warn in zip(bars, warned, strict=True):
            bar.set_hatch("///" if warn else "")
        for yi, r in zip(y, ratio, strict=True):
            ax.text(r, yi, f" {r:g}×", va="center", ha="left" if r >= 1 else "right", fontsize=7)
        ax.axvline(1.0, color="k", lw=1)
        ax.set_xscale("log")
        twice = len({r[0] for r in rows}) < len(rows)  # two tables in a section: tell them by n
        ax.set_yticks(y, [f"{r[0]} (n = {r[1]})" if twice else r[0] for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9, loc="left")
    axes[0].set_xlim(0.01, 1000)
    axes[-1].set_xlabel("end-to-end min-ESS/s over NUTS's (log scale; 1 = NUTS)")
    fig.suptitle(
        "green: within tolerance, red: a miss, hatched: the run's self-check warned", fontsize=8
    )
    fig.tight_layout()
    fig.savefig(figure, dpi=110)
    print(f"{figure} ({len(sections)} panels)")


def main(suite: Suite, description: str) -> None:
    """Parse the command line and run the suite (module docstring)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--configs", nargs="+", default=list(suite.configs), choices=list(suite.configs)
    )
    from pplsamplers.registry import SAMPLERS as REGISTRY

    choices = [name for name in REGISTRY if name != "nuts"] + ["auto"]
    parser.add_argument("--samplers", nargs="+", default=list(suite.samplers), choices=choices)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--reference-warmup", type=int, default=1000)
    parser.add_argument("--reference-draws", type=int, default=2000)
    parser.add_argument("--subsample-size", type=int, default=None)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / suite.cache)
    parser.add_argument("--out", type=Path, default=None, help="write every row as JSON")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument(
        "--plot-page", nargs=2, type=Path, metavar=("PAGE", "PNG"),
        help="draw the Markdown tables of a benchmark page as a figure, and stop",
    )  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plot_page:
        plot_page(*args.plot_page)
        return
    if args.worker:
        print("RESULT " + json.dumps(worker(suite, json.loads(args.worker))))
        return
    results = {}
    for config in args.configs:
        nuts = nuts_reference(
            suite, config, args.cache, args.reference_warmup, args.reference_draws
        )
        rows = []
        for sampler in args.samplers:
            cfg = {
                "config": config, "sampler": sampler, "warmup": args.warmup,
                "draws": args.draws, "seed": args.seed, "subsample_size": args.subsample_size,
            }  # fmt: skip
            row = _spawn(suite, cfg, args.timeout)
            if "error" not in row:
                row["accuracy"] = accuracy(suite, row, nuts)
            rows.append(row)
        print_table(config, rows, nuts, args.markdown)
        results[config] = {"nuts": nuts, "rows": rows}
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
