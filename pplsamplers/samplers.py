"""Deprecated alias of :mod:`pplsamplers.registry` (kept for scripts written against 0.1)."""

from pplsamplers.registry import SAMPLERS, make_kernel

DEFAULT_SAMPLER = "auto"

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "make_kernel"]
