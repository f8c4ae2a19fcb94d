"""Diagnostics: ESS per epoch, accuracy against references, kernel Stein discrepancy,
and the end-of-run self-check."""

from pplsamplers.diagnostics.checks import (
    SelfCheck,
    SelfCheckWarning,
    Thresholds,
    coordinate_names,
    self_check,
    warn,
)
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
    "SelfCheck",
    "SelfCheckWarning",
    "SteinStatistic",
    "Thresholds",
    "accuracy",
    "coordinate_names",
    "epochs",
    "ess_per_epoch",
    "full_data_scores",
    "kernel_stein_discrepancy",
    "min_ess",
    "self_check",
    "stein_u_statistic",
    "warn",
]
