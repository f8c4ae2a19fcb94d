"""Robustness suite: every sampler with its defaults on raw-scale user posteriors (issue 14.6)."""
