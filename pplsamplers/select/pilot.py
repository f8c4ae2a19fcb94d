"""Pilot tournament: run the best-ranked candidates on an equal data budget and measure.

Each candidate runs ``num_chains`` chains whose sampling phase costs ``budget_epochs``
epochs (an epoch is N per-datum likelihood evaluations; a short calibration run measures a
kernel's epochs per draw, NUTS included).  Its score is the minimum bulk ESS per epoch.
A bias guard then computes the IMQ kernel Stein discrepancy of a thinned subset of its draws
with full-data scores and rejects a candidate whose KSD exceeds ``guard_factor`` times the
best candidate's: a fast but biased sampler cannot win.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from pplsamplers.diagnostics import kernel_stein_discrepancy, min_ess
from pplsamplers.potential import make_potential
from pplsamplers.select.competence import Candidate
from pplsamplers.select.decision import Decision
from pplsamplers.select.features import ModelFeatures


def _epochs_per_draw(mcmc: MCMC, num_data: int) -> float:
    fields = mcmc.get_extra_fields()
    if "data_evals" in fields:
        evals = np.asarray(fields["data_evals"], dtype=float)
    else:  # NUTS: one full-data gradient per leapfrog step
        evals = np.asarray(fields["num_steps"], dtype=float) * num_data
    return float(evals.mean()) / num_data


def _run(kernel: Any, num_warmup: int, num_samples: int, num_chains: int, key: jax.Array,
         model_args: tuple, model_kwargs: dict) -> MCMC:
    extra = ("num_steps",) if not hasattr(kernel, "potential") else ()
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(key, *model_args, extra_fields=extra, **model_kwargs)
    return mcmc


def evaluate_candidate(
    make: Callable[[], Any],
    model_args: tuple,
    model_kwargs: dict,
    num_data: int,
    *,
    budget_epochs: float,
    num_chains: int,
    rng_key: jax.Array,
    calibration_draws: int = 20,
    max_draws: int = 4000,
) -> dict[str, Any]:
    """Run one candidate on ``budget_epochs`` and return its draws and ESS per epoch."""
    calibrate_key, run_key = jax.random.split(rng_key)
    probe = _run(make(), calibration_draws, calibration_draws, 1, calibrate_key, model_args,
                 model_kwargs)
    per_draw = max(_epochs_per_draw(probe, num_data), 1e-12)
    draws = int(np.clip(budget_epochs / (per_draw * num_chains), 20, max_draws))
    warmup = max(draws // 2, 20)
    start = time.perf_counter()
    mcmc = _run(make(), warmup, draws, num_chains, run_key, model_args, model_kwargs)
    seconds = time.perf_counter() - start
    import arviz as az

    idata = az.from_numpyro(mcmc)
    ess = min_ess(idata)
    epochs = per_draw * draws * num_chains
    return dict(samples=mcmc.get_samples(), draws=draws, epochs=epochs, ess=ess,
                ess_per_epoch=ess / epochs, seconds=seconds)


def run_pilot(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    features: ModelFeatures,
    ranking: tuple[Candidate, ...],
    *,
    shared: dict | None = None,
    overrides: dict | None = None,
    top: int = 3,
    budget_epochs: float = 20.0,
    num_chains: int = 2,
    ksd_points: int = 100,
    guard_factor: float = 2.0,
    seed: int = 0,
) -> Decision:
    """Run the ``top`` candidates of ``ranking`` and decide by ESS/epoch under the KSD guard.

    Returns a :class:`Decision` whose ``scores`` are ESS per epoch and whose ``pilot`` field
    holds each candidate's ESS, epochs, KSD and whether the guard rejected it.
    """
    from pplsamplers.samplers import make_kernel

    shared, overrides = dict(shared or {}), dict(overrides or {})
    if top < 1 or budget_epochs <= 0 or guard_factor < 1 or ksd_points < 10:
        raise ValueError("pilot needs top >= 1, budget_epochs > 0, guard_factor >= 1 and "
                         "ksd_points >= 10.")
    contenders = list(ranking[:top])
    potential = make_potential(model, model_args, model_kwargs,
                               shared.get("subsample_size"), data_plate=overrides.get("data_plate"))
    to_flat = jax.jit(jax.vmap(potential.unconstrain))
    score_fn = jax.jit(jax.vmap(lambda x: -potential.full_value_and_grad(x)[1]))
    results: dict[str, dict] = {}
    keys = jax.random.split(jax.random.PRNGKey(seed), len(contenders))
    for candidate, key in zip(contenders, keys, strict=True):
        params = {**shared, **candidate.params, **overrides}
        if params.get("control_variate") is True and features.map_position is not None:
            params["control_variate"] = features.map_position
        outcome = evaluate_candidate(
            lambda params=params, name=candidate.name: make_kernel(name, model, **params),
            model_args, model_kwargs, features.num_data, budget_epochs=budget_epochs,
            num_chains=num_chains, rng_key=key,
        )
        flat = to_flat(outcome.pop("samples"))
        thin = np.linspace(0, flat.shape[0] - 1, min(ksd_points, flat.shape[0])).astype(int)
        points = flat[thin]
        outcome["ksd"] = float(kernel_stein_discrepancy(points, score_fn(points)))
        outcome["params"] = params
        results[candidate.name] = outcome
    best_ksd = min(r["ksd"] for r in results.values())
    for r in results.values():
        r["rejected"] = bool(r["ksd"] > guard_factor * best_ksd)
    admissible = {n: r for n, r in results.items() if not r["rejected"]}
    winner = max(admissible, key=lambda n: admissible[n]["ess_per_epoch"])
    reasons = (
        f"highest ESS per epoch in the pilot ({admissible[winner]['ess_per_epoch']:.3g}, "
        f"{budget_epochs:g} epochs each) among candidates passing the KSD bias guard",
        *next(c.reasons for c in contenders if c.name == winner),
    )
    chosen = dict(results[winner]["params"])
    if isinstance(chosen.get("control_variate"), jnp.ndarray | np.ndarray):
        chosen["control_variate"] = True  # the anchor is the features' MAP again
    if winner == "nuts":
        chosen.pop("subsample_size", None)
    return Decision(
        kernel=winner,
        params=chosen,
        reasons=reasons,
        scores={n: r["ess_per_epoch"] for n, r in results.items()},
        features=features,
        ranking=tuple(contenders),
        strategy="pilot",
        pilot={n: {k: v for k, v in r.items() if k != "params"} for n, r in results.items()},
    )


__all__ = ["evaluate_candidate", "run_pilot"]
