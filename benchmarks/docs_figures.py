"""The figures of the sampler pages, from tiny runs of the package's own kernels.

Writes six PNG files into ``docs/_static/figures/`` (or ``--out``):

* ``pdmp_trajectories.png``: the continuous paths of BPS (straight lines with bounces) and the
  Boomerang (elliptical arcs; default diagonal reference, and ``curvature="full_hessian"``) on
  a correlated 2-d Gaussian posterior, over its contours;
* ``langevin_paths.png``: the step-size family's discrete paths (SGLD, SGBD, HAMCMC at their
  defaults, one step per draw, minibatches of 5 of the 20 data) on the same posterior;
* ``thinning.png``: Poisson thinning as the BPS and Boomerang runs continue: the event rate
  λ(t), the adaptive envelope the kernels propose from, and the proposed and accepted times;
* ``traces.png``: ArviZ trace plots of a PDMP (Boomerang) and a step-size kernel (SGLD) on a
  3-weight logistic regression;
* ``bias_vs_step.png``: SGLD's error in the posterior sd and mean against its fixed step size,
  on a 2-d Gaussian posterior with known moments;
* ``sbps_bias_vs_k.png``: SBPS's errors against NUTS and its bound-violation rate against its
  band width k, on the SBPS paper's logistic regression with plain minibatches.

Every run is short (2-d or 3-d targets) and seeded, so the figures are the same at each run;
the whole script takes about three minutes on two CPU cores.  Run it from the repository root::

    .venv/bin/python benchmarks/docs_figures.py                  # every figure
    .venv/bin/python benchmarks/docs_figures.py --only thinning  # one of them

The 2-d Gaussian is the linear Gaussian model of ``models/linear_gaussian.py`` (θ ~ N(0, I),
x_n ~ N(a_nᵀθ, σ²) with correlated covariates), whose posterior is known in closed form.
The PDMP runs use the full batch and ``precondition=None``, so that the kernels move in the
model's own coordinates and the figures show the paths the kernels follow there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import pplsamplers  # noqa: E402  (before JAX: it sets JAX's options, see its docstring)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's models/ folder

import arviz as az  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

from models import linear_gaussian  # noqa: E402
from pplsamplers import BPS, HAMCMC, SBPS, SGBD, SGLD, Boomerang, to_arviz  # noqa: E402
from pplsamplers.datasets import logistic_regression  # noqa: E402
from pplsamplers.kernels.pdmp import boomerang, bps  # noqa: E402
from pplsamplers.kernels.pdmp.interpolation import (  # noqa: E402
    envelope_rate,
    fresh_envelope,
    interpolation_thinning,
)

OUT = os.path.join(ROOT, "docs", "_static", "figures")
FIGSIZE = (8.0, 3.5)
DPI = 110
FIGURES = (
    "pdmp_trajectories",
    "langevin_paths",
    "thinning",
    "traces",
    "bias_vs_step",
    "sbps_bias_vs_k",
)

# the correlated 2-d Gaussian of the PDMP figures: N = 20 data, covariates with correlation 0.95
GAUSSIAN = dict(N=20, D=2, correlation=0.95, seed=1)
PDMP_INTERVAL = 0.02  # Δ between draws (seconds of BPS's clock, radians of the Boomerang's)
PDMP_DRAWS = 600  # 12 time units of path
PDMP_REFRESH = 0.5  # refreshments per time unit (fewer than the default 1: clearer paths)


# ----------------------------------------------------------------------------- helpers
def gaussian_target() -> tuple[tuple, dict, np.ndarray, np.ndarray]:
    """``(model_args, model_kwargs, mean, covariance)`` of the PDMP figures' posterior."""
    args, kwargs = linear_gaussian.load_data(**GAUSSIAN)
    mean, cov = linear_gaussian.posterior(*args, **kwargs)
    return args, kwargs, mean, cov


def gaussian_contours(ax: Any, mean: np.ndarray, cov: np.ndarray, levels: int = 4) -> None:
    """Contours of N(mean, cov) at 1, 2, ... Mahalanobis radii, on ``ax``."""
    sd = np.sqrt(np.diag(cov))
    grid = [np.linspace(m - 3.3 * s, m + 3.3 * s, 200) for m, s in zip(mean, sd, strict=True)]
    g0, g1 = np.meshgrid(*grid)
    d = np.stack([g0 - mean[0], g1 - mean[1]], axis=-1)
    r2 = np.einsum("...i,ij,...j->...", d, np.linalg.inv(cov), d)
    ax.contour(
        g0, g1, r2, levels=[k**2 for k in range(1, levels + 1)], colors="0.7", linewidths=0.8
    )
    ax.contourf(g0, g1, np.exp(-0.5 * r2), levels=12, cmap="Greys", alpha=0.35)


def run_pdmp(cls: type, key: int, **options: Any) -> tuple[Any, MCMC]:
    """A full-batch BPS or Boomerang run on the 2-d Gaussian, with draws Δ apart."""
    args, kwargs, _, _ = gaussian_target()
    kernel = cls(
        linear_gaussian.model,
        subsample_size=GAUSSIAN["N"],  # full batch: exact gradients
        control_variate=False,
        precondition=None,  # the model's own coordinates (no whitening)
        sample_interval=PDMP_INTERVAL,
        refresh_rate=PDMP_REFRESH,
        self_check=False,
        **options,
    )
    mcmc = MCMC(kernel, num_warmup=200, num_samples=PDMP_DRAWS, progress_bar=False)
    mcmc.run(jax.random.key(key), *args, **kwargs)
    return kernel, mcmc


_PDMP_RUNS: dict[str, tuple[Any, MCMC]] = {}


def pdmp_runs() -> dict[str, tuple[Any, MCMC]]:
    """BPS, the Boomerang with its default (diagonal) reference and with the dense
    ``curvature="full_hessian"`` one: made once, shared by two figures."""
    if not _PDMP_RUNS:
        _PDMP_RUNS["BPS"] = run_pdmp(BPS, 0)
        _PDMP_RUNS["Boomerang"] = run_pdmp(Boomerang, 0)
        _PDMP_RUNS["Boomerang, full Hessian"] = run_pdmp(Boomerang, 0, curvature="full_hessian")
    return _PDMP_RUNS


def save(fig: Any, out: str, name: str) -> str:
    """Write ``fig`` as ``<out>/<name>.png`` and close it."""
    path = os.path.join(out, f"{name}.png")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- figure 1
def figure_trajectories(out: str) -> str:
    """BPS's and the Boomerang's paths, from many draws a short time Δ apart.

    Each draw is the position at the next grid time, so joining consecutive draws traces the
    continuous path up to chords of length Δ × speed.  ``num_bounces`` and ``num_refreshes``
    (``sample_stats``) tell in which interval an event happened; it is marked at the draw that
    ends that interval.
    """
    _, _, mean, cov = gaussian_target()
    fig, axes = plt.subplots(1, 3, figsize=FIGSIZE, sharex=True, sharey=True)
    titles = {
        "BPS": "BPS",
        "Boomerang": "Boomerang, diagonal reference",
        "Boomerang, full Hessian": 'Boomerang, "full_hessian"',
    }
    for ax, (name, (kernel, mcmc)) in zip(axes, pdmp_runs().items(), strict=True):
        theta = np.asarray(mcmc.get_samples()["theta"])
        extra = mcmc.get_extra_fields()
        bounces = np.asarray(extra["num_bounces"]) > 0
        refreshes = np.asarray(extra["num_refreshes"]) > 0
        gaussian_contours(ax, mean, cov)
        ax.plot(theta[:, 0], theta[:, 1], color="C0", lw=0.9, label="path")
        ax.plot(*theta[bounces].T, "o", ms=3, color="C3", label="bounce")
        ax.plot(*theta[refreshes].T, "s", ms=3, mfc="none", color="C2", label="refreshment")
        ax.plot(*theta[0], "k>", ms=5, label="start")
        if name != "BPS":
            # the reference mean x*, mapped from the kernel's coordinates to the model's
            centre = kernel.prepared.context.whitening.to_x(mcmc.last_state.params.reference.mean)
            ax.plot(*np.asarray(centre), "k+", ms=9, mew=1.5, label="reference mean x*")
        ax.set_title(titles[name], fontsize=9)
        ax.set_xlabel(r"$\theta_0$")
        print(
            f"  {name}: {int(np.sum(extra['num_bounces']))} bounces, "
            f"{int(np.sum(extra['num_refreshes']))} refreshments in "
            f"{PDMP_DRAWS * PDMP_INTERVAL:g} time units"
        )
    axes[0].set_ylabel(r"$\theta_1$")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return save(fig, out, "pdmp_trajectories")


# ----------------------------------------------------------------------------- figure 1b
LANGEVIN_STEPS = 150  # draws shown, one kernel step each


def figure_langevin_paths(out: str) -> str:
    """SGLD's, SGBD's and HAMCMC's first steps on the PDMP figures' posterior.

    The kernels run at their defaults (whitened coordinates of the shared warmup, automatic
    step) with ``steps_per_sample=1``, so consecutive draws are consecutive steps: each is a
    jump, not a continuous path, and the noisy minibatch gradient shows in its length.
    """
    args, kwargs, mean, cov = gaussian_target()
    fig, axes = plt.subplots(1, 3, figsize=FIGSIZE, sharex=True, sharey=True)
    for ax, cls in zip(axes, (SGLD, SGBD, HAMCMC), strict=True):
        kernel = cls(linear_gaussian.model, subsample_size=5, steps_per_sample=1, self_check=False)
        mcmc = MCMC(kernel, num_warmup=100, num_samples=LANGEVIN_STEPS, progress_bar=False)
        mcmc.run(jax.random.key(0), *args, **kwargs)
        theta = np.asarray(mcmc.get_samples()["theta"])
        gaussian_contours(ax, mean, cov)
        ax.plot(theta[:, 0], theta[:, 1], "-o", color="C0", lw=0.6, ms=2, label="steps")
        ax.plot(*theta[0], "k>", ms=5, label="start")
        ax.set_title(f"{cls.__name__}, defaults, n = 5 of 20", fontsize=9)
        ax.set_xlabel(r"$\theta_0$")
        step = np.linalg.norm(np.diff(theta, axis=0), axis=1)
        print(f"  {cls.__name__}: median step {np.median(step):.3g} (posterior sds "
              f"{np.sqrt(np.diag(cov)).round(3).tolist()})")  # fmt: skip
    axes[0].set_ylabel(r"$\theta_1$")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return save(fig, out, "langevin_paths")


# ----------------------------------------------------------------------------- figure 2
def thinning_record(
    kernel: Any, mcmc: MCMC, dynamics: Any, key: int, events: int = 3, max_time: float = 8.0
) -> dict[str, list]:
    """Replay the kernel's thinning one rate evaluation at a time, from the run's last state.

    :func:`~pplsamplers.kernels.pdmp.interpolation.interpolation_thinning` is the function the
    kernels call; with ``max_evaluations=1`` each call makes one rate evaluation and returns
    the envelope to continue with (relative times throughout, so the chain of calls follows
    the same algorithm).  Before each proposal the envelope is read with
    :func:`~pplsamplers.kernels.pdmp.interpolation.envelope_rate`, as the kernel reads it.  An
    accepted proposal is a bounce: the velocity is reflected and the envelope restarts from
    G(0⁺) = −G(τ), as :func:`pplsamplers.kernels.pdmp.events.make_next_event` does.
    Refreshments and grid times are left out (``horizon=inf``).  Recording starts at the first
    bounce and ends at the ``events``-th one after it, or ``max_time`` later.
    """
    state, estimator = mcmc.last_state, kernel.estimator
    params = state.params
    arguments = dict(kernel.options.thinning.thinning_arguments(estimator), max_evaluations=1)
    alpha, flow = arguments["alpha"], dynamics.flow(params)

    def rate_along(x: jax.Array, v: jax.Array) -> Callable:
        def rate_fn(rng_key: jax.Array, t: jax.Array) -> tuple:
            x_t, v_t = flow.move(x, v, t)
            idx = estimator.sample_indices(rng_key)
            value, _ = dynamics.rate(estimator, params, x_t, v_t, idx)
            return value, jnp.zeros((), value.dtype), idx  # full batch: no noise

        return rate_fn

    @jax.jit
    def one_evaluation(rng_key: jax.Array, x: jax.Array, v: jax.Array, envelope: Any) -> Any:
        return interpolation_thinning(
            rng_key,
            rate_along(x, v),
            envelope,
            horizon=jnp.inf,
            t_init=params.t_init,
            max_extrapolation=params.max_extrapolation,
            **arguments,
        )

    @jax.jit
    def rates_on(x: jax.Array, v: jax.Array, times: jax.Array) -> jax.Array:
        rate_fn = rate_along(x, v)
        return jax.vmap(lambda t: rate_fn(jax.random.key(0), t)[0])(times)

    x, v, envelope = state.kernel_state
    record: dict[str, list] = {k: [] for k in ("path", "envelope", "proposals", "other")}
    clock, bounces, recording = 0.0, 0, False
    for rng_key in jax.random.split(jax.random.key(key), 500):
        valid, known = bool(envelope.valid), bool(envelope.start_known)
        h0, a = envelope_rate(
            envelope,
            0.0,
            alpha,
            arguments["noise_margin"],
            arguments["fit_margin"],
            params.max_extrapolation,
        )
        result = one_evaluation(rng_key, x, v, envelope)
        dt = float(result.time)
        after = result.envelope
        if recording:
            if not valid and not known:  # a fresh envelope: G now
                record["other"].append((clock, clock, float(after.rate)))
            elif not valid:  # the envelope's second point, t_init ahead (the particle stays)
                ahead = params.t_init - after.time
                g = after.rate + after.slope * ahead
                record["other"].append((clock, clock + float(params.t_init), float(g)))
            else:
                record["envelope"].append((clock, dt, float(h0), float(a)))
                bound = max(float(h0 + a * dt), 0.0)
                if bool(result.accepted):
                    record["proposals"].append((clock + dt, float(result.rate), True, bound))
                elif bool(after.valid):  # a rejected proposal re-anchors the line
                    record["proposals"].append((clock + dt, float(after.rate), False, bound))
                else:  # the horizon cap: the particle moves there and the envelope restarts
                    record["other"].append((clock, clock + dt, float(after.rate)))
        x_next, v_next = flow.move(x, v, result.time)
        if bool(result.accepted):
            if recording:
                record["path"].append((clock, dt, x, v))
                bounces += 1
            recording, clock = True, (clock + dt if recording else 0.0)
            v_next = dynamics.reflect(estimator, params, x_next, v_next, result.aux)
            start = fresh_envelope(x.dtype, -result.rate, after.fit)
            envelope = start._replace(noise=result.noise)
            x, v = x_next, v_next
            if bounces == events:
                break
            continue
        if recording and dt > 0:
            record["path"].append((clock, dt, x, v))
            clock += dt
        x, v, envelope = x_next, v_next, after
        if clock >= max_time:
            break
    # an envelope's second point lies on the path only if no bounce comes first
    bounce_times = [t for t, _, accepted, _ in record["proposals"] if accepted]
    record["other"] = [
        (t, g)
        for made, t, g in record["other"]
        if t <= min([b for b in bounce_times if b >= made] or [np.inf])
    ]
    # the true rate along each piece of the path
    curve = []
    for start, dt, x0, v0 in record["path"]:
        times = jnp.linspace(0.0, dt, 200)  # one shape: one compilation
        curve.append((start + np.asarray(times), np.asarray(rates_on(x0, v0, times))))
    record["curve"] = curve
    return record


def figure_thinning(out: str) -> str:
    """λ(t), the adaptive envelope and the proposals along BPS's and the Boomerang's paths."""
    runs = pdmp_runs()
    dynamics = {"BPS": bps.dynamics(), "Boomerang": boomerang.dynamics()}
    fig, axes = plt.subplots(1, 2, figsize=FIGSIZE)
    for ax, name in zip(axes, ("BPS", "Boomerang"), strict=True):
        kernel, mcmc = runs[name]
        record = thinning_record(kernel, mcmc, dynamics[name], key=7)
        for i, (t, g) in enumerate(record["curve"]):
            ax.plot(t, np.maximum(g, 0.0), color="k", lw=1.4, label="rate λ(t)" if i == 0 else None)
        for i, (start, dt, h0, a) in enumerate(record["envelope"]):
            s = np.linspace(0.0, dt, 50)
            ax.plot(
                start + s,
                np.maximum(h0 + a * s, 0.0),
                color="C1",
                lw=1.2,
                label="envelope h(t), the adaptive bound" if i == 0 else None,
            )
            ax.vlines(start + dt, 0.0, max(h0 + a * dt, 0.0), color="C1", lw=0.6, ls=":")
        proposals = np.array(record["proposals"], dtype=float).reshape(-1, 4)
        rejected, accepted = proposals[proposals[:, 2] == 0], proposals[proposals[:, 2] == 1]
        ax.plot(rejected[:, 0], np.maximum(rejected[:, 1], 0), "o", mfc="white", color="C0",
                ms=5, label="proposal, rejected")  # fmt: skip
        ax.plot(accepted[:, 0], accepted[:, 1], "o", color="C3", ms=5,
                label="proposal, accepted (bounce)")  # fmt: skip
        for t in accepted[:, 0]:
            ax.axvline(t, color="C3", lw=0.6, ls="--")
        other = np.array(record["other"], dtype=float).reshape(-1, 2)
        ax.plot(other[:, 0], np.maximum(other[:, 1], 0), "x", color="0.4", ms=4,
                label="rate evaluation: envelope start, horizon cap")  # fmt: skip
        unit = "s" if name == "BPS" else "rad"
        ax.set_xlabel(f"time along the path ({unit})")
        ax.set_title(name, fontsize=10)
        ax.set_ylim(bottom=0.0)
        above = int(np.sum(np.maximum(proposals[:, 1], 0.0) > proposals[:, 3] * (1 + 1e-5)))
        print(
            f"  thinning {name}: {len(proposals)} proposals, {len(accepted)} bounces, "
            f"{len(other)} other rate evaluations, {above} proposals with λ above the envelope"
        )
    axes[0].set_ylabel("event rate")
    axes[0].legend(loc="upper left", fontsize=7, framealpha=0.9)
    fig.tight_layout()
    return save(fig, out, "thinning")


# ----------------------------------------------------------------------------- figure 3
def figure_traces(out: str) -> str:
    """ArviZ trace plots of a Boomerang run and an SGLD run on the same logistic regression."""
    (X, y), _ = logistic_regression.load_data(N=2000, d=3)
    posteriors = []
    for name, cls in (("Boomerang", Boomerang), ("SGLD", SGLD)):
        kernel = cls(logistic_regression.model, self_check=False)  # default options
        mcmc = MCMC(
            kernel,
            num_warmup=300,
            num_samples=500,
            num_chains=2,
            chain_method="vectorized",
            progress_bar=False,
        )
        mcmc.run(jax.random.key(1), X, y)
        posterior = to_arviz(mcmc, check=False)["posterior"].to_dataset()
        posteriors.append(posterior[["w"]].rename({"w": f"w ({name})"}))
    tree = xr.DataTree.from_dict({"posterior": xr.merge(posteriors)})
    plots = az.plot_trace_dist(
        tree,
        compact=True,
        aes={"color": ["w_dim_0"], "linestyle": ["chain"]},
        figure_kwargs={"figsize": FIGSIZE},
    )
    fig = plots.viz["figure"].item()
    fig.tight_layout()
    return save(fig, out, "traces")


# ----------------------------------------------------------------------------- figure 4
SGLD_TARGET = dict(N=1000, D=2, correlation=0.9, seed=2)
SGLD_STEPS = (0.4, 0.2, 0.1, 0.05)  # ε in whitened coordinates (unit posterior scale)
SGLD_CHAINS, SGLD_DRAWS = 8, 1000


def sgld_errors(step: float, subsample_size: int, key: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Per-chain sd ratios and standardised mean errors, ``(chains, D)`` each, of one SGLD run
    at a fixed step, and the set-up's note on the control variate.

    Each draw is ⌈2/ε⌉ steps (about two posterior-scale relaxation times), so the draws are
    nearly independent and every step size gets about the same Monte Carlo error.
    """
    args, kwargs = linear_gaussian.load_data(**SGLD_TARGET)
    mean, cov = linear_gaussian.posterior(*args, **kwargs)
    sd = np.sqrt(np.diag(cov))
    kernel = SGLD(
        linear_gaussian.model,
        step_size=step,
        subsample_size=subsample_size,
        steps_per_sample=int(np.ceil(2 / step)),
        self_check=False,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=100,
        num_samples=SGLD_DRAWS,
        num_chains=SGLD_CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(key), *args, **kwargs)
    theta = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"], dtype=np.float64)
    note = kernel.setup.notes.get("control_variate", "")
    return theta.std(axis=1) / sd, (theta.mean(axis=1) - mean) / sd, note


def figure_bias(out: str) -> str:
    """SGLD's sd and mean errors against ε, full batch and minibatch, with the exact-gradient
    Euler–Maruyama prediction for the sd."""
    N = SGLD_TARGET["N"]
    fig, (ax_sd, ax_mean) = plt.subplots(1, 2, figsize=FIGSIZE)
    steps = np.asarray(SGLD_STEPS)
    fine = np.geomspace(steps.min() * 0.8, steps.max() * 1.25, 100)
    # exact gradients on a target that is N(0, I) in the whitened coordinates:
    # x <- (1 - ε) x + √(2ε) ξ has variance 1 / (1 - ε/2), so sd error (1 - ε/2)^(-1/2) - 1
    ax_sd.plot(fine, 100 * ((1 - fine / 2) ** -0.5 - 1), color="0.5", lw=1, ls="--",
               label="exact gradients: (1 − ε/2)$^{-1/2}$ − 1")  # fmt: skip
    series = ((f"full batch, n = N = {N}", N), ("minibatch, n = 100, control variate", 100))
    for k, (label, n) in enumerate(series):
        sd_err, sd_se, mean_err, mean_se = [], [], [], []
        for j, step in enumerate(SGLD_STEPS):
            ratio, shift, note = sgld_errors(step, n, key=10 * k + j)
            per_chain = ratio.mean(axis=1) - 1  # averaged over the two coordinates
            sd_err.append(per_chain.mean())
            sd_se.append(per_chain.std(ddof=1) / np.sqrt(len(per_chain)))
            mean_err.append(shift.mean(axis=0))
            mean_se.append(shift.std(axis=0, ddof=1) / np.sqrt(shift.shape[0]))
            print(
                f"  SGLD {label}, ε = {step}: sd error {100 * sd_err[-1]:+.1f} % "
                f"(se {100 * sd_se[-1]:.1f}), mean error {np.round(mean_err[-1], 3)} sd "
                f"(se {np.round(mean_se[-1], 3)}); control variate: {note.split(':')[0]}"
            )
        offset = 1.03 if k else 0.97  # side by side, so that the error bars stay apart
        ax_sd.errorbar(steps * offset, 100 * np.asarray(sd_err), yerr=200 * np.asarray(sd_se),
                       fmt="o-", color=f"C{k}", ms=4, capsize=2, label=label)  # fmt: skip
        mean_err, mean_se = np.asarray(mean_err), np.asarray(mean_se)
        for i, marker in enumerate("os"):
            ax_mean.errorbar(
                steps * offset * (1.015 if i else 0.985),
                mean_err[:, i],
                yerr=2 * mean_se[:, i],
                fmt=marker,
                mfc="white" if i else None,
                color=f"C{k}",
                ms=4,
                capsize=2,
                label=f"θ{'₀₁'[i]}, {label.split(',')[0]}",
            )
    for ax in (ax_sd, ax_mean):
        ax.set_xscale("log")
        ax.set_xticks(steps, [f"{s:g}" for s in steps])
        ax.minorticks_off()
        ax.set_xlabel("step size ε (whitened coordinates)")
        ax.axhline(0.0, color="k", lw=0.6)
    ax_sd.set_ylabel("sd error (%), average of θ₀ and θ₁")
    ax_mean.set_ylabel("mean error (posterior sd)")
    reach = max(np.max(np.abs(line.get_ydata())) for line in ax_mean.lines)
    ax_mean.set_ylim(-1.2 * reach, 2.0 * reach)  # room for the legend above the points
    ax_sd.legend(fontsize=7, loc="upper left")
    ax_mean.legend(fontsize=7, loc="upper center", ncol=2)
    ax_sd.set_title("posterior sd (bars: ±2 Monte Carlo se)", fontsize=10)
    ax_mean.set_title("posterior mean (bars: ±2 Monte Carlo se)", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "bias_vs_step")


# ----------------------------------------------------------------------------- figure 5
SBPS_KS = (0.5, 1.0, 2.0, 3.0, 5.0)
SBPS_CHAINS, SBPS_DRAWS = 4, 3000
SBPS_REFERENCE = os.path.join(ROOT, "tests", "data", "logreg_nuts_n1000_d20_ill.json")


def sbps_errors(k: float, key: int, reference: dict) -> tuple[float, float, float]:
    """(max |Δmean| / sd, max |sd ratio − 1|, bound violations per proposal) of one SBPS run
    at band width ``k`` on the paper's logistic regression (§7.1: d = 20, N = 1000, n = 100,
    plain minibatches), against ``reference``, a long NumPyro NUTS run (``SBPS_REFERENCE``)."""
    (X, y), _ = logistic_regression.load_data(**reference["spec"]["data"])
    kernel = SBPS(
        logistic_regression.model, k=k, subsample_size=100, control_variate=False, self_check=False
    )
    mcmc = MCMC(
        kernel,
        num_warmup=500,
        num_samples=SBPS_DRAWS,
        num_chains=SBPS_CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(key), X, y)
    w = np.asarray(mcmc.get_samples()["w"], dtype=np.float64)
    mean, sd = np.asarray(reference["mean"]), np.asarray(reference["sd"])
    extra = mcmc.get_extra_fields()
    violations = float(np.sum(extra["bound_violations"])) / float(np.sum(extra["num_proposals"]))
    return (
        float(np.max(np.abs(w.mean(0) - mean) / sd)),
        float(np.max(np.abs(w.std(0) / sd - 1.0))),
        violations,
    )


def figure_sbps_k(out: str) -> str:
    """SBPS's worst mean and sd errors and its bound-violation rate against k (eq. 9's band
    width in predictive sds): a violation lets the particle run past the true event rate,
    which is SBPS's bias (§4.1)."""
    import json

    with open(SBPS_REFERENCE) as handle:
        reference = json.load(handle)
    rows = np.asarray([sbps_errors(k, 20 + i, reference) for i, k in enumerate(SBPS_KS)])
    for k, (mean_error, sd_error, violations) in zip(SBPS_KS, rows, strict=True):
        print(
            f"  SBPS k = {k:g}: max |Δmean| {mean_error:.3f} sd, max |sd − 1| "
            f"{100 * sd_error:.1f} %, violations {100 * violations:.3f} % of proposals"
        )
    fig, (ax_error, ax_rate) = plt.subplots(1, 2, figsize=FIGSIZE)
    ax_error.semilogy(SBPS_KS, rows[:, 0], "o-", ms=4, label="max |Δmean| / sd")
    ax_error.semilogy(SBPS_KS, rows[:, 1], "s--", ms=4, label="max |sd ratio − 1|")
    ax_error.set_ylabel("error against NUTS (20 weights)")
    ax_error.legend(fontsize=7)
    ax_error.set_title(f"errors ({SBPS_CHAINS} chains × {SBPS_DRAWS} draws)", fontsize=10)
    ax_rate.semilogy(SBPS_KS, np.maximum(rows[:, 2], 1e-6), "o-", color="C3", ms=4)
    ax_rate.set_ylabel("bound violations per proposal")
    ax_rate.set_title("band violations", fontsize=10)
    for ax in (ax_error, ax_rate):
        ax.set_xlabel("k (band width, predictive sds)")
        ax.axvline(3.0, color="0.6", lw=0.8, ls=":")  # the default
    fig.tight_layout()
    return save(fig, out, "sbps_bias_vs_k")


# ----------------------------------------------------------------------------- main
MAKERS = {
    "pdmp_trajectories": figure_trajectories,
    "langevin_paths": figure_langevin_paths,
    "thinning": figure_thinning,
    "traces": figure_traces,
    "bias_vs_step": figure_bias,
    "sbps_bias_vs_k": figure_sbps_k,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=OUT, help="folder of the PNG files")
    parser.add_argument("--only", nargs="+", choices=FIGURES, default=list(FIGURES))
    options = parser.parse_args(argv)
    os.makedirs(options.out, exist_ok=True)
    plt.rcParams.update({"font.size": 8, "axes.titlesize": 10})
    started = time.perf_counter()
    for name in options.only:
        begun = time.perf_counter()
        path = MAKERS[name](options.out)
        size = os.path.getsize(path) / 1024
        print(f"{name}: {path} ({size:.0f} kB, {time.perf_counter() - begun:.1f} s)")
    print(f"total {time.perf_counter() - started:.1f} s (pplsamplers {pplsamplers.__version__})")


if __name__ == "__main__":
    main()
