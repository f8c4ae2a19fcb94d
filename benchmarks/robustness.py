"""The robustness table of issue 14 (item 6): every sampler with its defaults on raw-scale models.

Rows are samplers (every registered one but NUTS, plus AutoSampler), columns the models of
``tests/robustness`` (``models/robust_*.py``).  Each cell runs
``MCMC(make_kernel(name, model), num_chains=2, chain_method="vectorized")`` with DEFAULT options
and prints ``max |Δmean|/sd_ref, max |sd ratio − 1|, wall seconds, self-check verdict``; a
cell is ``ok`` within the suite's tolerance (0.25 and 0.30), ``MISS`` outside it.  The
self-check verdict is ``warn`` when a :class:`pplsamplers.diagnostics.SelfCheckWarning` was
raised, ``quiet`` otherwise, so ``MISS quiet`` is a silent wrong answer.  Each model runs
in the suite's precision: float64, but float32 (the users' default) for the hierarchical
model, whose cells are the suite's longest (``MODELS`` in ``tests/robustness/common.py``).

    .venv/bin/python benchmarks/robustness.py                       # the suite's sizes
    .venv/bin/python benchmarks/robustness.py --samplers sbps sgld --models linear
    .venv/bin/python benchmarks/robustness.py --warmup 1000 --draws 2000
    .venv/bin/python benchmarks/robustness.py --N 20000 --models logistic   # NUTS reference rerun
    .venv/bin/python benchmarks/robustness.py --samplers sgbd --models hierarchical \
        --warmup 5000 --draws 20000 --option step_size=0.25   # a knob away from its default

References: the exact posterior for ``linear`` (at any N); the stored NUTS runs of
``tests/data/robust_*_nuts.json`` for the others at their stored N.  With ``--N`` the NUTS
reference of those models is recomputed on the spot (``tests/data/make_references.py``'s
``compute_sites``, a few minutes each).

Examples
--------
>>> from tests.robustness.common import Cell
>>> format_cell(Cell("sgld", "linear", seconds=3.0, error="ValueError: bad"))
'ERROR ValueError, 3s'
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from pathlib import Path

# as the tests and `import pplsamplers` set it before JAX starts: without it the same seed
# gives other (equally valid) draws, and a cell reads differently from its test
os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")

import jax  # noqa: E402
import numpy as np

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests" / "data"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from tests.robustness.common import MODELS, Cell, load, run_cell, sampler_names  # noqa: E402


def reference_at(model: str, size: int | None) -> dict | None:
    """The reference for ``model`` at data size ``size`` (``None``: the suite's own)."""
    if size is None:
        return None  # run_cell uses the suite's reference
    if model == "linear":
        from models import robust_linear

        _, args, kwargs = load(model, size)
        return robust_linear.reference(*args, **kwargs)
    import make_references

    name = f"{MODELS[model]['module']}_nuts"
    spec = dict(make_references.ROBUST_PROBLEMS[name])
    spec["data"] = {**spec["data"], MODELS[model]["size_arg"]: size}
    stored = make_references.compute_sites(name, spec)
    print(f"  NUTS reference for {model} at N={size}: max R-hat {stored['max_rhat']:.4f}")
    return {
        site: {k: np.asarray(v[k], dtype=np.float64).reshape(v["shape"]) for k in ("mean", "sd")}
        for site, v in stored["sites"].items()
    }


def format_cell(cell: Cell) -> str:
    """``"0.03, 0.05, 12s, ok quiet"``-style text of one cell."""
    if cell.error is not None:
        return f"ERROR {cell.error.split(':')[0]}, {cell.seconds:.0f}s"
    verdict = "ok" if cell.ok else "MISS"
    check = "warn" if cell.warned else "quiet"
    return f"{cell.max_mean_err:.3g}, {cell.max_sd_err:.3g}, {cell.seconds:.0f}s, {verdict} {check}"


def parse_option(text: str) -> tuple[str, object]:
    """``"step_size=0.25"`` → ``("step_size", 0.25)`` (the value as JSON or a Python literal,
    else a string: ``False`` must not reach a kernel as the truthy string ``"False"``).

    >>> parse_option("step_size=0.25"), parse_option("variant=vanilla")
    (('step_size', 0.25), ('variant', 'vanilla'))
    >>> parse_option("clamp_negative_slopes=False"), parse_option("k=false")
    (('clamp_negative_slopes', False), ('k', False))
    """
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"--option must be NAME=VALUE; got {text!r}.")
    for parse in (json.loads, ast.literal_eval):
        try:
            return name, parse(value)
        except (ValueError, SyntaxError):  # json.JSONDecodeError is a ValueError
            continue
    return name, value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samplers", nargs="*", default=None, help="default: all but NUTS")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--warmup", type=int, default=None, help="default: the suite's (300)")
    parser.add_argument("--draws", type=int, default=None, help="default: the suite's (500)")
    parser.add_argument("--N", type=int, default=None, help="data size (default: the suite's)")
    parser.add_argument("--seed", type=int, default=None, help="PRNG seed (default: the suite's)")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a sampler option (VALUE read as JSON, else as a string); repeatable",
    )
    args = parser.parse_args(argv)
    samplers = args.samplers or sampler_names()
    refs = {model: reference_at(model, args.N) for model in args.models}
    options = dict(warmup=args.warmup, draws=args.draws, size=args.N)
    if args.seed is not None:
        options["seed"] = args.seed
    if args.option:
        options["options"] = dict(parse_option(text) for text in args.option)
    table: dict[str, dict[str, Cell]] = {}
    for sampler in samplers:
        for model in args.models:
            cell = run_cell(sampler, model, ref=refs[model], **options)
            table.setdefault(sampler, {})[model] = cell
            print(f"  {cell.describe()} [{cell.seconds:.0f} s]", flush=True)
        # drop the row's compiled programs: a whole table in one process otherwise ends in
        # "LLVM compilation error: Cannot allocate memory" (vm.max_map_count, not RAM)
        jax.clear_caches()
    print(
        "\ncell = max |Δmean|/sd_ref, max |sd ratio − 1|, wall s, verdict "
        "(ok: ≤ 0.25 and ≤ 0.30; MISS otherwise) + self-check (warn/quiet)"
    )
    width = max(len(format_cell(c)) for row in table.values() for c in row.values()) + 2
    labels = [m + (" (float32)" if MODELS[m].get("float32") else "") for m in args.models]
    width = max(width, *(len(label) + 2 for label in labels))
    print("sampler".ljust(10) + "".join(label.ljust(width) for label in labels))
    for sampler, row in table.items():
        print(sampler.ljust(10) + "".join(format_cell(row[m]).ljust(width) for m in args.models))
    misses = [c for row in table.values() for c in row.values() if not c.ok]
    silent = [c for c in misses if not c.warned]
    print(
        f"\n{len(misses)} of {len(samplers) * len(args.models)} cells miss; {len(silent)} silently."
    )


if __name__ == "__main__":
    main()
