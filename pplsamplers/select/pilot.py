"""Pilot tournament: run the best-ranked candidates on an equal data budget and measure.

Each candidate runs ``num_chains`` chains whose sampling phase costs ``budget_epochs``
epochs (an epoch is N per-datum likelihood evaluations; a short calibration run measures a
kernel's epochs per draw, NUTS included).  Its score is the minimum bulk ESS per epoch.
A bias guard then computes the IMQ kernel Stein discrepancy of a thinned subset of its draws
with full-data scores (an unbiased U-statistic, one kernel lengthscale for every candidate)
and rejects a candidate whose KSD exceeds ``guard_factor`` times the best candidate's by more
than its noise (:func:`bias_guard`): a fast but biased sampler cannot win, and an exact one is
not rejected for a noisy estimate.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from numpyro.infer import MCMC

from pplsamplers.diagnostics import min_ess, stein_u_statistic
from pplsamplers.diagnostics.output import check_run
from pplsamplers.model import make_potential
from pplsamplers.registry import SAMPLERS, make_kernel
from pplsamplers.select.competence import Candidate
from pplsamplers.select.decision import Decision
from pplsamplers.select.features import ModelFeatures
from pplsamplers.validation import at_least, positive, positive_int


@dataclass(frozen=True)
class PilotOptions:
    """The pilot tournament's options, validated once at construction (errors name the option).

    ``AutoSampler(strategy="pilot", pilot_options=dict(budget_epochs=5.0))`` builds one.

    Parameters
    ----------
    top : int, default 3
        How many of the best-ranked candidates run (a positive integer).
    budget_epochs : float, default 20.0
        Data budget of each candidate's sampling phase, in epochs (N datum evaluations).
    num_chains : int, default 2
        Chains per candidate (its minimum bulk ESS is its score).
    ksd_points : int, default 200
        Thinned draws in each candidate's kernel Stein discrepancy (at least 10).
    guard_factor : float, default 2.0
        A candidate whose KSD exceeds this times the best one's (beyond noise) is rejected
        (at least 1).
    seed : int, default 0
        Seed of the candidates' keys (an integer).

    Examples
    --------
    >>> PilotOptions(budget_epochs=5.0).top
    3
    >>> PilotOptions(ksd_points=3)
    Traceback (most recent call last):
    ...
    ValueError: pilot_options ksd_points must be a finite number >= 10; got 3.
    """

    top: int = 3
    """How many of the best-ranked candidates run."""
    budget_epochs: float = 20.0
    """Data budget of each candidate's sampling phase, in epochs (N datum evaluations)."""
    num_chains: int = 2
    """Chains per candidate (its minimum bulk ESS is its score)."""
    ksd_points: int = 200
    """Thinned draws in each candidate's kernel Stein discrepancy."""
    guard_factor: float = 2.0
    """A candidate whose KSD exceeds this times the best one's (beyond noise) is rejected."""
    seed: int = 0
    """Seed of the candidates' keys."""

    def __post_init__(self) -> None:
        positive_int("pilot_options top", self.top)
        positive("pilot_options budget_epochs", self.budget_epochs)
        positive_int("pilot_options num_chains", self.num_chains)
        positive_int("pilot_options ksd_points", self.ksd_points)
        at_least("pilot_options ksd_points", self.ksd_points, 10)
        at_least("pilot_options guard_factor", self.guard_factor, 1.0)
        if not isinstance(self.seed, int | np.integer) or isinstance(self.seed, bool):
            raise ValueError(f"pilot_options seed must be an integer; got {self.seed!r}.")

    @classmethod
    def create(cls, options: PilotOptions | dict | None) -> PilotOptions:
        """``options`` as :class:`PilotOptions` (a dict's unknown names raise ``ValueError``)."""
        if isinstance(options, PilotOptions):
            return options
        options = dict(options or {})
        unknown = sorted(set(options) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"pilot_options has unknown names {unknown}; it takes "
                f"{', '.join(cls.__dataclass_fields__)}."
            )
        return cls(**options)


def common_lengthscale(features: ModelFeatures) -> float:
    """One IMQ lengthscale for every candidate: the typical distance between two draws of the
    diagonal Laplace approximation, √(2 Σ_j 1/H_jj) (1 without probes)."""
    if features.curvature_diagonal is None:
        return 1.0
    return float(np.sqrt(2.0 * np.sum(1.0 / np.asarray(features.curvature_diagonal))))


def effective_se(statistic: Any, num_points: int, ess: float) -> float:
    """The U-statistic's standard error for correlated MCMC draws: the i.i.d. formula scaled by
    √(m / min(ESS, m)) (thinned points carry at most ESS independent draws)."""
    effective = min(max(float(ess), 1.0), float(num_points))
    return float(statistic.standard_error) * float(np.sqrt(num_points / effective))


def guard_statistics(
    flat_draws: jax.Array,
    score_fn: Callable[[jax.Array], jax.Array],
    lengthscale: float,
    ess: float,
    num_points: int,
) -> tuple[float, float]:
    """(KSD², effective standard error) of ``num_points`` evenly thinned draws, the inputs of
    :func:`bias_guard`; ``score_fn`` maps ``(m, D)`` draws to their full-data scores."""
    count = min(num_points, flat_draws.shape[0])
    points = flat_draws[np.linspace(0, flat_draws.shape[0] - 1, count).astype(int)]
    scores = score_fn(points)
    if not (np.all(np.isfinite(np.asarray(points))) and np.all(np.isfinite(np.asarray(scores)))):
        return float("inf"), 0.0  # a chain that left the support or overflowed: rejected
    statistic = stein_u_statistic(points, scores, lengthscale)
    return float(statistic.ksd_squared), effective_se(statistic, count, ess)


def bias_guard(
    statistics: dict[str, tuple[float, float]],
    guard_factor: float = 2.0,
    num_se: float = 3.0,
    hopeless_factor: float = 100.0,
) -> dict[str, bool]:
    """Which candidates the KSD guard rejects, from ``{name: (KSD², standard error)}``.

    A candidate is rejected when its KSD² (U-statistic, common kernel) exceeds
    ``guard_factor``² times the smallest one, floored at 0 (its KSD is more than
    ``guard_factor`` times the best), by more than ``num_se`` standard errors of the
    difference.  A diverged chain has a standard error as large as its KSD², so it is also
    rejected when its KSD² exceeds ``hopeless_factor`` times the best one's upper bound
    (value + ``num_se`` se, floored at 0), whatever its own error.  A failed candidate
    (KSD² = inf or NaN) is always rejected.
    """
    finite = {n: v for n, v in statistics.items() if np.isfinite(v[0])}
    if not finite:
        return {name: True for name in statistics}
    best = min(finite, key=lambda n: finite[n][0])
    best_value, best_se = finite[best]
    floor = guard_factor**2 * max(best_value, 0.0)
    ceiling = hopeless_factor * max(best_value + num_se * best_se, 0.0)
    return {
        name: bool(
            not np.isfinite(value)
            or value - floor > num_se * float(np.hypot(se, best_se))
            or (ceiling > 0 and value > ceiling)
        )
        for name, (value, se) in statistics.items()
    }


def _epochs_per_draw(mcmc: MCMC, num_data: int) -> float:
    fields = mcmc.get_extra_fields()
    if "data_evals" in fields:
        evals = np.asarray(fields["data_evals"], dtype=float)
    else:  # NUTS: one full-data gradient per leapfrog step
        evals = np.asarray(fields["num_steps"], dtype=float) * num_data
    return float(evals.mean()) / num_data


def _run(
    kernel: Any,
    num_warmup: int,
    num_samples: int,
    num_chains: int,
    key: jax.Array,
    model_args: tuple,
    model_kwargs: dict,
) -> MCMC:
    minibatch = hasattr(kernel, "estimator")
    extra = ("num_steps",) if not minibatch else ()
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(key, *model_args, extra_fields=extra, **model_kwargs)
    # NumPyro dispatches the chain asynchronously; the caller's clock needs the finished draws
    jax.block_until_ready((mcmc.get_samples(), mcmc.get_extra_fields()))
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
    min_draws: int = 50,
    max_draws: int = 4000,
    min_warmup: int = 200,
) -> dict[str, Any]:
    """Run one candidate on ``budget_epochs`` and return its draws and ESS per epoch.

    The sampling phase gets ``budget_epochs`` (at least ``min_draws`` per chain, so that ESS
    and KSD are defined; the epochs actually spent are what the score divides by).  Warmup
    (``max(draws // 2, min_warmup)`` steps, not counted) lets kernels that adapt or start
    away from the mode reach stationarity before they are scored (minibatch kernels start in
    the Laplace approximation of the shared warmup).  The run's self-check
    (:func:`~pplsamplers.diagnostics.output.check_run`) is returned as ``self_check``: the
    pilot rejects a candidate that fails it.
    """
    calibrate_key, run_key = jax.random.split(rng_key)
    probe = _run(
        make(),
        calibration_draws,
        calibration_draws,
        1,
        calibrate_key,
        model_args,
        model_kwargs,
    )
    per_draw = max(_epochs_per_draw(probe, num_data), 1e-12)
    draws = int(np.clip(budget_epochs / (per_draw * num_chains), min_draws, max_draws))
    warmup = max(draws // 2, min_warmup)
    start = time.perf_counter()
    mcmc = _run(make(), warmup, draws, num_chains, run_key, model_args, model_kwargs)
    seconds = time.perf_counter() - start
    # ArviZ's ESS of the draws themselves: az.from_numpyro would also trace the model over the
    # full data, eagerly, for the observed data and dims (a cost that grows with N)
    ess = min_ess(mcmc.get_samples(group_by_chain=True))
    epochs = per_draw * draws * num_chains
    check = check_run(mcmc, warn_user=False)
    # a short pilot run has a small ESS and a noisy R-hat by design (ESS is its score); what
    # rejects it is being wrong: Stein identities violated, frozen or diverged chains, rejects
    wrong = check is not None and any(f not in ("ess", "rhat") for f in check.failures)
    return dict(
        samples=mcmc.get_samples(),
        self_check=check.warning if wrong else None,
        draws=draws,
        epochs=epochs,
        ess=ess,
        ess_per_epoch=ess / epochs,
        seconds=seconds,
    )


def _silent(name: str) -> dict[str, bool]:
    """A pilot run is short by design and checked by :func:`check_run`, not by its own
    end-of-run warning."""
    return {"self_check": False} if SAMPLERS[name].minibatch else {}


def run_pilot(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    features: ModelFeatures,
    ranking: tuple[Candidate, ...],
    *,
    shared: dict | None = None,
    overrides: dict | None = None,
    options: PilotOptions | dict | None = None,
) -> Decision:
    """Run the ``options.top`` candidates of ``ranking`` and decide by ESS/epoch under the KSD
    guard (``options``: :class:`PilotOptions`).

    Returns a :class:`Decision` whose ``scores`` are ESS per epoch and whose ``pilot`` field
    holds each candidate's ESS, epochs, KSD and whether the guard rejected it.
    """
    shared, overrides = dict(shared or {}), dict(overrides or {})
    options = PilotOptions.create(options)
    contenders = list(ranking[: options.top])
    potential = make_potential(
        model,
        model_args,
        model_kwargs,
        shared.get("subsample_size"),
        data_plate=overrides.get("data_plate"),
    )
    to_flat = jax.jit(jax.vmap(potential.unconstrain))
    score_fn = jax.jit(jax.vmap(lambda x: -potential.estimator.full_value_and_grad(x)[1]))
    lengthscale = common_lengthscale(features)
    results: dict[str, dict] = {}
    keys = jax.random.split(jax.random.PRNGKey(options.seed), len(contenders))
    for candidate, key in zip(contenders, keys, strict=True):
        params = {**candidate.params, **overrides}
        if SAMPLERS[candidate.name].minibatch:
            params = {**shared, **params}
        try:
            outcome = evaluate_candidate(
                lambda params=params, name=candidate.name: make_kernel(
                    name, model, **params, **_silent(name)
                ),
                model_args,
                model_kwargs,
                features.num_data,
                budget_epochs=options.budget_epochs,
                num_chains=options.num_chains,
                rng_key=key,
            )
        except (ValueError, FloatingPointError, np.linalg.LinAlgError) as error:
            # a candidate that cannot run on this model loses, and the explanation says why
            outcome = dict(
                draws=0,
                epochs=0.0,
                ess=0.0,
                ess_per_epoch=0.0,
                seconds=0.0,
                ksd=float("inf"),
                ksd_squared=float("inf"),
                ksd_se=0.0,
                error=f"{type(error).__name__}: {error}",
            )
        else:
            outcome["ksd_squared"], outcome["ksd_se"] = guard_statistics(
                to_flat(outcome.pop("samples")),
                score_fn,
                lengthscale,
                outcome["ess"],
                options.ksd_points,
            )
            outcome["ksd"] = float(np.sqrt(max(outcome["ksd_squared"], 0.0)))
        outcome["params"] = params
        results[candidate.name] = outcome
    if all("error" in r for r in results.values()):
        raise ValueError(
            "no pilot candidate ran: " + "; ".join(f"{n}: {r['error']}" for n, r in results.items())
        )
    rejected = bias_guard(
        {n: (r["ksd_squared"], r["ksd_se"]) for n, r in results.items()}, options.guard_factor
    )
    for name, r in results.items():
        # the KSD guard compares candidates; the self-check rejects a run that is wrong on its
        # own (a frozen chain, R-hat, a Stein identity violated by more than 0.2 sd ...)
        r["rejected"] = rejected[name] or bool(r.get("self_check"))
    admissible = {n: r for n, r in results.items() if not r["rejected"]}
    if not admissible:  # nothing passed: keep the least wrong (smallest KSD), and say so
        admissible = {n: r for n, r in results.items() if "error" not in r}
        best = min(admissible, key=lambda n: admissible[n]["ksd"])
        admissible = {best: admissible[best]}
        warnings.warn(
            "pplsamplers: every pilot candidate failed its self-check or the KSD guard; "
            f"{best} (smallest KSD) is used. Run longer (pilot_options budget_epochs) or check "
            "the model: "
            + "; ".join(f"{n}: {r.get('self_check') or 'KSD'}" for n, r in results.items()),
            stacklevel=3,
        )
    winner = max(admissible, key=lambda n: admissible[n]["ess_per_epoch"])
    reasons = (
        f"highest ESS per epoch in the pilot ({admissible[winner]['ess_per_epoch']:.3g}, "
        f"{options.budget_epochs:g} epochs each) among candidates passing the KSD bias guard",
        *next(c.reasons for c in contenders if c.name == winner),
    )
    chosen = dict(results[winner]["params"])
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


__all__ = [
    "PilotOptions",
    "bias_guard",
    "common_lengthscale",
    "effective_se",
    "evaluate_candidate",
    "guard_statistics",
    "run_pilot",
]
