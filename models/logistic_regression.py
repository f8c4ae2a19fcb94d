"""Bayesian logistic regression: the synthetic data of the SBPS paper (§7.1) and breast cancer.

The model ships with the package as :mod:`pplsamplers.datasets.logistic_regression` (it is the
model of ``pplsamplers demo``); this example file re-exports it so that
``pplsamplers fit models/logistic_regression.py`` and ``from models import logistic_regression``
keep working.
"""

from pplsamplers.datasets.logistic_regression import (
    hand_written_terms,
    load_data,
    model,
    true_weights,
)

__all__ = ["hand_written_terms", "load_data", "model", "true_weights"]
