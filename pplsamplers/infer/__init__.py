"""The NumPyro adapter and the samplers declared on it.  The only package whose states hold
an rng_key."""

from pplsamplers.infer.adapter import SubsampledKernel
from pplsamplers.infer.checked_nuts import CheckedNUTS
from pplsamplers.infer.samplers import BPS, CSGLD, HAMCMC, SBPS, SGBD, SGLD, SGRLD, Boomerang
from pplsamplers.infer.state import Prepared

__all__ = [
    "BPS",
    "CSGLD",
    "HAMCMC",
    "SBPS",
    "SGBD",
    "SGLD",
    "SGRLD",
    "Boomerang",
    "CheckedNUTS",
    "Prepared",
    "SubsampledKernel",
]
