"""Diagnostics: ESS per epoch, accuracy against references, kernel Stein discrepancy."""

from pplsamplers.diagnostics.efficiency import (
    Accuracy,
    accuracy,
    epochs,
    ess_per_epoch,
    min_ess,
)
from pplsamplers.diagnostics.ksd import (
    SteinStatistic,
    full_data_scores,
    kernel_stein_discrepancy,
    stein_u_statistic,
)

__all__ = [
    "Accuracy",
    "SteinStatistic",
    "accuracy",
    "epochs",
    "ess_per_epoch",
    "full_data_scores",
    "kernel_stein_discrepancy",
    "min_ess",
    "stein_u_statistic",
]
