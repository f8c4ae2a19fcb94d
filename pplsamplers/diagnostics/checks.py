"""End-of-run self-check, so that a wrong run is never silent.

:func:`self_check` reads a finished run's draws in flat unconstrained coordinates x: split R-hat
and bulk ESS (ArviZ; one chain is halved), frozen chains (zero variance, or < 1% of steps
moved), diverged ones (non-finite draws, or a draw 10³ robust sds from the centre of the
tightest healthy chain), the counts of non-finite values and rejected steps, and the full-data
Stein identities on m thinned draws (:mod:`~pplsamplers.diagnostics.stein_identities`: a mean
error and an sd ratio r per coordinate, and the scale error averaged over the coordinates),
and, given the set-up's checked Gaussian, whether the draws drifted away from it
(:mod:`~pplsamplers.diagnostics.drift`).

Thresholds (:class:`Thresholds`): a coordinate fails when |mean_err| > 0.2 + z·MCSE or |r − 1| >
0.2 + z·MCSE_r, inside the robustness tolerance (0.25 sd, 0.30), so a run at its edge is flagged
once z·MCSE < 0.05 (mean) or < 0.1 (sd); for a step-size kernel (``exact=False``), whose bias
neither R-hat nor ESS can see, a mean check with z·MCSE > 0.3, which could miss twice the
tolerance, fails too (``unverified``). z is 3, or more where many coordinates are checked at once,
and an error must also exceed z times what the draws' own Monte Carlo error could show by chance
(1/√ESS for a mean); R-hat fails above 1.05 and bulk ESS below 100, or beyond what D coordinates of
independent draws could show (:mod:`~pplsamplers.diagnostics.multiplicity`: a site's coordinates
share one site's part of a 1% family error, so a scalar like τ keeps the strict bound), and a draw
fails whose U lies beyond any posterior's tail (:mod:`~pplsamplers.diagnostics.typical_set`). So an
exact run passes whatever D, and a long run of a small model is judged by the plain thresholds. The
averaged scale error fails above :func:`~pplsamplers.diagnostics.multiplicity.coherent_tolerance` +
3·MCSE (below 10 coordinates, every sd 10 % off at once) and beyond 3 times its chance error
(:func:`~pplsamplers.diagnostics.multiplicity.coherent_failure`). The check costs m full-data
passes, jitted once per potential and batched over the draws (m: :func:`default_thin_to`; the MCSEs
shrink with m).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from pplsamplers.diagnostics.alarm import SelfCheckWarning
from pplsamplers.diagnostics.drift import drift_failure
from pplsamplers.diagnostics.fixes import COUNTED, FIXES, MAX_REJECTED_FRACTION
from pplsamplers.diagnostics.health import chain_health, chain_list, convergence, stuck_coordinates
from pplsamplers.diagnostics.multiplicity import (
    chance_error,
    coherent_failure,
    coordinate_multiplicity,
    ess_floor,
    kurtosis_of,
    rhat_bound,
    slack_z,
)
from pplsamplers.diagnostics.names import coordinate_names
from pplsamplers.diagnostics.stein_identities import SteinErrors, stein_errors
from pplsamplers.diagnostics.typical_set import outlying_failure
from pplsamplers.estimator import Potential
from pplsamplers.types import Array, PRNGKey


class Thresholds(NamedTuple):
    """Failure thresholds of :func:`self_check` (justified in the module docstring)."""

    rhat: float = 1.05  # max split R-hat
    min_ess: float = 100.0  # min bulk ESS
    tol_mean: float = 0.2  # |Stein mean error| in posterior sds, plus z·MCSE
    tol_sd: float = 0.2  # |Stein sd ratio − 1|, plus z·MCSE
    z: float = 3.0  # MCSEs of slack, at least; more with many coordinates (multiplicity)
    frozen_rel_var: float = 1e-12  # a chain's variance ≤ this × its mean², every coordinate
    min_moved: float = 0.01  # or a chain moved in fewer than this fraction of steps
    diverged_sds: float = 1e3  # robust sds from the tightest healthy chain
    tol_coherent_shift: float = 0.2  # sds a scale parameter over all D coordinates may move
    tol_coherent_small: float = 0.21  # |averaged scale error| below COHERENT_MIN_DIM: 10 %
    unverified: float = 0.3  # z·MCSE of a Stein mean past which a step-size run is unverified


STEIN_BUDGET = 20_000_000
"""Datum evaluations the default Stein check may spend (``thin_to=None``)."""

MIN_STEIN_DRAWS = 200
"""Draws the default Stein check uses at least, whatever N."""


def default_thin_to(num_data: int) -> int:
    """The Stein check's draws by default: ``STEIN_BUDGET`` / N, at least ``MIN_STEIN_DRAWS``.

    >>> default_thin_to(10_000), default_thin_to(1_000_000)
    (2000, 200)
    """
    return max(MIN_STEIN_DRAWS, STEIN_BUDGET // max(int(num_data), 1))


@dataclasses.dataclass(frozen=True)
class SelfCheck:
    """Result of :func:`self_check`: every value, ``passed``, and a one-line ``warning``."""

    passed: bool
    warning: str
    failures: tuple[str, ...]
    """Failed check names: stein_mean, stein_sd, stein_coherent_scale, unverified, rhat, ess,
    drift, outlying, frozen, stuck, diverged, nonfinite, or a key of ``counts``."""
    names: tuple[str, ...]
    rhat: np.ndarray
    ess_bulk: np.ndarray
    frozen_chains: tuple[int, ...]
    diverged_chains: tuple[int, ...]
    nonfinite_draws: int
    counts: dict[str, int]
    stein_whitening: str
    """"dense", "diag", "structured" (the set-up's Gaussian) or "skipped: <reason>"."""
    stein_nonfinite: int
    stein: SteinErrors
    """The Stein check's mean and scale errors per coordinate and averaged over them, with
    their MCSEs (:class:`~pplsamplers.diagnostics.stein_identities.SteinErrors`)."""
    thresholds: Thresholds

    def _worst(self, values: np.ndarray, centre: float | None) -> tuple[int | None, float, str]:
        """(index, value, name) farthest from ``centre``, or smallest if ``None`` (NaN-safe)."""
        values = np.asarray(values, float)
        if not np.any(np.isfinite(values)):
            return None, math.nan, ""
        finite = np.where(np.isfinite(values), values, np.nan)
        j = int(np.nanargmin(finite) if centre is None else np.nanargmax(np.abs(finite - centre)))
        return j, float(values[j]), self.names[j]

    def to_attrs(self, prefix: str = "self_check_") -> dict[str, Any]:
        """Plain floats / ints / strings for DataTree (or ``sample_stats``) attrs."""
        out: dict[str, Any] = {"passed": int(self.passed), "warning": self.warning}
        out["failures"] = ",".join(self.failures)
        for label, values, centre in [
            ("rhat_max", self.rhat, 1.0),
            ("ess_bulk_min", self.ess_bulk, None),
            ("stein_mean_err", self.stein.mean_err, 0.0),
            ("stein_sd_ratio", self.stein.sd_ratio, 1.0),
        ]:
            j, out[label], out[label + "_name"] = self._worst(values, centre)
            if label == "stein_mean_err":
                out["stein_mean_mcse"] = math.nan if j is None else float(self.stein.mean_mcse[j])
        out["stein_coherent_scale_err"] = float(self.stein.coherent_scale_err)
        out["stein_coherent_scale_mcse"] = float(self.stein.coherent_scale_mcse)
        out["stein_draws"] = int(self.stein.num_draws)
        out["stein_whitening"] = self.stein_whitening
        out["stein_nonfinite"] = int(self.stein_nonfinite)
        out["frozen_chains"] = ",".join(map(str, self.frozen_chains))
        out["diverged_chains"] = ",".join(map(str, self.diverged_chains))
        out["nonfinite_draws"] = int(self.nonfinite_draws)
        out.update({f"steps_{k}": int(v) for k, v in self.counts.items()})
        out.update({f"threshold_{k}": float(v) for k, v in self.thresholds._asdict().items()})
        return {prefix + k: v for k, v in out.items()}

    def summary_lines(self) -> list[str]:
        """Human-readable lines for ``pplsamplers fit`` and ``print_summary``."""
        a = self.to_attrs(prefix="")
        lines = [f"self-check: {'passed' if self.passed else 'FAILED'}"]
        lines.append(
            f"  R-hat max {a['rhat_max']:.3f} ({a['rhat_max_name']}); "
            f"bulk ESS min {a['ess_bulk_min']:.0f} ({a['ess_bulk_min_name']})"
        )
        if self.stein_whitening.startswith("skipped"):
            lines.append(f"  Stein check {self.stein_whitening}")
        else:
            lines.append(
                f"  Stein check ({self.stein.num_draws} draws, {self.stein_whitening} S): "
                f"worst mean error {a['stein_mean_err']:+.3f} ± {a['stein_mean_mcse']:.3f} sd "
                f"({a['stein_mean_err_name']}); worst sd ratio {a['stein_sd_ratio']:.3f} "
                f"({a['stein_sd_ratio_name']}); scale error averaged over the coordinates "
                f"{self.stein.coherent_scale_err:+.3f} ± {self.stein.coherent_scale_mcse:.3f}"
            )
        steps = ", ".join(f"{v} {k}" for k, v in self.counts.items())
        lines.append(
            f"  chains frozen: [{a['frozen_chains']}], diverged: [{a['diverged_chains']}]; "
            f"non-finite draws {self.nonfinite_draws}" + (f"; steps: {steps}" if steps else "")
        )
        if not self.passed:
            lines.append("  " + self.warning)
        return lines


def warn(result: SelfCheck, stacklevel: int = 2) -> None:
    """Issue ``result.warning`` as a :class:`SelfCheckWarning` when the check failed."""
    if not result.passed:
        warnings.warn(result.warning, SelfCheckWarning, stacklevel=stacklevel)


def self_check(
    draws: Array,
    potential: Potential | None,
    *,
    counts: dict[str, Any] | None = None,
    thin_to: int | None = None,
    rng_key: PRNGKey | None = None,
    names: list[str] | None = None,
    thresholds: Thresholds = Thresholds(),
    whiten: str = "auto",
    alternatives: tuple[str, ...] = ("another sampler", "AutoSampler"),
    hints: dict[str, tuple[str, ...]] | None = None,
    scores: Array | None = None,
    constrained: bool = False,
    counted_draws: int | None = None,
    reference: Any = None,
    relabel: Callable[[np.ndarray], np.ndarray] | None = None,
    values: Array | None = None,
    value_noise: Array | None = None,
    metric: Any = None,
    exact: bool = True,
) -> SelfCheck:
    """Check a finished run: convergence, frozen/diverged chains, full-data Stein identities.

    Parameters
    ----------
    draws : (chains, draws, D) flat unconstrained positions x after warmup (2-D: one chain).
    potential : the model's potential in x, whose full-data pass gives the exact scores;
        ``None`` where none applies (a hard edge at the data, per-datum latents): the Stein
        checks are skipped, ``names`` is required, and ``draws`` may be in any coordinates.
    counts : per-chain counts after warmup (``{"rejected": (chains,)}``; ``"divergent"``,
        ``"capped"``: ``COUNTED``); more than ``MAX_REJECTED_FRACTION`` of the draws fails (a
        rare rejected step is harmless), or ``MAX_CAPPED_FRACTION`` for capped intervals.
    thin_to : draws for the Stein check (one full-data pass each), spread over the chains;
        ``None``: :func:`default_thin_to` of the potential's N.
    rng_key : optional key for a random offset of the thinning grid.
    names : coordinate names for messages (default ``"w[3]"`` from ``potential.unravel``).
    thresholds : :class:`Thresholds` (justified in the module docstring).
    whiten : ``"dense"``, ``"diag"`` or ``"auto"`` (dense S for D ≤ 1000 with ≥ 2D draws).
    hints : more fixes per failed check name, from the model
        (:func:`~pplsamplers.diagnostics.fixes.model_hints`), suggested
        before ``alternatives``.
    alternatives : the last fixes a failed check suggests (AutoSampler's own run names the
        sampler it chose instead of suggesting AutoSampler).
    scores : unbiased estimates of s = −∇U at every draw (same shape as ``draws``), for a check
        on the draws a run kept with their minibatch scores (:mod:`pplsamplers.infer.monitor`):
        every draw is checked and ``potential`` is not read.
    counted_draws : the draws per chain ``counts`` were counted over (``None``: the draws given).
    reference : the set-up's Gaussian x = c + L z for the drift check
        (:mod:`~pplsamplers.diagnostics.drift`); ``None``: not checked.
    metric : the set-up's Gaussian x = c + L z (checked or not), whose L shapes the Stein mean
        term where the draws' covariance is not used dense
        (:func:`~pplsamplers.diagnostics.stein_identities.metric_scores`); ``None``: a
        diagonal S.
    exact : the sampler targets the posterior exactly; ``False`` for a fixed-step
        discretisation (SGLD, SGBD, HAMCMC), whose bias only the Stein check can see: a
        Stein mean check whose z·MCSE exceeds ``thresholds.unverified`` then fails.
    relabel : for a mixture whose components are not ordered, maps draws to draws with the
        components ordered (:class:`~pplsamplers.diagnostics.labelling.Labelling`), on which
        R-hat and ESS are judged.
    constrained : the draws are of the model's constrained sites, where a coordinate may be
        constant (a one-category Dirichlet); otherwise they are unconstrained coordinates, and
        one that never moved in a chain fails the check.
    values, value_noise : U at every draw (chains, draws) and the sd of each value's estimate
        (``None``: exact), for the check on draws outside the typical set
        (:mod:`~pplsamplers.diagnostics.typical_set`); by default the full-data pass's U at the
        Stein check's draws.

    Returns
    -------
    :class:`SelfCheck`; pass it to :func:`warn` to warn when it failed.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.estimator import build_potential
    >>> terms = lambda x, idx: (0.0, 0.5 * jnp.sum((x[None, :] - 1.0) ** 2, -1) * jnp.ones(idx.shape))
    >>> pot = build_potential(terms, dim=2, N=4)
    >>> x = 1.0 + 0.5 * jax.random.normal(jax.random.key(0), (2, 1000, 2))  # N(1, I/4)
    >>> self_check(x, pot).passed
    True
    >>> bad = self_check(x + 0.15, pot)  # 0.3 posterior sd too high
    >>> bad.passed, bad.warning[:49], round(float(bad.stein.mean_err.max()), 1)
    (False, 'pplsamplers self-check FAILED: Stein mean error +', 0.3)
    """
    draws = np.asarray(draws, dtype=float)
    if draws.ndim == 2:
        draws = draws[None]
    if potential is None and names is None:
        raise ValueError("self_check without a potential needs names=, one per coordinate.")
    dim = potential.dim if potential is not None else len(names)
    if draws.ndim != 3 or draws.shape[-1] != dim:
        raise ValueError(f"draws must have shape (chains, draws, D={dim}); got {draws.shape}.")
    names = tuple(names if names is not None else coordinate_names(potential))
    th = thresholds
    nonfinite, frozen, diverged = chain_health(draws, th)
    usable = (nonfinite == 0) & ~diverged
    any_usable = bool(np.any(usable))
    kept = draws[usable] if any_usable else draws
    judged = kept if relabel is None or not any_usable else relabel(kept)
    rhat, ess = convergence(judged) if any_usable else (np.full(dim, np.nan),) * 2
    stein, how, stein_bad = None, "skipped: no finite, non-diverged chain", 0
    if scores is not None and any_usable:
        given = np.asarray(scores, dtype=float).reshape(draws.shape)[usable]
        stein, how, stein_bad = stein_errors(kept, None, 0, None, whiten, given, metric)
    elif potential is None:
        how = "skipped: no full-data potential for this model"
    elif any_usable:
        thin_to = default_thin_to(potential.N) if thin_to is None else thin_to
        stein, how, stein_bad = stein_errors(
            kept, potential, thin_to, rng_key, whiten, metric=metric
        )
    if stein is None:
        stein = SteinErrors.missing(dim)
    mean_err, ratio = stein.mean_err, stein.sd_ratio
    totals = {k: int(np.sum(np.asarray(v))) for k, v in (counts or {}).items()}

    fails: list[tuple[str, str, str]] = []  # (check, message, fix key)
    multiplicity = coordinate_multiplicity(names)
    slack = slack_z(multiplicity, th.z)
    kurtosis = kurtosis_of(kept)
    # an error fails above the tolerance (+ Stein noise) *and* what chance could show
    mean_gap = np.abs(mean_err) - np.fmax(
        th.tol_mean + slack * stein.mean_mcse, slack * chance_error(stein.mean_mcse, ess)
    )
    sd_gap = np.abs(ratio - 1.0) - np.fmax(
        th.tol_sd + slack * stein.sd_mcse, slack * chance_error(stein.sd_mcse, ess, kurtosis)
    )
    chains, length = kept.shape[:2]
    rhat_gap = rhat - rhat_bound(chains, length, multiplicity, th.rhat)
    ess_gap = ess_floor(chains * length, multiplicity, th.min_ess) - ess
    for check, excess, message in [
        ("stein_mean", mean_gap, "Stein mean error {:+.2f} sd"),
        ("stein_sd", sd_gap, "Stein sd ratio {:.2f}"),
        ("rhat", rhat_gap, "R-hat {:.2f}"),
        ("ess", ess_gap, "bulk ESS {:.0f}"),
    ]:
        excess = np.where(np.isfinite(excess), excess, -np.inf)
        j = int(np.argmax(excess))
        if excess[j] > 0:
            value = {"stein_mean": mean_err, "stein_sd": ratio, "rhat": rhat, "ess": ess}[check]
            fix = "stein" if check.startswith("stein") else check
            fails.append((check, message.format(value[j]) + f" on {names[j]}", fix))
    unseen = np.where(np.isfinite(stein.mean_mcse), slack * stein.mean_mcse, 0.0)
    j = int(np.argmax(unseen))  # R-hat and ESS cannot see a step size's bias; Stein can
    if not exact and unseen[j] > th.unverified and "stein_mean" not in [f[0] for f in fails]:
        message = f"Stein check too noisy to see a step-size bias: ±{unseen[j]:.2f} sd on"
        fails.append(("unverified", f"{message} {names[j]}", "unverified"))
    drift = None if reference is None else drift_failure(kept, reference, names)
    rows = (lambda a: np.reshape(a, draws.shape[:2])[usable]) if any_usable else np.asarray
    given = stein.potential if values is None else rows(values)
    noise = None if value_noise is None else rows(value_noise)
    outlying = outlying_failure(given, noise, kept, names, (th.tol_mean, th.tol_sd))
    averaged = stein.coherent_scale_err, stein.coherent_scale_mcse
    coherent = coherent_failure(*averaged, ess, kurtosis, th)
    fails += [f for f in (drift, outlying, coherent) if f is not None]
    if np.any(frozen):
        fails.append(("frozen", chain_list("frozen", frozen), "frozen"))
    stuck = stuck_coordinates(draws) & ~frozen[:, None]
    if not constrained and np.any(stuck):
        j = int(np.argmax(np.any(stuck, axis=0)))
        count = int(np.sum(np.any(stuck, axis=0)))
        which = f"{names[j]}" + (f" and {count - 1} more" if count > 1 else "")
        fails.append(
            ("stuck", f"{which} never moved in {chain_list('', stuck[:, j])[:-1]}", "stuck")
        )
    if np.any(diverged):
        fails.append(("diverged", chain_list("diverged", diverged), "diverged"))
    if np.sum(nonfinite) or stein_bad:
        what = f"{int(np.sum(nonfinite))} non-finite draws" if np.sum(nonfinite) else ""
        what += ("; " if what else "") + (
            f"non-finite potential at {stein_bad} of the checked draws" if stein_bad else ""
        )
        fails.append(("nonfinite", what, "nonfinite"))
    counted = draws.shape[0] * (counted_draws or draws.shape[1])
    for key, total in totals.items():
        message, fraction, fix = COUNTED.get(
            key, (f"{{}} steps {key}", MAX_REJECTED_FRACTION, "counts")
        )
        if total > fraction * counted:
            fails.append((key, message.format(total), fix))

    fixes = [f for _, _, key in fails for f in FIXES[key]]
    fixes += [f for name, _, _ in fails for f in (hints or {}).get(name, ())]
    fixes = list(dict.fromkeys(fixes)) + list(alternatives)
    found = "; ".join(msg for _, msg, _ in fails)
    warning = f"pplsamplers self-check FAILED: {found}. Try: {' / '.join(fixes)}" if fails else ""
    return SelfCheck(
        passed=not fails,
        warning=warning,
        failures=tuple(name for name, _, _ in fails),
        names=names,
        rhat=np.asarray(rhat),
        ess_bulk=np.asarray(ess),
        frozen_chains=tuple(int(c) for c in np.flatnonzero(frozen)),
        diverged_chains=tuple(int(c) for c in np.flatnonzero(diverged)),
        nonfinite_draws=int(np.sum(nonfinite)),
        counts=totals,
        stein_whitening=how,
        stein_nonfinite=int(stein_bad),
        stein=stein,
        thresholds=th,
    )


__all__ = [
    "SelfCheck",
    "SelfCheckWarning",
    "Thresholds",
    "coordinate_names",
    "default_thin_to",
    "self_check",
    "warn",
]
