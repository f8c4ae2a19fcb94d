"""Diagnostics: ESS per epoch, accuracy against references, kernel Stein discrepancy."""

from pplsamplers.diagnostics.efficiency import (
    Accuracy,
    accuracy,
    epochs,
    ess_per_epoch,
    min_ess,
)
from pplsamplers.diagnostics.ksd import full_data_scores, kernel_stein_discrepancy

__all__ = ["Accuracy", "accuracy", "epochs", "ess_per_epoch", "min_ess"]
