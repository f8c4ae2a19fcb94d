"""SBPS and pSBPS in the contract registry."""

from pplsamplers.infer.sbps import PSBPS, SBPS

ENTRIES = {
    "SBPS": lambda model: SBPS(model, k=3.0, subsample_size=20),
    "pSBPS": lambda model: PSBPS(model, k=3.0, subsample_size=20),
}
