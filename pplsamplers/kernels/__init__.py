"""Pure BlackJAX-style kernels: ``init``, ``build_kernel`` -> ``step(rng_key, state)``."""

from pplsamplers.kernels import sgld

__all__ = ["sgld"]
