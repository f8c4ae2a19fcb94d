"""pplsamplers: minibatch MCMC kernels for ordinary NumPyro models, analysed with ArviZ."""

from pplsamplers.infer import PSGLD, SGLD, SamplerState, SubsampledKernel
from pplsamplers.potential import (
    SubsampledPotential,
    build_potential,
    find_map,
    make_potential,
    with_batch_size,
    with_control_variate,
)

__version__ = "0.1.0"

__all__ = [
    "PSGLD",
    "SGLD",
    "SamplerState",
    "SubsampledKernel",
    "SubsampledPotential",
    "build_potential",
    "find_map",
    "make_potential",
    "with_batch_size",
    "with_control_variate",
]
