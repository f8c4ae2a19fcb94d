"""Sampler selection: model features, competence rules, pilot tournament -> Decision, and
``AutoSampler``, which decides and delegates."""

from pplsamplers.select.auto import AutoSampler
from pplsamplers.select.competence import Candidate, rank_candidates
from pplsamplers.select.decision import Decision
from pplsamplers.select.features import ModelFeatures, features_table, model_features
from pplsamplers.select.pilot import PilotOptions

__all__ = [
    "AutoSampler",
    "Candidate",
    "Decision",
    "ModelFeatures",
    "PilotOptions",
    "features_table",
    "model_features",
    "rank_candidates",
]
