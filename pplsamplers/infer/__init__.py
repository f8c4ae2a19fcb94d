"""The one NumPyro ``MCMCKernel`` adapter and the samplers declared on it.  The only package
whose states hold an rng_key."""

from pplsamplers.infer.adapter import SamplerState, SubsampledKernel
from pplsamplers.infer.boomerang import Boomerang
from pplsamplers.infer.bps import BPS, SigmaBPS
from pplsamplers.infer.hamcmc import HAMCMC, SGRLD
from pplsamplers.infer.sbps import PSBPS, SBPS
from pplsamplers.infer.sgbd import CSGLD, SGBD
from pplsamplers.infer.sgld import PSGLD, SGLD
from pplsamplers.infer.spec import KernelSpec, WarmupWindow

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
    "Boomerang",
    "KernelSpec",
    "SamplerState",
    "SigmaBPS",
    "SubsampledKernel",
    "WarmupWindow",
]
