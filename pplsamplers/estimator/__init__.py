"""The estimator layer: the small protocol kernels see, and its transformations (pure JAX,
nothing NumPyro-aware)."""

from pplsamplers.estimator.core import (
    DEFAULT_CHUNK,
    ControlVariate,
    Estimator,
    Terms,
    Whitening,
    build_estimator,
    full_pass,
)
from pplsamplers.estimator.curvature import (
    DenseHessian,
    fisher_diagonal,
    full_hessian,
    gradient_noise_variance,
    hessian_diagonal,
    likelihood_hessian,
    max_curvature,
)
from pplsamplers.estimator.potential import Potential, build_potential
from pplsamplers.estimator.transforms import (
    check_whitening,
    identity_whitening,
    whiten,
    with_batch_size,
    with_clipped_gradient,
    with_contiguous_blocks,
    with_control_variate,
)

__all__ = [
    "DEFAULT_CHUNK",
    "ControlVariate",
    "DenseHessian",
    "Estimator",
    "Potential",
    "Terms",
    "Whitening",
    "build_estimator",
    "build_potential",
    "check_whitening",
    "fisher_diagonal",
    "full_hessian",
    "full_pass",
    "gradient_noise_variance",
    "hessian_diagonal",
    "identity_whitening",
    "likelihood_hessian",
    "max_curvature",
    "whiten",
    "with_batch_size",
    "with_clipped_gradient",
    "with_contiguous_blocks",
    "with_control_variate",
]
