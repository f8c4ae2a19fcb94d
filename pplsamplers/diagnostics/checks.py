"""End-of-run self-check, so that a wrong run is never silent (DESIGN §8.6, issue 14 item 5).

:func:`self_check` looks at the draws of a finished run, in flat unconstrained coordinates x:

1. **Convergence**: rank-normalised split R-hat and bulk ESS through ArviZ (one chain: halved).
2. **Frozen / diverged chains**: zero variance or < 1% of steps moved; non-finite draws or
   a draw 10³ robust sds from the centre of the tightest healthy chain.
3. **Full-data Stein check** on a thinned subset of m draws, with the exact score
   s(x) = −∇U(x) (one full-data pass per draw).  For any posterior π with vanishing boundary
   terms the Stein identities E_π[s] = 0 and E_π[(x − E x) sᵀ] = −I hold.  With S the
   covariance and x̄ the mean of *all* draws, each thinned draw i contributes

       g_i = S s_i + (x_i − x̄),  mean_err_j = −mean_i(g_ij) / (sd_j r_j),
       scale_err_j = −mean_i(g_ij (x_ij − x̄_j)) / S_jj,   r_j = √(1 + scale_err_j),

   after removing, per coordinate, the least-squares fit on the control variates
   z_j = (x_j − x̄_j)/sd_j and z_j² − 1, whose mean over *all* draws is exactly 0.  For exact
   draws E[g] = 0 and E[g_j (x − x̄)_j] = 0 for any fixed S (the Stein identities).  For a
   Gaussian posterior N(μ, Σ) and draws with mean μ + δ and covariance c²Σ the check reads
   mean_err = δ/σ, r = c and scale_err = c² − 1.  S must not contain the checked draw: its
   own share c cᵀ/N has E[c_j² (c·s)] = −(D + 2) S_jj, which biases scale_err by (D + 2)/N
   (times the summed squared autocorrelations of correlated draws; +0.3 to +0.5 for exact
   NUTS and Boomerang draws at D = 304, N = 1000).  So the scale term of draw i uses S₋ᵢ, the
   covariance without the draws of its chain within 3 autocorrelation times (ArviZ bulk ESS)
   of it; the mean term keeps S (its own share there has mean 0).  A dense S makes the check
   sharp for correlated posteriors; a diagonal S (D > 1000, or fewer than 2D draws) is
   unbiased but noisier.  The MCSEs use the ArviZ ESS of the per-draw terms.
4. **Counts**: non-finite draws or potentials, and the step ``counts`` (rejected steps).

Thresholds (:class:`Thresholds`) and why
----------------------------------------
A coordinate fails when |mean_err| > 0.2 + 3·MCSE or |r − 1| > 0.2 + 3·MCSE_r: inside the
robustness tolerance (0.25 sd, 0.30), so a run at its edge is flagged once 3·MCSE < 0.05
(mean) or < 0.1 (sd; MCSE = 0 for a Gaussian posterior), while an exact run with ESS 400
passes (0.2 is a 4-sd and a 5-sd event).

The run also fails when the scale error *averaged over the D coordinates*, e, is above
``tol_coherent_shift``·√(2/D) + 3·MCSE (its MCSE from the ArviZ ESS of each draw's average).
The step-size kernels (SGLD, SGBD, HAMCMC) inflate every variance a little at once, each
coordinate's within its own tolerance, and a scale parameter coupled to many coordinates
moves to compensate.  A scale parameter over G coordinates has a relative posterior sd of
about 1/√(2G), so e ≈ 2(c − 1) moves it by about e·√(G/2) sds; the tolerance lets a scale
parameter coupled to all D coordinates move by ``tol_coherent_shift`` = 0.2 sd (``tol_mean``),
whatever the model (:func:`coherent_tolerance`: 0.016 at D = 304, 0.04 at D = 50).  On
``models/robust_hierarchical.py`` (``τ z_g``, 300 groups) in 2 × (3000 + 5000) draws SGBD and
cSGLD with exact gradients read e = +0.074 ± 0.007 and +0.056 ± 0.006 (predicted τ shifts
0.9 and 0.7 sd; observed 0.71 and 0.59 sd from NUTS) and fail; exact NUTS and Boomerang
draws at 2 × 500 read −0.02 to +0.01 ± 0.008 and pass.  Below ``COHERENT_MIN_DIM`` = 10
coordinates the average is reported but not checked (the per-coordinate checks decide).
R-hat > 1.05 and bulk ESS < 100 are flagged too (``tests/unit/test_self_check.py``; docs:
troubleshooting).
Cost: m full-data passes (``thin_to``), jitted once per potential, batched over the draws.
By default m is as many draws as ``STEIN_BUDGET`` = 2·10⁷ datum evaluations allow, at least
200 (every draw at N ≤ 10⁴ for 2000 draws; 200 at N ≥ 10⁵).  The MCSEs shrink with m: on
``hlogistic`` of ``benchmarks/model_sweep.py`` (D = 53) SGBD's coherent scale error read
+0.105 ± 0.035 on 200 of its 1000 draws and +0.112 ± 0.017 on all of them at one seed, which
flags its 0.33 sd bias on τ (under 1 s of checking at N = 10⁴); at the sweep's own seed it
reads +0.046 ± 0.012 for a 0.26 sd bias and passes, the one silent miss of that sweep.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, NamedTuple

import arviz as az
import numpy as np

from pplsamplers.diagnostics.names import coordinate_names
from pplsamplers.diagnostics.stein_identities import SteinErrors, stein_errors
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey

COHERENT_MIN_DIM = 10
"""The coherent-scale check runs from this many coordinates on (module docstring)."""


class SelfCheckWarning(UserWarning):
    """Issued when the end-of-run self-check fails (a run that is probably wrong)."""


class Thresholds(NamedTuple):
    """Failure thresholds of :func:`self_check` (justified in the module docstring)."""

    rhat: float = 1.05  # max split R-hat
    min_ess: float = 100.0  # min bulk ESS
    tol_mean: float = 0.2  # |Stein mean error| in posterior sds, plus z·MCSE
    tol_sd: float = 0.2  # |Stein sd ratio − 1|, plus z·MCSE
    z: float = 3.0
    frozen_rel_var: float = 1e-12  # a chain's variance ≤ this × its mean², every coordinate
    min_moved: float = 0.01  # or a chain moved in fewer than this fraction of steps
    diverged_sds: float = 1e3  # robust sds from the tightest healthy chain
    tol_coherent_shift: float = 0.2  # sds a scale parameter over all D coordinates may move


STEIN_BUDGET = 20_000_000
"""Datum evaluations the default Stein check may spend (``thin_to=None``)."""

MIN_STEIN_DRAWS = 200
"""Draws the default Stein check uses at least, whatever N."""


def default_thin_to(num_data: int) -> int:
    """The Stein check's draws by default: ``STEIN_BUDGET`` / N, at least ``MIN_STEIN_DRAWS``.

    Examples
    --------
    >>> default_thin_to(10_000), default_thin_to(1_000_000)
    (2000, 200)
    """
    return max(MIN_STEIN_DRAWS, STEIN_BUDGET // max(int(num_data), 1))


_FIXES = {
    "stein": ("more warmup", "a smaller step"),
    "rhat": ("more warmup and draws",),
    "ess": ("more warmup and draws",),
    "frozen": ("a smaller step",),
    "diverged": ("a smaller step",),
    "nonfinite": ("a smaller step", "checking the data and the model's support"),
    "counts": ("a smaller step", "checking the data and the model's support"),
}


@dataclasses.dataclass(frozen=True)
class SelfCheck:
    """Result of :func:`self_check`: every value, ``passed``, and a one-line ``warning``."""

    passed: bool
    warning: str
    failures: tuple[str, ...]
    """Failed check names: stein_mean, stein_sd, stein_coherent_scale, rhat, ess, frozen,
    diverged, nonfinite, or a key of ``counts``."""
    names: tuple[str, ...]
    rhat: np.ndarray
    ess_bulk: np.ndarray
    frozen_chains: tuple[int, ...]
    diverged_chains: tuple[int, ...]
    nonfinite_draws: int
    counts: dict[str, int]
    stein_draws: int
    stein_whitening: str
    """"dense", "diag", or "skipped: <reason>"."""
    stein_nonfinite: int
    mean_err: np.ndarray
    mean_mcse: np.ndarray
    sd_ratio: np.ndarray
    sd_mcse: np.ndarray
    scale_err: np.ndarray
    scale_mcse: np.ndarray
    coherent_scale_err: float
    """The Stein scale error averaged over the coordinates (c² − 1 for draws whose covariance
    is c² times the posterior's), and its MCSE below."""
    coherent_scale_mcse: float
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
            ("stein_mean_err", self.mean_err, 0.0),
            ("stein_sd_ratio", self.sd_ratio, 1.0),
        ]:
            j, out[label], out[label + "_name"] = self._worst(values, centre)
            if label == "stein_mean_err":
                out["stein_mean_mcse"] = math.nan if j is None else float(self.mean_mcse[j])
        out["stein_coherent_scale_err"] = float(self.coherent_scale_err)
        out["stein_coherent_scale_mcse"] = float(self.coherent_scale_mcse)
        out["stein_draws"] = int(self.stein_draws)
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
                f"  Stein check ({self.stein_draws} draws, {self.stein_whitening} S): "
                f"worst mean error {a['stein_mean_err']:+.3f} ± {a['stein_mean_mcse']:.3f} sd "
                f"({a['stein_mean_err_name']}); worst sd ratio {a['stein_sd_ratio']:.3f} "
                f"({a['stein_sd_ratio_name']}); scale error averaged over the coordinates "
                f"{self.coherent_scale_err:+.3f} ± {self.coherent_scale_mcse:.3f}"
            )
        steps = ", ".join(f"{v} {k}" for k, v in self.counts.items())
        lines.append(
            f"  chains frozen: [{a['frozen_chains']}], diverged: [{a['diverged_chains']}]; "
            f"non-finite draws {self.nonfinite_draws}" + (f"; steps: {steps}" if steps else "")
        )
        if not self.passed:
            lines.append("  " + self.warning)
        return lines


def coherent_tolerance(dim: int, thresholds: Thresholds = Thresholds()) -> float:
    """The largest |scale error averaged over ``dim`` coordinates| that passes before its
    MCSE term: ``tol_coherent_shift · √(2 / dim)``, the average at which a scale parameter
    coupled to all the coordinates moves by ``tol_coherent_shift`` posterior sds (module
    docstring).

    >>> round(coherent_tolerance(304), 4), round(coherent_tolerance(50), 3)
    (0.0162, 0.04)
    """
    return thresholds.tol_coherent_shift * math.sqrt(2.0 / dim)


def warn(result: SelfCheck, stacklevel: int = 2) -> None:
    """Issue ``result.warning`` as a :class:`SelfCheckWarning` when the check failed."""
    if not result.passed:
        warnings.warn(result.warning, SelfCheckWarning, stacklevel=stacklevel)


def _convergence(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank-normalised split R-hat and bulk ESS per coordinate (ArviZ); one chain is halved."""
    if draws.shape[0] == 1:
        half = draws.shape[1] // 2
        draws = np.stack([draws[0, :half], draws[0, half : 2 * half]])
    if draws.shape[1] < 4:
        nan = np.full(draws.shape[-1], np.nan)
        return nan, nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(az.rhat(draws)), np.asarray(az.ess(draws, method="bulk"))


def _chain_health(draws: np.ndarray, th: Thresholds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chain: non-finite draw counts, frozen flags, diverged flags."""
    finite_rows = np.all(np.isfinite(draws), axis=-1)  # (chains, draws)
    nonfinite = np.sum(~finite_rows, axis=1)
    safe = np.where(np.isfinite(draws), draws, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):  # a chain at 1e200 squares to inf
        var = np.var(safe, axis=1)  # (chains, D)
        # zero variance relative to the chain's own location (a frozen chain at 0 included)
        zero_var = np.all(var <= th.frozen_rel_var * np.mean(safe, axis=1) ** 2, axis=1)
    moved = (
        np.mean(np.any(np.diff(draws, axis=1) != 0, axis=-1), axis=1) if draws.shape[1] > 1 else 1.0
    )
    frozen = zero_var | (np.asarray(moved) < th.min_moved)
    # diverged: relative to the centre and robust sd of the tightest healthy chain
    q25, med, q75 = np.percentile(safe, [25, 50, 75], axis=1)  # each (chains, D)
    robust_sd = (q75 - q25) / 1.349
    healthy = (nonfinite == 0) & ~frozen
    diverged = nonfinite > 0
    if np.any(healthy):
        ref = np.flatnonzero(healthy)[np.argmin(np.sum(np.log(robust_sd[healthy] + 1e-300), -1))]
        scale = np.maximum(robust_sd[ref], 1e-12 * (1.0 + np.abs(med[ref])))
        far = np.max(np.abs(safe - med[ref]) / scale, axis=(1, 2))
        diverged = diverged | (far > th.diverged_sds)
    return nonfinite, frozen, diverged


def _chain_list(label: str, chains: np.ndarray) -> str:
    ids = ", ".join(map(str, np.flatnonzero(chains)))
    return f"chain{'s' if np.sum(chains) > 1 else ''} {ids} {label}"


def self_check(
    draws: Array,
    potential: SubsampledPotential | None,
    *,
    counts: dict[str, Any] | None = None,
    thin_to: int | None = None,
    rng_key: PRNGKey | None = None,
    names: list[str] | None = None,
    thresholds: Thresholds = Thresholds(),
    whiten: str = "auto",
    alternatives: tuple[str, ...] = ("another sampler", "AutoSampler"),
) -> SelfCheck:
    """Check a finished run: convergence, frozen/diverged chains, full-data Stein identities.

    Parameters
    ----------
    draws : (chains, draws, D) flat unconstrained positions x after warmup (2-D: one chain).
    potential : the model's potential in x; ``full_value_and_grad`` gives the exact scores.
        ``None`` where no full-data potential applies (a hard edge at the data, per-datum
        latents): the Stein checks are skipped, ``names`` is required, and ``draws`` may be
        in any coordinates (convergence and chain health only).
    counts : per-chain step counts after warmup (``{"rejected": (chains,)}``); any > 0 fails.
    thin_to : draws for the Stein check (one full-data pass each), spread over the chains;
        ``None``: :func:`default_thin_to` of the potential's N.
    rng_key : optional key for a random offset of the thinning grid.
    names : coordinate names for messages (default ``"w[3]"`` from ``potential.unravel``).
    thresholds : :class:`Thresholds` (justified in the module docstring).
    whiten : ``"auto"`` (dense S for D ≤ 1000 with ≥ 2D draws, else diagonal), ``"dense"``,
        ``"diag"``.
    alternatives : the last fixes a failed check suggests (AutoSampler's own run names the
        sampler it chose instead of suggesting AutoSampler).

    Returns
    -------
    :class:`SelfCheck`; pass it to :func:`warn` to warn when it failed.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.0, 0.5 * jnp.sum((x[None, :] - 1.0) ** 2, -1) * jnp.ones(idx.shape))
    >>> pot = build_potential(terms, dim=2, N=4, n=4, init_position=jnp.zeros(2))
    >>> x = 1.0 + 0.5 * jax.random.normal(jax.random.key(0), (2, 1000, 2))  # N(1, I/4)
    >>> self_check(x, pot).passed
    True
    >>> bad = self_check(x + 0.15, pot)  # 0.3 posterior sd too high
    >>> bad.passed, bad.warning[:53]
    (False, 'pplsamplers self-check FAILED: Stein mean error +0.30')
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
    nonfinite, frozen, diverged = _chain_health(draws, th)
    usable = (nonfinite == 0) & ~diverged
    nan = np.full(dim, np.nan)
    rhat, ess = _convergence(draws[usable]) if np.any(usable) else (nan, nan)
    stein, how, stein_bad = None, "skipped: no finite, non-diverged chain", 0
    if potential is None:
        how = "skipped: no full-data potential for this model"
    elif np.any(usable):
        thin_to = default_thin_to(potential.N) if thin_to is None else thin_to
        stein, how, stein_bad = stein_errors(draws[usable], potential, thin_to, rng_key, whiten)
    if stein is None:
        stein = SteinErrors.missing(dim)
    mean_err, ratio = stein.mean_err, stein.sd_ratio
    coherent = stein.coherent_scale_err
    totals = {k: int(np.sum(np.asarray(v))) for k, v in (counts or {}).items()}

    fails: list[tuple[str, str, str]] = []  # (check, message, fix key)
    for check, excess, message in [
        (
            "stein_mean",
            np.abs(mean_err) - th.tol_mean - th.z * stein.mean_mcse,
            "Stein mean error {:+.2f} sd",
        ),
        (
            "stein_sd",
            np.abs(ratio - 1.0) - th.tol_sd - th.z * stein.sd_mcse,
            "Stein sd ratio {:.2f}",
        ),
        ("rhat", rhat - th.rhat, "R-hat {:.2f}"),
        ("ess", th.min_ess - ess, "bulk ESS {:.0f}"),
    ]:
        excess = np.where(np.isfinite(excess), excess, -np.inf)
        j = int(np.argmax(excess))
        if excess[j] > 0:
            value = {"stein_mean": mean_err, "stein_sd": ratio, "rhat": rhat, "ess": ess}[check]
            fix = "stein" if check.startswith("stein") else check
            fails.append((check, message.format(value[j]) + f" on {names[j]}", fix))
    coherent_excess = abs(coherent) - coherent_tolerance(dim, th) - th.z * stein.coherent_scale_mcse
    if dim >= COHERENT_MIN_DIM and coherent_excess > 0:  # NaN: no failure
        fails.append(
            (
                "stein_coherent_scale",
                f"Stein scale error averages {coherent:+.2f} over {dim} coordinates (every "
                f"sd ×{math.sqrt(max(1.0 + coherent, 0.0)):.3f} at once, which moves a scale "
                f"parameter coupled to them by about {abs(coherent) * math.sqrt(dim / 2):.1f} sd)",
                "stein",
            )
        )
    if np.any(frozen):
        fails.append(("frozen", _chain_list("frozen", frozen), "frozen"))
    if np.any(diverged):
        fails.append(("diverged", _chain_list("diverged", diverged), "diverged"))
    if np.sum(nonfinite) or stein_bad:
        what = f"{int(np.sum(nonfinite))} non-finite draws" if np.sum(nonfinite) else ""
        what += ("; " if what else "") + (
            f"non-finite potential at {stein_bad} of the checked draws" if stein_bad else ""
        )
        fails.append(("nonfinite", what, "nonfinite"))
    for key, total in totals.items():
        if total:
            fails.append((key, f"{total} steps {key}", "counts"))

    warning = ""
    if fails:
        fixes = list(dict.fromkeys(f for _, _, key in fails for f in _FIXES[key]))
        fixes += list(alternatives)
        warning = (
            "pplsamplers self-check FAILED: "
            + "; ".join(msg for _, msg, _ in fails)
            + ". Try: "
            + " / ".join(fixes)
        )
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
        stein_draws=int(stein.num_draws),
        stein_whitening=how,
        stein_nonfinite=int(stein_bad),
        mean_err=np.asarray(mean_err),
        mean_mcse=np.asarray(stein.mean_mcse),
        sd_ratio=np.asarray(ratio),
        sd_mcse=np.asarray(stein.sd_mcse),
        scale_err=np.asarray(stein.scale_err),
        scale_mcse=np.asarray(stein.scale_mcse),
        coherent_scale_err=float(coherent),
        coherent_scale_mcse=float(stein.coherent_scale_mcse),
        thresholds=th,
    )


__all__ = [
    "SelfCheck",
    "SelfCheckWarning",
    "Thresholds",
    "coherent_tolerance",
    "coordinate_names",
    "default_thin_to",
    "self_check",
    "warn",
]
