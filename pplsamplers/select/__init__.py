"""Sampler selection: model features, competence rules, pilot tournament -> Decision."""

from pplsamplers.select.competence import Candidate, rank_candidates
from pplsamplers.select.decision import Decision
from pplsamplers.select.features import ModelFeatures, features_table, model_features

__all__ = [
    "Candidate",
    "Decision",
    "ModelFeatures",
    "features_table",
    "model_features",
    "rank_candidates",
]
