"""Shared machinery of the robustness suite.

Every registered minibatch sampler and ``AutoSampler`` runs with its DEFAULTS (no step size,
no batch size, no control variate: choosing them is the library's job) on posteriors as users
fit them (``models/robust_*.py``), and the draws are compared, site by site in the
constrained space that ``MCMC.get_samples()`` reports, with a reference posterior:

* ``max |mean − mean_ref| / sd_ref ≤ 0.25`` and ``max |sd / sd_ref − 1| ≤ 0.30`` over every
  coordinate of every latent site (the issue's tolerance, not to be loosened);
* a run that misses them must have warned through the self-check
  (:class:`pplsamplers.diagnostics.SelfCheckWarning`, or a message starting
  ``"pplsamplers self-check"``).

The references: the exact Gaussian posterior for ``robust_linear`` (flat prior, known σ)
and NumPyro NUTS runs stored once in ``tests/data/robust_*_nuts.json`` by
``tests/data/make_references.py`` for the others.  Each (sampler, model) cell runs once per
process (:func:`cell`) and is shared by the tests of its file.

Examples
--------
>>> "nuts" in sampler_names(), "auto" in sampler_names()
(False, True)
"""

from __future__ import annotations

import functools
import importlib
import json
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import arviz as az
import jax
import numpy as np
from numpyro.infer import MCMC

from pplsamplers import check_run

DATA = Path(__file__).resolve().parents[1] / "data"
MEAN_TOL = 0.25
"""max |Δmean| / sd_ref allowed (issue 14, item 6)."""
SD_TOL = 0.30
"""max |sd / sd_ref − 1| allowed (issue 14, item 6)."""
MCSE_Z = 4.0
"""A slowly mixing cell's mean may miss :data:`MEAN_TOL` only within this many Monte Carlo
standard errors (:attr:`Cell.within_monte_carlo_error`)."""
SEED = 20261122
"""The one PRNG key of every cell (fixed, written here)."""
NUM_CHAINS = 2

# name -> model module, load_data kwargs, the load_data keyword that sets N, run lengths.
# The draws are few on purpose (CI budget): 2 × 500 draws give a sampler with ESS/draw ≥ 0.2
# a Monte Carlo sd of ≤ 0.07 sd_ref on each mean and ≤ 0.05 on each sd ratio, well inside the
# tolerance even as a maximum over the 304 coordinates of robust_hierarchical.  The bouncy
# particles with straight flows (SBPS, pSBPS, BPS, σBPS) fall far below that ESS on that
# model's group scale τ (bulk ESS 10-93 in 2 × 500 draws), so their tolerance cells there are
# held to a Monte Carlo bound instead (``slow_mixing``, test_hierarchical.py).
# ``float32=True``: the cells run in float32, the users' default (``jax.enable_x64(False)``
# around the run; the rest of the suite is float64).  The hierarchical cells are the suite's
# longest and their time is spent running, not compiling: float32 cut BPS's from 51 s to
# 30 s (warm compilation cache).
MODELS: dict[str, dict[str, Any]] = {
    "linear": dict(
        module="robust_linear", data=dict(N=100_000, seed=0), size_arg="N", warmup=300, draws=500
    ),
    "logistic": dict(
        module="robust_logistic", data=dict(N=100_000, seed=1), size_arg="N", warmup=300, draws=500
    ),
    "hierarchical": dict(
        module="robust_hierarchical",
        data=dict(num_groups=300, total=10_000, seed=2),
        size_arg="total",
        warmup=300,
        draws=500,
        float32=True,
    ),
    "mixed_1k": dict(
        module="mixed_glm",
        data=dict(N=20_000, num_groups=1_000, family="logistic", seed=11),
        size_arg="N",
        warmup=300,
        draws=500,
        float32=True,
        reference="mixed_logit_1k_nuts",
    ),
    # D = 5004: 5000 groups of 1 row to a few percent of N; exact reference by quadrature
    "mixed_5k": dict(
        module="gaussian_mixed",
        data=dict(N=20_000, num_groups=5_000, seed=12),
        size_arg="N",
        warmup=300,
        draws=500,
        float32=True,
        reference="exact",
    ),
    # the same model written centred (u ~ N(0, τ²), z = u / τ recorded), noise sd 3: most of
    # the 200 groups are barely informed, a funnel; the set-up centres each group by its data
    "mixed_centred": dict(
        module="gaussian_mixed",
        data=dict(N=2_000, num_groups=200, seed=13, centred=True, noise_sd=3.0),
        size_arg="N",
        warmup=300,
        draws=500,
        float32=True,
        reference="exact",
    ),
    # a discrete latent per datum, marked for enumeration (models/mixture.py, zero_inflated.py)
    "mixture": dict(
        module="mixture",
        data=dict(N=2_000, seed=21),
        size_arg="N",
        warmup=300,
        draws=500,
        reference="robust_mixture_nuts",
    ),
    "zero_inflated": dict(
        module="zero_inflated",
        data=dict(N=2_000, seed=22),
        size_arg="N",
        warmup=300,
        draws=500,
        reference="robust_zero_inflated_nuts",
    ),
    "student_t": dict(
        module="robust_student_t", data=dict(N=10_000, seed=3), size_arg="N", warmup=300, draws=500
    ),
    "ordinal": dict(
        module="robust_ordinal", data=dict(N=10_000, seed=4), size_arg="N", warmup=300, draws=500
    ),
}


def sampler_names() -> list[str]:
    """Every registered sampler but NUTS (the reference), plus ``"auto"`` (AutoSampler)."""
    from pplsamplers.registry import SAMPLERS

    names = [name for name in SAMPLERS if name != "nuts"]
    return names if "auto" in names else [*names, "auto"]


def make_kernel(name: str, model: Any, **options: Any) -> Any:
    """The kernel registered as ``name`` (``"auto"``: AutoSampler), with default options
    unless ``options`` are given (the benchmark's ``--option``; the tests give none)."""
    if name == "auto":
        from pplsamplers import AutoSampler

        return AutoSampler(model, **options)
    from pplsamplers.registry import make_kernel as build

    return build(name, model, **options)


@functools.cache
def load(model: str, size: int | None = None, as_numpy: bool = False) -> tuple[Any, tuple, dict]:
    """``(model_fn, args, kwargs)`` of a suite model; ``size`` overrides its N.

    ``as_numpy``: the data as NumPy arrays, which a float32 run converts to float32 and int32.
    Cached like the JAX arrays, so that every cell of a process hands the kernels the same
    array objects.  (The package no longer caches the shared set-up between kernels, so each
    cell computes its own mode, curvature and mode probe; ``pplsamplers.warmup.setup``.)
    """
    if as_numpy:
        model_fn, args, kwargs = load(model, size)
        args, kwargs = jax.tree.map(
            lambda a: np.asarray(a) if isinstance(a, jax.Array) else a, (args, kwargs)
        )
        return model_fn, args, kwargs
    spec = MODELS[model]
    module = importlib.import_module(f"models.{spec['module']}")
    data = dict(spec["data"])
    if size is not None:
        data[spec["size_arg"]] = size
    args, kwargs = module.load_data(**data)
    return module.model, args, kwargs


def stored_reference(name: str) -> dict[str, dict[str, np.ndarray]]:
    """``{site: {"mean", "sd", "mcse_mean"}}`` (site-shaped) of ``tests/data/<name>.json``
    (``mcse_mean``: the reference's own Monte Carlo error, zeros where it stores none)."""
    with open(DATA / f"{name}.json") as handle:
        stored = json.load(handle)
    out = {}
    for site, entry in stored["sites"].items():
        shape = entry["shape"]
        values = {k: np.asarray(entry[k], dtype=np.float64).reshape(shape) for k in ("mean", "sd")}
        mcse = entry.get("mcse_mean")
        values["mcse_mean"] = (
            np.zeros(shape) if mcse is None else np.asarray(mcse, np.float64).reshape(shape)
        )
        out[site] = values
    return out


@functools.cache
def reference(model: str) -> dict[str, dict[str, np.ndarray]]:
    """The reference posterior of a suite model at its default data."""
    spec = MODELS[model]
    if spec.get("reference") == "exact" or model == "linear":  # the module computes it
        module = importlib.import_module(f"models.{spec['module']}")
        _, args, kwargs = load(model)
        return module.reference(*args, **kwargs)
    return stored_reference(spec.get("reference", f"{spec['module']}_nuts"))


def is_self_check_warning(record: warnings.WarningMessage) -> bool:
    """Whether a recorded warning is the pplsamplers self-check's."""
    named = record.category.__name__ == "SelfCheckWarning"
    return named or str(record.message).startswith("pplsamplers self-check")


@dataclass
class Cell:
    """One (sampler, model) run and its comparison with the reference."""

    sampler: str
    model: str
    seconds: float = float("nan")
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    warned: bool = False
    mean_err: dict[str, float] = field(default_factory=dict)
    sd_err: dict[str, float] = field(default_factory=dict)
    nonfinite: int = 0
    frozen: list[str] = field(default_factory=list)
    mean_err_mcse: dict[str, float] = field(default_factory=dict)
    """Per site, over its coordinates beyond the mean tolerance, the largest |Δmean| in
    Monte Carlo standard errors √(MCSE_run² + MCSE_ref²) (0 where none is beyond it)."""
    rms_mean_err: dict[str, float] = field(default_factory=dict)
    """Per site, the root mean square over its coordinates of |Δmean| / sd_ref."""
    rms_sd_err: dict[str, float] = field(default_factory=dict)
    """Per site, the root mean square over its coordinates of |sd ratio − 1|."""
    chosen: str | None = None
    notes: dict = field(default_factory=dict)
    """The sampler AutoSampler chose (``sampler == "auto"`` only)."""

    @property
    def max_mean_err(self) -> float:
        return max(self.mean_err.values(), default=float("nan"))

    @property
    def max_sd_err(self) -> float:
        return max(self.sd_err.values(), default=float("nan"))

    @property
    def max_mean_err_mcse(self) -> float:
        return max(self.mean_err_mcse.values(), default=float("nan"))

    @property
    def ok(self) -> bool:
        """Within the tolerance on every site (NaN, a crash or a missing site is not)."""
        return self.error is None and bool(
            self.max_mean_err <= MEAN_TOL and self.max_sd_err <= SD_TOL
        )

    @property
    def within_monte_carlo_error(self) -> bool:
        """The bound of a slowly mixing cell (:func:`generate_cells`' ``slow_cells``): the sd
        ratios within :data:`SD_TOL`, and every mean within :data:`MEAN_TOL` sd_ref or within
        :data:`MCSE_Z` Monte Carlo standard errors of the reference."""
        return self.error is None and bool(
            self.max_sd_err <= SD_TOL and self.max_mean_err_mcse <= MCSE_Z
        )

    def describe(self) -> str:
        """One line with the numbers, for assertion messages and the benchmark."""
        if self.error is not None:
            return f"{self.sampler} on {self.model}: raised {self.error}"
        worst_mean = max(self.mean_err, key=self.mean_err.get)
        worst_sd = max(self.sd_err, key=self.sd_err.get)
        checks = "; ".join(self.warnings[:2]) or "no warning"
        return (
            f"{self.sampler} on {self.model} with defaults: max |Δmean|/sd_ref = "
            f"{self.max_mean_err:.3g} (site {worst_mean}; tolerance {MEAN_TOL}), max |sd ratio − 1|"
            f" = {self.max_sd_err:.3g} (site {worst_sd}; tolerance {SD_TOL}), "
            f"{self.nonfinite} non-finite values, frozen coordinates in {self.frozen or 'none'}; "
            f"beyond the mean tolerance: at most {self.max_mean_err_mcse:.2g} MCSE; "
            f"self-check: {'warned' if self.warned else 'silent'} ({checks})"
        )


def compare(cell: Cell, samples: dict[str, Any], ref: dict[str, dict[str, np.ndarray]]) -> None:
    """Fill ``cell``'s per-site errors from grouped-by-chain draws ``samples``."""
    for site, target in ref.items():
        if site not in samples:
            cell.error = f"KeyError: latent site {site!r} missing from get_samples()"
            return
        draws = np.asarray(samples[site], dtype=np.float64)
        draws = draws.reshape(draws.shape[0], draws.shape[1], -1)
        mean_ref, sd_ref = target["mean"].reshape(-1), target["sd"].reshape(-1)
        flat = draws.reshape(-1, draws.shape[-1])
        cell.nonfinite += int(np.size(flat) - np.isfinite(flat).sum())
        if np.any(draws.std(axis=1) == 0.0):
            cell.frozen.append(site)
        with np.errstate(invalid="ignore", over="ignore"):
            mean_diff = np.abs(flat.mean(0) - mean_ref)
            mean_err = mean_diff / sd_ref
            sd_err = np.abs(flat.std(0, ddof=1) / sd_ref - 1.0)
        # NaN (a diverged chain) must count as a miss, so it becomes +inf
        cell.mean_err[site] = float(np.nan_to_num(mean_err, nan=np.inf).max())
        cell.sd_err[site] = float(np.nan_to_num(sd_err, nan=np.inf).max())
        cell.rms_mean_err[site] = float(np.sqrt(np.mean(np.nan_to_num(mean_err, nan=np.inf) ** 2)))
        cell.rms_sd_err[site] = float(np.sqrt(np.mean(np.nan_to_num(sd_err, nan=np.inf) ** 2)))
        beyond = ~(mean_err <= MEAN_TOL)  # NaN included
        if beyond.any():
            ref_mcse = target.get("mcse_mean", np.zeros_like(target["mean"])).reshape(-1)
            with warnings.catch_warnings(), np.errstate(invalid="ignore", over="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                run_mcse = np.asarray(az.mcse(draws[..., beyond], method="mean"))
                errors = mean_diff[beyond] / np.hypot(run_mcse, ref_mcse[beyond])
            cell.mean_err_mcse[site] = float(np.nan_to_num(errors, nan=np.inf).max())
        else:
            cell.mean_err_mcse[site] = 0.0


def run_cell(
    sampler: str,
    model: str,
    *,
    warmup: int | None = None,
    draws: int | None = None,
    size: int | None = None,
    ref: dict[str, dict[str, np.ndarray]] | None = None,
    seed: int = SEED,
    options: dict[str, Any] | None = None,
    setups: list | None = None,
) -> Cell:
    """Run ``sampler`` with default options on ``model``; compare with ``ref``.

    ``MCMC(make_kernel(sampler, model), num_chains=2, chain_method="vectorized")``, then
    ``pplsamplers.check_run(mcmc)``, in float32 where ``MODELS`` says so; every warning
    raised during the run and the check is recorded.  An exception is caught and stored in
    ``Cell.error`` so that each test of the cell reports it.  ``options`` go to the kernel
    (none: its defaults).

    ``setups``: a list of the shared warmups (:class:`pplsamplers.warmup.Setup`) of earlier
    runs on the same data; a kernel whose set-up options equal one of theirs is handed that
    set-up (``setup=``, as AutoSampler hands its own to the kernel it chooses) instead of
    computing the same deterministic mode, curvature and probes again, and a new one is
    added.  The cells' wall times then exclude a set-up shared with an earlier cell.
    """
    spec = MODELS[model]
    cell = Cell(sampler, model)
    model_fn, args, kwargs = load(model, size, as_numpy=bool(spec.get("float32")))
    ref = reference(model) if ref is None else ref
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as records, jax.enable_x64(not spec.get("float32")):
        warnings.simplefilter("always")
        try:
            kernel = make_kernel(sampler, model_fn, **(options or {}))
            shared = _shared_setup(kernel, setups)
            if shared is not None:
                kernel = make_kernel(sampler, model_fn, setup=shared, **(options or {}))
            mcmc = MCMC(
                kernel,
                num_warmup=spec["warmup"] if warmup is None else warmup,
                num_samples=spec["draws"] if draws is None else draws,
                num_chains=NUM_CHAINS,
                chain_method="vectorized",
                progress_bar=False,
            )
            mcmc.run(jax.random.key(seed), *args, **kwargs)
            samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
            # the documented end of every run: the self-check (to_arviz and the CLI run it
            # too); it warns with one line when the run looks wrong
            check_run(mcmc)
            if setups is not None and shared is None and hasattr(kernel, "setup_options"):
                setups.append((kernel.setup_options, kernel.setup))
            cell.notes = dict(getattr(getattr(kernel, "setup", None), "notes", None) or {})
            decision = getattr(kernel, "decision", None)
            cell.chosen = None if decision is None else decision.kernel
        except Exception as exc:  # noqa: BLE001 - reported by every test of the cell
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            cell.error = f"{type(exc).__name__}: {exc} (at {frame.filename}:{frame.lineno})"
    cell.seconds = time.perf_counter() - start
    cell.warnings = [str(r.message).splitlines()[0] for r in records if is_self_check_warning(r)]
    cell.warned = bool(cell.warnings)
    if cell.error is None:
        compare(cell, samples, ref)
    return cell


def _shared_setup(kernel: Any, setups: list | None) -> Any:
    """The set-up of ``setups`` computed with ``kernel``'s set-up options, or ``None``."""
    options = getattr(kernel, "setup_options", None)  # AutoSampler computes its own
    if setups is None or options is None:
        return None
    return next((setup for known, setup in setups if known == options), None)


@functools.cache
def _setups(model: str) -> list:
    """The shared warmups of a model's cells in this process (:func:`run_cell`'s ``setups``)."""
    return []


@functools.cache
def cell(sampler: str, model: str) -> Cell:
    """The suite's run of ``(sampler, model)``, once per process; cells whose kernels ask for
    the same set-up share it (:func:`run_cell`)."""
    return run_cell(sampler, model, setups=_setups(model))


GROUP_TOL = 0.15
"""Root mean square of |Δmean| / sd_ref over a model's group effects."""


def group_verdict(sampler: str, model: str, group_sites: tuple[str, ...] = ("z",)) -> tuple:
    """``(ok, line)`` of a mixed model's cell: the global latents within :data:`MEAN_TOL` and
    :data:`SD_TOL` in the maximum, the group effects (``group_sites``) within
    :data:`GROUP_TOL` and :data:`SD_TOL` in the root mean square over the groups (a maximum
    over thousands of coordinates reads the chains' Monte Carlo error, not a bias)."""
    result = cell(sampler, model)
    if result.error is not None:
        return False, result.describe()
    globals_ = [s for s in result.mean_err if s not in group_sites]
    worst_mean = max(result.mean_err[s] for s in globals_)
    worst_sd = max(result.sd_err[s] for s in globals_)
    rms_mean = max(result.rms_mean_err[s] for s in group_sites)
    rms_sd = max(result.rms_sd_err[s] for s in group_sites)
    ok = worst_mean <= MEAN_TOL and worst_sd <= SD_TOL and rms_mean <= GROUP_TOL
    ok = ok and rms_sd <= SD_TOL
    line = (
        f"{sampler} on {model}: globals max |Δmean|/sd {worst_mean:.3g}, max |sd ratio − 1| "
        f"{worst_sd:.3g}; group effects RMS |Δmean|/sd {rms_mean:.3g}, RMS |sd ratio − 1| "
        f"{rms_sd:.3g}; {result.seconds:.0f} s; self-check "
        f"{'warned: ' + result.warnings[0] if result.warned else 'silent'}"
    )
    return ok, line


STRAIGHT_FLOW_KERNELS = ("sbps", "psbps", "bps", "sigmabps")
"""The bouncy particles with straight flows (their hierarchical tolerance cells are
``slow_mixing`` in ``test_hierarchical.py``)."""


# ---------------------------------------------------------------- the three tests of a cell
# Each tests/robustness/test_<model>.py imports these and parametrizes them over its models
# with :func:`generate_cells` (its ``pytest_generate_tests``), so the checks are written once.


def test_defaults_within_tolerance(sampler: str, model: str, request: Any) -> None:
    """The strict target: max |Δmean|/sd_ref ≤ 0.25 and max |sd ratio − 1| ≤ 0.30.

    A cell marked ``slow_mixing`` (:func:`generate_cells`' ``slow_cells``: the suite's run
    is too short for its Monte Carlo error to fit the tolerance) is held to the sd tolerance
    and to means within the tolerance or :data:`MCSE_Z` Monte Carlo standard errors."""
    result = cell(sampler, model)
    if request.node.get_closest_marker("slow_mixing") is not None:
        assert result.within_monte_carlo_error, "defaults are wrong: " + result.describe()
        return
    assert result.ok, "defaults are wrong: " + result.describe()


def test_miss_is_flagged_by_self_check(sampler: str, model: str) -> None:
    """A run that misses the target must have warned (or raised: not silent either)."""
    result = cell(sampler, model)
    assert result.ok or result.warned or result.error is not None, (
        "a wrong run went without a warning: " + result.describe()
    )


def test_no_divergence_or_freeze(sampler: str, model: str) -> None:
    """No non-finite draw and no chain with zero variance."""
    import pytest

    result = cell(sampler, model)
    if result.error is not None:
        pytest.fail(result.describe())
    assert result.nonfinite == 0 and not result.frozen, result.describe()


def generate_cells(
    metafunc: Any,
    model_names: list[str],
    samplers: tuple[str, ...] | None = None,
    slow_cells: dict[tuple[str, str], str] | None = None,
) -> None:
    """Parametrize the cell tests over (sampler, model).  ``slow_cells`` maps a cell to the
    measured reason why the suite's run is too short for its Monte Carlo error to fit the
    mean tolerance: that cell's tolerance test is marked ``slow_mixing`` (strict, with the
    bound of :attr:`Cell.within_monte_carlo_error`).  The must-warn test and the divergence
    test are the same everywhere: a kernel that misses the tolerance must still neither
    diverge nor freeze, and must warn (issue 14, item 6).  ``samplers``: only these (a
    model's cells split over several files, which ``pytest --dist loadfile`` runs on
    different workers)."""
    import pytest

    if {"sampler", "model"} <= set(metafunc.fixturenames):
        names = [s for s in sampler_names() if samplers is None or s in samplers]
        cells = [(s, m) for m in model_names for s in names]
        if metafunc.function.__name__ == "test_defaults_within_tolerance" and slow_cells:
            cells = [
                pytest.param(*c, marks=pytest.mark.slow_mixing(reason=slow_cells[c]))
                if c in slow_cells
                else pytest.param(*c)
                for c in cells
            ]
        metafunc.parametrize(("sampler", "model"), cells)
