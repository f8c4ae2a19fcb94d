"""The contract registry: every sampler of :data:`pplsamplers.registry.SAMPLERS` (NumPyro's NUTS
aside), built with its defaults on a small model.

It reads the package's own registry, so a sampler added there is checked here with no further
edit.  The only option given is a minibatch size (the small test data set has N = 200).
"""

from functools import partial

from pplsamplers.registry import SAMPLERS

CONTRACT_SUBSAMPLE_SIZE = 20

REGISTRY: dict = {
    name: partial(spec.build, subsample_size=CONTRACT_SUBSAMPLE_SIZE)
    for name, spec in SAMPLERS.items()
    if spec.minibatch
}
