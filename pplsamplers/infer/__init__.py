"""NumPyro ``MCMCKernel`` adapters.  The only package whose states hold an rng_key."""

from pplsamplers.infer.auto import AutoSampler, to_arviz
from pplsamplers.infer.base import SamplerState, SubsampledKernel
from pplsamplers.infer.boomerang import Boomerang
from pplsamplers.infer.bps import BPS, SigmaBPS
from pplsamplers.infer.hamcmc import HAMCMC, SGRLD
from pplsamplers.infer.sbps import PSBPS, SBPS
from pplsamplers.infer.sgbd import CSGLD, SGBD
from pplsamplers.infer.sgld import PSGLD, SGLD

__all__ = [
    "BPS",
    "CSGLD",
    "HAMCMC",
    "PSBPS",
    "PSGLD",
    "SBPS",
    "SGBD",
    "SGLD",
    "SGRLD",
    "AutoSampler",
    "Boomerang",
    "SamplerState",
    "SigmaBPS",
    "SubsampledKernel",
    "to_arviz",
]
