"""Model -> SubsampledPotential.  The only package that knows NumPyro internals."""

from pplsamplers.potential.map import MapResult, find_map
from pplsamplers.potential.model import (
    check_position,
    full_data_model,
    make_postprocess,
    make_potential,
    model_info,
)
from pplsamplers.potential.subsampled import (
    SubsampledPotential,
    build_potential,
    with_batch_size,
    with_control_variate,
)

__all__ = [
    "MapResult",
    "SubsampledPotential",
    "build_potential",
    "check_position",
    "find_map",
    "full_data_model",
    "make_postprocess",
    "make_potential",
    "model_info",
    "with_batch_size",
    "with_control_variate",
]
