"""Contract entries for BPS, σBPS and the Boomerang (minibatch gradients, n = 20).

The Boomerang entry is given its reference N(0, I) so that each of the contract's many runs
does not repeat a MAP search (the automatic reference is covered by the unit and statistical
tests); its control-variate variant builds the reference automatically once per run.
"""

import jax.numpy as jnp

from pplsamplers.infer.boomerang import Boomerang
from pplsamplers.infer.bps import BPS, SigmaBPS

ENTRIES = {
    "BPS": lambda model: BPS(model, subsample_size=20),
    "SigmaBPS": lambda model: SigmaBPS(model, subsample_size=20),
    "Boomerang": lambda model: Boomerang(
        model, subsample_size=20, reference=(jnp.zeros(3), jnp.ones(3))
    ),
}
