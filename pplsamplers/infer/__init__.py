"""NumPyro ``MCMCKernel`` adapters.  The only package whose states hold an rng_key."""

from pplsamplers.infer.base import SamplerState, SubsampledKernel
from pplsamplers.infer.sgld import PSGLD, SGLD

__all__ = ["PSGLD", "SGLD", "SamplerState", "SubsampledKernel"]
