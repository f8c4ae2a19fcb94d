"""pplsamplers: minibatch MCMC kernels for ordinary NumPyro models, analysed with ArviZ.

Imported before JAX, pplsamplers sets ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`` (unless the
environment already sets it): JAX then passes the arrays a jitted function closes over, the
data of every potential, as arguments of the compiled program instead of writing them into
it as constants, so the program's size does not grow with N and it compiles faster (measured
in ``docs/benchmarks/end_to_end.md``).  JAX reads the setting when it is imported, so after
``import jax`` it cannot be changed: export the variable, or import pplsamplers first.
"""

import os as _os
import sys as _sys

if "jax" not in _sys.modules:  # JAX reads it at import; "0" in the environment opts out
    _os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")

from pplsamplers import infer  # noqa: E402
from pplsamplers.checkpoint import (
    CheckpointError,
    attach_draws,
    load_checkpoint,
    run_checkpointed,
    save_checkpoint,
)
from pplsamplers.diagnostics import (
    SelfCheckWarning,
    accuracy,
    ess_per_epoch,
    full_data_scores,
    kernel_stein_discrepancy,
    min_ess,
    stein_u_statistic,
)
from pplsamplers.diagnostics.output import check_run, to_arviz
from pplsamplers.estimator import (
    Estimator,
    Potential,
    build_estimator,
    build_potential,
    with_batch_size,
    with_control_variate,
)
from pplsamplers.infer import *  # noqa: F403  (the samplers and the adapter: infer.__all__)
from pplsamplers.kernels.pdmp import integrate, run_skeleton
from pplsamplers.model import all_data_model, make_potential, shard_data
from pplsamplers.registry import PSBPS, PSGLD, SAMPLERS, SamplerSpec, SigmaBPS, make_kernel
from pplsamplers.select import (
    AutoSampler,
    Decision,
    ModelFeatures,
    PilotOptions,
    model_features,
    rank_candidates,
)
from pplsamplers.warmup import Setup, SetupOptions, find_map

__version__ = "0.1.0"

__all__ = [
    "AutoSampler",
    "CheckpointError",
    "Decision",
    "Estimator",
    "ModelFeatures",
    "PSBPS",
    "PSGLD",
    "PilotOptions",
    "Potential",
    "SAMPLERS",
    "SamplerSpec",
    "SelfCheckWarning",
    "Setup",
    "SetupOptions",
    "SigmaBPS",
    "accuracy",
    "all_data_model",
    "attach_draws",
    "build_estimator",
    "build_potential",
    "check_run",
    "ess_per_epoch",
    "find_map",
    "full_data_scores",
    "integrate",
    "kernel_stein_discrepancy",
    "load_checkpoint",
    "make_kernel",
    "make_potential",
    "min_ess",
    "model_features",
    "rank_candidates",
    "run_checkpointed",
    "run_skeleton",
    "save_checkpoint",
    "shard_data",
    "stein_u_statistic",
    "to_arviz",
    "with_batch_size",
    "with_control_variate",
]
__all__ += infer.__all__  # the samplers and the adapter
