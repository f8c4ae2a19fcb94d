"""Overhead of the NumPyro-derived potential against a hand-written JAX potential.

Prints, for logistic regression with d = 20 and minibatch n, the median time of one jitted
call of
  * value+grad and the directional jvp on a minibatch, for the potential derived from the
    NumPyro model (`make_potential`) and for a hand-written JAX potential;
  * the chunked full-data value+grad.
The derived/hand ratio should be ≤ 1.2, and the minibatch columns must not grow with N.

    python benchmarks/potential_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import logistic_regression  # noqa: E402
from pplsamplers.estimator import build_estimator  # noqa: E402
from pplsamplers.model import make_potential  # noqa: E402


def median_time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure(N: int, d: int, n: int, repeats: int) -> dict[str, float]:
    (X, y), _ = logistic_regression.load_data(N=N, d=d, seed=0)
    derived = make_potential(logistic_regression.model, (X, y), subsample_size=n).estimator
    hand = build_estimator(logistic_regression.hand_written_terms(X, y), dim=d, N=N, n=n)
    x = 0.1 * jax.random.normal(jax.random.key(0), (d,), X.dtype)
    v = jax.random.normal(jax.random.key(1), (d,), X.dtype)
    idx = derived.sample_indices(jax.random.key(2))
    row = {}
    for label, pot in (("derived", derived), ("hand", hand)):
        row[f"{label}_vg"] = median_time(jax.jit(pot.value_and_grad), x, idx, repeats=repeats)
        row[f"{label}_jvp"] = median_time(jax.jit(pot.directional), x, v, idx, repeats=repeats)
    row["full_vg"] = median_time(
        jax.jit(derived.full_value_and_grad), x, repeats=max(3, repeats // 20)
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N up to 1e5, fewer repeats")
    parser.add_argument("--subsample-size", type=int, default=100)
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    repeats = 50 if args.quick else 200
    print(
        f"logistic regression, d=20, n={args.subsample_size}, backend={jax.default_backend()}, "
        f"median of {repeats} calls (microseconds)"
    )
    header = (
        f"{'N':>9} | {'derived v+g':>11} {'hand v+g':>9} {'ratio':>6} | {'derived jvp':>11} "
        f"{'hand jvp':>9} {'ratio':>6} | {'full-data v+g':>13}"
    )
    print(header)
    print("-" * len(header))
    for N in sizes:
        r = measure(N, 20, args.subsample_size, repeats)
        us = {k: 1e6 * t for k, t in r.items()}
        print(
            f"{N:>9,} | {us['derived_vg']:>11.1f} {us['hand_vg']:>9.1f} "
            f"{r['derived_vg'] / r['hand_vg']:>6.2f} | {us['derived_jvp']:>11.1f} "
            f"{us['hand_jvp']:>9.1f} {r['derived_jvp'] / r['hand_jvp']:>6.2f} | "
            f"{us['full_vg']:>13.1f}"
        )


if __name__ == "__main__":
    main()
