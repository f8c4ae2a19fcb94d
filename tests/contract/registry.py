"""The contract registry: every sampler of :data:`pplsamplers.registry.SAMPLERS` (NumPyro's NUTS
aside), built with its defaults on a small model.

It reads the package's own registry, so a sampler added there is checked here with no further
edit.  The only option given is a minibatch size (the small test data set has N = 200).
"""

from functools import partial

from pplsamplers.registry import SAMPLERS, make_kernel

CONTRACT_SUBSAMPLE_SIZE = 20

REGISTRY: dict = {
    # make_kernel applies a variant's options (pSGLD, pSBPS, σBPS are entries with options)
    name: partial(make_kernel, name, subsample_size=CONTRACT_SUBSAMPLE_SIZE)
    for name, spec in SAMPLERS.items()
    if spec.minibatch
}
