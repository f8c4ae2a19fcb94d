"""Digits Bayesian neural network (Goan et al. §5): PDMP samplers against SGLD.

    .venv/bin/python benchmarks/bnn_digits.py            # full size (~3 min on 2 cores)
    .venv/bin/python benchmarks/bnn_digits.py --quick    # small network, short chains

``models/bnn.py``: 64 pixels → tanh(16) → 10 classes, standard normal priors, 1348 training
and 449 test images of sklearn's bundled digits.  All samplers start from the same MAP
(:func:`pplsamplers.warmup.find_map`) and use minibatches of n = 128; the PDMPs use
control-variate gradients anchored at that MAP.  Columns: test accuracy, mean test NLL and
expected calibration error (15 bins) of the posterior predictive mean (eq. 14), the ESS of
the draws' first principal component (the paper's mixing summary), wall seconds (sampling
incl. compilation and warmup; the shared MAP search is reported once) and epochs of data
touched (warmup included).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

from models import bnn  # noqa: E402
from pplsamplers.infer import BPS, SGLD, Boomerang  # noqa: E402
from pplsamplers.model import make_potential  # noqa: E402
from pplsamplers.registry import SigmaBPS  # noqa: E402
from pplsamplers.warmup import find_map  # noqa: E402


def run(name, kernel, data, test, num_warmup, num_samples, start, key):
    started = time.perf_counter()
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, progress_bar=False)
    mcmc.warmup(
        key,
        *data[0],
        **data[1],
        init_params=start,
        collect_warmup=True,
        extra_fields=("data_evals",),
    )
    warm = float(np.sum(mcmc.get_extra_fields()["data_evals"]))
    mcmc.run(mcmc.post_warmup_state.rng_key, *data[0], **data[1], extra_fields=("data_evals",))
    # NumPyro dispatches the chain asynchronously: stop the clock once the draws exist
    jax.block_until_ready((mcmc.get_samples(), mcmc.get_extra_fields()))
    seconds = time.perf_counter() - started
    samples = mcmc.get_samples()
    evals = warm + float(np.sum(mcmc.get_extra_fields()["data_evals"]))
    scores = bnn.metrics(bnn.predict_proba(samples, test[0]), test[1])
    return {
        "sampler": name,
        **scores,
        "pc1_ess": bnn.pc1_ess(samples),
        "seconds": seconds,
        "epochs": evals / data[0][0].shape[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*There are not enough devices.*")
    hidden, max_train = (8, 400) if args.quick else (16, None)
    num_warmup, num_samples = (100, 200) if args.quick else (200, 600)
    n = 128
    data = bnn.load_data("train", hidden=hidden, max_train=max_train)
    (X_test, y_test), _ = bnn.load_data("test", hidden=hidden)
    model = bnn.model

    started = time.perf_counter()
    potential = make_potential(model, data[0], data[1], subsample_size=n)
    map_position = find_map(
        jax.random.PRNGKey(0), potential.estimator, potential.init_position, num_steps=2000
    ).position
    map_seconds = time.perf_counter() - started
    start = potential.unravel(map_position)
    map_scores = bnn.metrics(
        bnn.predict_proba({k: v[None] for k, v in start.items()}, X_test), y_test
    )
    key = jax.random.key(0)
    rows = []
    samplers = [
        (
            "Boomerang (CV, fisher diag)",
            Boomerang(
                model,
                subsample_size=n,
                control_variate=map_position,
                curvature="fisher",
                start="map",
            ),
        ),
        ("BPS (CV)", BPS(model, subsample_size=n, control_variate=map_position)),
        ("sigmaBPS (CV)", SigmaBPS(model, subsample_size=n, control_variate=map_position)),
        ("SGLD (eps=1e-4)", SGLD(model, step_size=1e-4, subsample_size=n)),
        ("SGLD (eps=1e-5)", SGLD(model, step_size=1e-5, subsample_size=n)),
    ]
    for name, kernel in samplers:
        rows.append(run(name, kernel, data, (X_test, y_test), num_warmup, num_samples, start, key))
    print(
        f"\n== digits BNN: 64-{hidden}-10, N = {data[0][0].shape[0]} train / {len(y_test)} "
        f"test, n = {n}, {num_warmup} warmup + {num_samples} draws =="
    )
    print(
        f"MAP ({map_seconds:.0f} s): accuracy {map_scores['accuracy']:.3f}, NLL "
        f"{map_scores['nll']:.3f}, ECE {map_scores['ece']:.3f}"
    )
    header = (
        f"{'sampler':<30}{'accuracy':>9}{'NLL':>8}{'ECE':>8}{'PC1 ESS':>9}{'sec':>8}{'epochs':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['sampler']:<30}{r['accuracy']:>9.3f}{r['nll']:>8.3f}{r['ece']:>8.3f}"
            f"{r['pc1_ess']:>9.1f}{r['seconds']:>8.1f}{r['epochs']:>9.0f}"
        )


if __name__ == "__main__":
    main()
