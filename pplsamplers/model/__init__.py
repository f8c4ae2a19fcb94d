"""The model layer: everything that knows NumPyro.  A model and its arguments become a
:class:`~pplsamplers.estimator.Potential` (:func:`make_potential`); :func:`inspect` reads its
sites and data plate once; the data are checked, shuffled once and, where they are split over
devices, summed where they live.  Nothing below the adapter imports this package."""

import sys

from pplsamplers.model._components import LabelledSite, labelled_sites
from pplsamplers.model._enumerate import ENUMERATE_FIX, largest_plate
from pplsamplers.model._inputs import no_dimension_error
from pplsamplers.model._reparam import centred_sites, prior_precisions, reparameterised
from pplsamplers.model._support import edge_error, with_support_checks
from pplsamplers.model._tracing import (
    FullDataOnlyError,
    LocalLatentError,
    as_jax_arguments,
    leaf_identity,
    same_objects,
)
from pplsamplers.model.data import validate_data
from pplsamplers.model.potential import (
    all_data_model,
    check_position,
    discrete_latent_sites,
    full_data_model,
    make_postprocess,
    make_potential,
    model_info,
)
from pplsamplers.model.sharding import chain_sharding, mesh_sharded, shard_data
from pplsamplers.model.shuffle import shuffled_view
from pplsamplers.model.view import (
    ModelView,
    flatten_init_params,
    inspect,
    is_concrete,
    require_concrete,
)

__all__ = [
    "ENUMERATE_FIX",
    "FullDataOnlyError",
    "LabelledSite",
    "LocalLatentError",
    "ModelView",
    "all_data_model",
    "as_jax_arguments",
    "centred_sites",
    "chain_sharding",
    "check_position",
    "discrete_latent_sites",
    "edge_error",
    "flatten_init_params",
    "full_data_model",
    "inspect",
    "is_concrete",
    "labelled_sites",
    "largest_plate",
    "leaf_identity",
    "make_postprocess",
    "make_potential",
    "mesh_sharded",
    "model_info",
    "prior_precisions",
    "reparameterised",
    "no_dimension_error",
    "require_concrete",
    "same_objects",
    "shard_data",
    "shuffled_view",
    "validate_data",
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
