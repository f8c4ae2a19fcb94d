"""Command line: ``pplsamplers demo`` and ``pplsamplers fit path/to/model.py``.

Both run NumPyro's MCMC driver with a pplsamplers kernel, print the ArviZ summary with ESS
per second and per epoch, and write a trace plot (PNG) and the ArviZ DataTree (netCDF; the
pointwise log-likelihood only with ``--log-likelihood``).  Errors reach the user as one line
(``--debug`` shows the traceback).  ``fit --checkpoint DIR --checkpoint-every K`` samples in
segments of K draws, ``--resume DIR`` continues the last complete checkpoint
(:mod:`pplsamplers.checkpoint`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

DEMO_N, DEMO_D, DEMO_SUBSAMPLE = 100_000, 20, 1000
SMALL_DEMO = MappingProxyType(
    {"N": 2000, "d": 3, "num_samples": 100, "num_warmup": 100, "num_chains": 2}
)
"""``pplsamplers demo --small``: a run of a few seconds (after compilation) that checks an install."""
DEFAULT_SAMPLER = "auto"
"""The CLI's ``--sampler``: AutoSampler decides and explains."""
RUN_OPTIONS = "sampler num_warmup num_samples num_chains seed step_size log_likelihood".split()
"""The command-line options that reach :func:`run_job` under their own names, unchanged."""


def _build_parser() -> argparse.ArgumentParser:
    from pplsamplers.registry import SAMPLERS  # deferred: --help answers at once

    parser = argparse.ArgumentParser(
        prog="pplsamplers",
        description="Minibatch MCMC for NumPyro models, with ArviZ output.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on error")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser, samples: int, warmup: int) -> None:
        sub.add_argument(
            "--sampler",
            default=DEFAULT_SAMPLER,
            choices=sorted({*SAMPLERS, "auto"}),
            type=str.lower,
            help=f"kernel (default: {DEFAULT_SAMPLER})",
        )
        sub.add_argument("--num-samples", type=int, default=samples)
        sub.add_argument("--num-warmup", type=int, default=warmup)
        sub.add_argument("--num-chains", type=int, default=4)
        sub.add_argument(
            "--subsample-size",
            type=int,
            default=None,
            help="minibatch size n (default: the model plate's own, else chosen from the "
            "gradient-noise probe; AutoSampler chooses its own)",
        )
        sub.add_argument(
            "--step-size",
            type=float,
            default=None,
            help="step size for SG kernels (default: the kernel's automatic choice)",
        )
        sub.add_argument(
            "--control-variate",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="control-variate gradients anchored at the mode (default: automatic, on when "
            "the mode probe finds one mode)",
        )
        sub.add_argument(
            "--thinning",
            type=int,
            default=None,
            help="keep every k-th draw (default 1; the SGLD demo uses 5)",
        )
        sub.add_argument("--seed", type=int, default=0)
        sub.add_argument("--out", default=".", help="output directory (default: .)")
        sub.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        sub.add_argument(
            "--log-likelihood",
            action="store_true",
            help="also write the full-data pointwise log-likelihood (N values per draw; large)",
        )
        # accepted after the command too; SUPPRESS keeps a --debug given before it
        sub.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
        )

    demo = commands.add_parser("demo", help=f"logistic regression, N={DEMO_N:,}, d={DEMO_D}")
    common(demo, samples=1000, warmup=1000)
    demo.add_argument("--N", type=int, default=DEMO_N, help="number of data")
    demo.add_argument("--d", type=int, default=DEMO_D, help="number of covariates")
    demo.add_argument(
        "--small",
        action="store_true",
        help="a quick check of an install: N=2000, d=3, 2 chains x 100 draws "
        "(explicit --N, --d, --num-* options still win)",
    )

    fit = commands.add_parser("fit", help="fit the model defined in a Python file")
    fit.add_argument("model_file", help="file defining model(...) and load_data(...)")
    common(fit, samples=1000, warmup=1000)
    fit.add_argument(
        "--data",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="keyword arguments for load_data (e.g. N=1000 d=5)",
    )
    fit.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=None,
        help="sample in segments and checkpoint draws and sampler state to DIR atomically",
    )
    fit.add_argument(
        "--checkpoint-every",
        type=int,
        default=100,
        metavar="K",
        help="draws per chain between checkpoints (default: 100)",
    )
    fit.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="continue the run checkpointed in DIR (give the same options as the first run)",
    )
    return parser


def _checkpoint_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--checkpoint DIR``, ``--resume DIR`` (which implies it) and ``--checkpoint-every``."""
    directory, resume = getattr(args, "checkpoint", None), getattr(args, "resume", None)
    if directory and resume and Path(directory).resolve() != Path(resume).resolve():
        raise ValueError(f"--checkpoint {directory} and --resume {resume} differ; give one.")
    if resume and not Path(resume).is_dir():
        raise ValueError(f"--resume {resume}: no such directory.")
    if not (directory or resume):
        return {}
    return dict(
        checkpoint=directory or resume, checkpoint_every=args.checkpoint_every, resume=bool(resume)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pplsamplers`` command."""
    parser = _build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    # the JAX stack loads here, not for --help
    from pplsamplers.cli.job import Stopped, load_model_file, parse_data_options, run_job

    try:
        if args.command == "demo":
            from pplsamplers.datasets import logistic_regression as demo_model

            if args.small:  # only the options the user did not give
                for key, value in SMALL_DEMO.items():
                    flag = "--" + key.replace("_", "-")
                    if not any(a == flag or a.startswith(flag + "=") for a in argv):
                        setattr(args, key, value)
            model_args, model_kwargs = demo_model.load_data(N=args.N, d=args.d, seed=args.seed)
            model, name = demo_model.model, "demo"
            subsample = args.subsample_size
            if subsample is None and args.sampler != "auto":  # AutoSampler picks its own n
                subsample = min(DEMO_SUBSAMPLE, args.N)
            if args.thinning is None:
                args.thinning = 1
        else:
            module = load_model_file(args.model_file)
            model_args, model_kwargs = module.load_data(**parse_data_options(args.data))
            model, name = module.model, Path(args.model_file).stem
            subsample = args.subsample_size
        run_job(
            model,
            tuple(model_args),
            dict(model_kwargs or {}),
            name=name,
            out_dir=args.out,
            subsample_size=subsample,
            control_variate=args.control_variate,
            thinning=args.thinning or 1,
            progress_bar=not args.no_progress and sys.stderr.isatty(),
            **{option: getattr(args, option) for option in RUN_OPTIONS},
            **_checkpoint_options(args),
        )
    except Stopped as stop:
        print(f"pplsamplers: {stop}", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # one clear line for the user
        if args.debug or os.environ.get("PPLSAMPLERS_DEBUG"):
            raise
        message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        print(f"pplsamplers: error: {type(error).__name__}: {message}", file=sys.stderr)
        return 2
    return 0
