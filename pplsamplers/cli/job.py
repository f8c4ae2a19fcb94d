"""The job behind ``pplsamplers demo`` and ``fit``: build the sampler, run NumPyro's MCMC,
print the summary with its checks, and write the trace plot and the netCDF file."""

from __future__ import annotations

import importlib.util
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import arviz as az
import jax
from numpyro.infer import MCMC

from pplsamplers.checkpoint import run_checkpointed
from pplsamplers.diagnostics import epochs, min_ess
from pplsamplers.diagnostics.output import to_arviz
from pplsamplers.model import discrete_latent_sites, model_info
from pplsamplers.registry import SAMPLERS, make_kernel
from pplsamplers.select import AutoSampler


def load_model_file(path: str) -> Any:
    """Import a model file; modules next to it (``import helpers``) and its folder as a package
    (``from models import y`` for ``models/x.py``) are importable while it loads."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"model file {path!r} does not exist.")
    spec = importlib.util.spec_from_file_location(f"pplsamplers_user_model_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    folder = file.resolve().parent
    added = [str(folder), str(folder.parent)]
    sys.path[:0] = added
    try:
        spec.loader.exec_module(module)
    finally:
        for entry in added:
            if entry in sys.path:
                sys.path.remove(entry)
    for name in ("model", "load_data"):
        if not callable(getattr(module, name, None)):
            raise ValueError(
                f"{path} must define `{name}(...)`: `model` is the NumPyro model and `load_data` "
                "returns (model_args, model_kwargs)."
            )
    return module


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def parse_data_options(pairs: Sequence[str]) -> dict[str, Any]:
    options = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--data expects KEY=VALUE, got {pair!r}.")
        key, value = pair.split("=", 1)
        options[key.strip()] = _parse_value(value.strip())
    return options


def run_job(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    *,
    name: str,
    sampler: str,
    num_warmup: int,
    num_samples: int,
    num_chains: int,
    out_dir: str,
    seed: int = 0,
    subsample_size: int | None = None,
    step_size: float | None = None,
    control_variate: bool | None = None,
    thinning: int = 1,
    progress_bar: bool = True,
    log_likelihood: bool = False,
    checkpoint: str | None = None,
    checkpoint_every: int = 100,
    resume: bool = False,
    print_fn: Callable[[str], None] = print,
) -> Any:
    """Run MCMC for ``model``, print the summary, write ``<name>_trace.png`` and ``<name>.nc``,
    and return the ArviZ DataTree.

    ``log_likelihood=True`` adds the full-data pointwise log-likelihood group (for ``az.loo``),
    left out by default because its N values per draw dominate the file at large N.
    ``checkpoint`` (a directory) samples after warmup in segments of ``checkpoint_every``
    draws, checkpointing after warmup and each segment; ``resume`` continues the checkpoint
    there (:func:`pplsamplers.checkpoint.run_checkpointed`).
    """

    for arg, value in (("num_samples", num_samples), ("num_chains", num_chains)):
        if value < 1:
            raise ValueError(f"--{arg.replace('_', '-')} must be at least 1; got {value}.")
    if num_warmup < 0:
        raise ValueError(f"--num-warmup must be non-negative; got {num_warmup}.")
    if thinning < 1:
        raise ValueError(f"--thinning must be at least 1; got {thinning}.")
    given = dict(
        subsample_size=subsample_size, step_size=step_size, control_variate=control_variate
    )
    options = {k: v for k, v in given.items() if v is not None}  # None: the kernel's default
    if sampler == "auto":  # AutoSampler sits above the registry (it chooses among its kernels)
        kernel = AutoSampler(model, **options)
    else:
        kernel = make_kernel(sampler, model, **options)
    if sampler == "auto":  # decide before sampling, and say why
        decision = kernel.decide(model_args, model_kwargs)
        print_fn(decision.explain() + "\n")
    # NumPyro counts thinned-out draws in num_samples: run num_samples * thinning steps
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples * thinning,
        num_chains=num_chains,
        thinning=thinning,
        chain_method="vectorized",
        progress_bar=progress_bar,
    )
    chosen = kernel.decision.kernel if sampler == "auto" else sampler
    discrete = sampler == "auto" and kernel.decision.params.get("discrete", False)
    # plain NUTS reports its leapfrog steps, which give its epochs (one full gradient each)
    full_data = not SAMPLERS[chosen].minibatch
    extra_fields = ("num_steps",) if full_data and not discrete else ()
    start = time.perf_counter()
    if checkpoint is None:
        mcmc.run(jax.random.key(seed), *model_args, extra_fields=extra_fields, **model_kwargs)
    else:
        same = dict(model=name, sampler=sampler, seed=seed, num_warmup=num_warmup,
                    num_chains=num_chains, thinning=thinning, subsample_size=subsample_size,
                    step_size=step_size, control_variate=bool(control_variate))  # fmt: skip
        if control_variate is False:  # a key of its own: older checkpoints resume unchanged
            same["no_control_variate"] = True
        with _StopOnSigterm(checkpoint) as stop:
            run_checkpointed(
                mcmc,
                jax.random.key(seed),
                *model_args,
                directory=checkpoint,
                every=checkpoint_every,
                num_samples=num_samples,
                resume=resume,
                metadata=same,
                extra_fields=extra_fields,
                print_fn=print_fn,
                on_checkpoint=stop.check,
                **model_kwargs,
            )
    jax.block_until_ready(mcmc.get_samples())
    seconds = time.perf_counter() - start
    idata = to_arviz(mcmc, log_likelihood=log_likelihood)
    idata.attrs["pplsamplers_sampler"] = sampler
    idata.attrs["pplsamplers_wall_seconds"] = seconds

    summary = az.summary(idata)
    print_fn(summary.to_string())
    ess = min_ess(idata)
    label = f"auto -> {chosen}" if sampler == "auto" else sampler
    line = f"\nsampler {label}: {num_chains} chains x {num_samples} draws in {seconds:.1f} s"
    line += f" | min bulk ESS {ess:.0f} | {ess / seconds:.1f} ESS/s"
    num_data = _data_size(kernel, model, model_args, model_kwargs)
    stats = getattr(idata, "sample_stats", {})
    if num_data and ("data_evals" in stats or "n_steps" in stats):
        # kept draws only carry their own step's cost: scale by thinning
        used = epochs(idata, num_data, thinning)
        line += f" | {used:.1f} epochs | {ess / max(used, 1e-12):.1f} ESS/epoch"
    if "diverging" in stats and not full_data:
        rejected = int(stats["diverging"].sum())
        if rejected:
            line += f" | {rejected} non-finite steps rejected"
    print_fn(line)
    notes = {
        k[len("pplsamplers_") :]: v for k, v in idata.attrs.items() if k.startswith("pplsamplers_")
    }
    shown = ("data_plate", "mode", "precondition", "control_variate", "subsample_size")
    for key in (*shown, "minibatch_rows"):
        if key in notes:
            print_fn(f"{key.replace('_', ' ')}: {notes[key]}")
    check = getattr(mcmc.sampler, "self_check_result", None)
    if check is not None:  # to_arviz ran the self-check (and warned if it failed)
        print_fn("\n".join(check.summary_lines()))

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png, nc = out / f"{name}_trace.png", out / f"{name}.nc"
    az.plot_trace_dist(idata, compact=True).savefig(png)  # trace + marginal, one row a site
    idata.to_netcdf(nc)
    print_fn(f"wrote {png} and {nc} ({_file_size(nc)})")
    return idata


class Stopped(Exception):
    """SIGTERM arrived while checkpointing: the run stopped at its next checkpoint."""


class _StopOnSigterm:
    """Note SIGTERM while checkpointing and stop at the next checkpoint (:meth:`check`).  The
    handler only sets a flag: raising from it could land inside JAX, which catches errors of
    its compilation cache, and a segment runs as one XLA call that a handler cannot cut."""

    def __init__(self, directory: str) -> None:
        self.directory, self.previous, self.requested = directory, None, False

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True

    def check(self, done: int) -> None:
        if self.requested:
            raise Stopped(
                f"stopped by SIGTERM with {done} draws per chain saved in {self.directory}; "
                f"continue with --resume {self.directory} and the same options."
            )

    def __enter__(self) -> _StopOnSigterm:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def _file_size(path: Path) -> str:
    size = float(path.stat().st_size)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")  # pragma: no cover


def _data_size(kernel: Any, model: Callable, model_args: tuple, model_kwargs: dict) -> int | None:
    """N of the data plate (None without one): what one epoch means."""

    setup = getattr(kernel, "setup", None)
    if setup is not None:
        return setup.potential.N
    if discrete_latent_sites(model, model_args, model_kwargs):
        return None
    info = model_info(model, model_args, model_kwargs)
    return info.data_size if info.data_plate is not None else None


__all__ = ["Stopped", "load_model_file", "parse_data_options", "run_job"]
