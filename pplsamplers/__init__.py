"""pplsamplers: minibatch MCMC kernels for ordinary NumPyro models, analysed with ArviZ."""

from pplsamplers import infer
from pplsamplers.checkpoint import (
    CheckpointError,
    attach_draws,
    load_checkpoint,
    run_checkpointed,
    save_checkpoint,
)
from pplsamplers.diagnostics import (
    accuracy,
    ess_per_epoch,
    full_data_scores,
    kernel_stein_discrepancy,
    min_ess,
    stein_u_statistic,
)
from pplsamplers.diagnostics.output import check_run, to_arviz
from pplsamplers.infer import *  # noqa: F403  (the samplers and the adapter: infer.__all__)
from pplsamplers.pdmp import integrate, run_skeleton
from pplsamplers.potential import (
    SubsampledPotential,
    all_data_model,
    build_potential,
    find_map,
    make_potential,
    shard_data,
    with_batch_size,
    with_control_variate,
)
from pplsamplers.registry import SAMPLERS, SamplerSpec, make_kernel
from pplsamplers.select import (
    AutoSampler,
    Decision,
    ModelFeatures,
    model_features,
    rank_candidates,
)

__version__ = "0.1.0"

__all__ = [
    "AutoSampler",
    "CheckpointError",
    "Decision",
    "ModelFeatures",
    "SAMPLERS",
    "SamplerSpec",
    "SubsampledPotential",
    "accuracy",
    "all_data_model",
    "attach_draws",
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
__all__ += infer.__all__  # the samplers, the adapter and KernelSpec
__all__.remove("WarmupWindow")  # a detail of KernelSpec, documented there
