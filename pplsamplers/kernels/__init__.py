"""Pure BlackJAX-style kernels: ``init``, ``build_kernel`` -> ``step(rng_key, state)``."""

from pplsamplers.kernels import boomerang, bps, csgld, hamcmc, lbfgs, sbps, sgbd, sgld, sgrld

__all__ = ["boomerang", "bps", "csgld", "hamcmc", "lbfgs", "sbps", "sgbd", "sgld", "sgrld"]
