"""The shared warmup: :func:`setup` turns a model and its data into one frozen :class:`Setup`
(mode, Gaussian approximation, control-variate anchor, batch size, notes), which every kernel
runs on; :mod:`~pplsamplers.warmup.metric` refines the approximation from each chain's
warmup draws."""

from pplsamplers.warmup.mode import MapResult, find_map
from pplsamplers.warmup.options import PRECONDITIONERS, SHARED_OPTIONS, SetupOptions
from pplsamplers.warmup.scale import posterior_scale, suggest_batch_size
from pplsamplers.warmup.setup import SEED, ModeStage, Setup, mode_stage, setup

__all__ = [
    "PRECONDITIONERS",
    "SEED",
    "SHARED_OPTIONS",
    "MapResult",
    "ModeStage",
    "Setup",
    "SetupOptions",
    "find_map",
    "mode_stage",
    "posterior_scale",
    "setup",
    "suggest_batch_size",
]
