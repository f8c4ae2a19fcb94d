"""NumPyro ``MCMCKernel`` adapters.  The only package whose states hold an rng_key."""

from pplsamplers.infer.auto import AutoSampler, to_arviz
from pplsamplers.infer.base import SamplerState, SubsampledKernel
from pplsamplers.infer.sgld import PSGLD, SGLD

__all__ = ["PSGLD", "SGLD", "AutoSampler", "SamplerState", "SubsampledKernel", "to_arviz"]
