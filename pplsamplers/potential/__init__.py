"""Model -> SubsampledPotential.  The only package that knows NumPyro internals."""

import sys

from pplsamplers.potential._support import edge_error, with_support_checks
from pplsamplers.potential._tracing import (
    LocalLatentError,
    as_jax_arguments,
    leaf_identity,
    same_objects,
)
from pplsamplers.potential.curvature import (
    fisher_diagonal,
    full_hessian,
    gradient_noise_variance,
    max_curvature,
    posterior_scale,
    suggest_batch_size,
    suggest_sgld_step_size,
)
from pplsamplers.potential.map import MapResult, find_map
from pplsamplers.potential.model import (
    all_data_model,
    check_position,
    discrete_latent_sites,
    full_data_model,
    make_postprocess,
    make_potential,
    model_info,
)
from pplsamplers.potential.precondition import whiten, with_preconditioner
from pplsamplers.potential.sharding import mesh_sharded, shard_data
from pplsamplers.potential.subsampled import (
    SubsampledPotential,
    build_potential,
    with_batch_size,
    with_clipped_gradient,
    with_control_variate,
)
from pplsamplers.potential.view import (
    ModelView,
    flatten_init_params,
    inspect,
    is_concrete,
    validate_data,
)

__all__ = [
    "LocalLatentError",
    "as_jax_arguments",
    "same_objects",
    "leaf_identity",
    "MapResult",
    "all_data_model",
    "SubsampledPotential",
    "build_potential",
    "check_position",
    "discrete_latent_sites",
    "find_map",
    "full_data_model",
    "gradient_noise_variance",
    "max_curvature",
    "make_postprocess",
    "make_potential",
    "model_info",
    "suggest_sgld_step_size",
    "with_batch_size",
    "with_clipped_gradient",
    "with_control_variate",
    "ModelView",
    "flatten_init_params",
    "inspect",
    "is_concrete",
    "validate_data",
    "fisher_diagonal",
    "full_hessian",
    "posterior_scale",
    "suggest_batch_size",
    "whiten",
    "with_preconditioner",
    "shard_data",
    "mesh_sharded",
    "edge_error",
    "with_support_checks",
]

# When ArviZ (lazy_loader) is imported before NumPyro, imported submodules such as
# ``numpyro.infer.initialization`` and ``numpyro.infer.util`` are missing as attributes of their
# parent package, and ``az.from_numpyro`` then fails in ``infer_dims``.  Re-attach every
# imported numpyro submodule so the user's import order does not matter.
for _name, _module in list(sys.modules.items()):
    if _name.startswith("numpyro.") and _module is not None:
        _parent, _, _child = _name.rpartition(".")
        if _parent in sys.modules and not hasattr(sys.modules[_parent], _child):
            setattr(sys.modules[_parent], _child, _module)
