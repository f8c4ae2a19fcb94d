"""Shared PDMP machinery: flows, reflections, refreshment, grid discretisation, skeletons,
and the one builder of the thinning PDMPs (:func:`build`)."""

from pplsamplers.kernels.pdmp import builder
from pplsamplers.kernels.pdmp.builder import *  # noqa: F403  (the builder: builder.__all__)
from pplsamplers.kernels.pdmp.driver import (
    IntervalResult,
    Skeleton,
    advance,
    integrate,
    run_skeleton,
)
from pplsamplers.kernels.pdmp.flow import (
    Flow,
    elliptical_flow,
    linear_flow,
    reflect,
    refresh_gaussian,
    refresh_sphere,
)
from pplsamplers.kernels.pdmp.poisson import integrated_linear_rate, linear_rate_arrival

__all__ = [
    "Flow",
    "IntervalResult",
    "Skeleton",
    "advance",
    "elliptical_flow",
    "integrate",
    "integrated_linear_rate",
    "linear_rate_arrival",
    "linear_flow",
    "reflect",
    "refresh_gaussian",
    "refresh_sphere",
    "run_skeleton",
]
__all__ += builder.__all__  # PDMP, Dynamics, PDMPParams, PDMPState, ThinningOptions, build, …
