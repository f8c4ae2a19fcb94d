"""Boomerang (control variates, full-Hessian reference) tuning sweep at N = 10⁵, d = 20.

    .venv/bin/python benchmarks/boomerang_tuning.py [--batch 100] [SPEC ...]

Each SPEC is ``refresh_rate,max_extrapolation,target_evals_per_sample`` (default: the
benchmark's setting 1,0.5,10 and the better ones found).  For each it runs the same NumPyro
warmup (300) and sampling (2000) as ``boomerang_logreg.py``, then the compiled kernel in a
steady-state ``lax.scan`` for 2000 more draws (``boomerang_logreg.steady_state``), and prints
min bulk and tail ESS, ESS per rate proposal and proposals per draw of the NumPyro run, the
steady-state loop's seconds and min ESS per second, and the NumPyro run's errors against the
stored NUTS reference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
from boomerang_logreg import PDMP_FIELDS, accuracy, reference_for, run  # noqa: E402

from models import logistic_regression  # noqa: E402
from pplsamplers.infer import Boomerang  # noqa: E402

DEFAULT_SPECS = (
    "1,0.5,10",
    "2,0.5,10",
    "0.3,0.5,10",
    "0.3,1,10",
    "0.5,1,10",
    "0.5,1,20",
    "0.3,1,20",
    "0.3,1,30",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("specs", nargs="*", default=list(DEFAULT_SPECS))
    args = parser.parse_args()
    N, n, draws_count = 100_000, args.batch, 2000
    data, _ = logistic_regression.load_data(N=N, d=20, seed=0)
    model = logistic_regression.model
    ref_mean, ref_sd, ref_name = reference_for(N, None)
    print(f"N = {N}, d = 20, n = {n}, {draws_count} draws, reference {ref_name}")
    print(
        f"{'refresh':>7} {'horizon':>7} {'evals':>5} | {'min ESS':>7} {'tail':>6} {'ESS/prop':>8} "
        f"{'prop/draw':>9} {'steady s':>8} {'ESS/s':>6} {'mean err':>8} {'sd err':>6}"
    )
    for spec in args.specs:
        refresh, horizon, evals = (float(v) for v in spec.split(","))
        _, draws, timing, _, extra = run(
            lambda r=refresh, h=horizon, e=evals: Boomerang(
                model,
                subsample_size=n,
                control_variate=True,
                curvature="full_hessian",
                refresh_rate=r,
                max_extrapolation=h,
                target_evals_per_sample=e,
            ),
            data,
            300,
            draws_count,
            jax.random.key(0),
            fields=PDMP_FIELDS,
        )
        steady_seconds, steady_ess = timing["steady"]
        mean_err, sd_err = accuracy(draws, ref_mean, ref_sd)
        ess = float(np.min(az.ess(draws[None])))
        tail = float(np.min(az.ess(draws[None], method="tail", prob=(0.05, 0.95))))
        proposals = float(extra["num_proposals"].sum())
        print(
            f"{refresh:>7g} {horizon:>7g} {evals:>5g} | {ess:>7.0f} {tail:>6.0f} {ess / proposals:>8.4f} "
            f"{proposals / draws_count:>9.1f} {steady_seconds:>8.2f} "
            f"{steady_ess / steady_seconds:>6.0f} {mean_err:>8.3f} {sd_err:>6.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
