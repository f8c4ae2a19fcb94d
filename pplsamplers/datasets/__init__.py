"""Data sets and models shipped with the package (what ``pplsamplers demo`` runs).

The repository's ``models/`` folder holds more example models; the ones the command line needs
live here so that the wheel installs a single top-level package, ``pplsamplers``.
:mod:`~pplsamplers.datasets.tiny` holds the tiny targets of the docstrings' examples.

Examples
--------
>>> from pplsamplers.datasets import logistic_regression
>>> (X, y), kwargs = logistic_regression.load_data(N=100, d=3)
>>> X.shape, y.shape
((100, 3), (100,))
"""

from pplsamplers.datasets import logistic_regression
from pplsamplers.datasets.tiny import tiny_estimator, tiny_linear, tiny_mixture, tiny_regression

__all__ = [
    "logistic_regression",
    "tiny_estimator",
    "tiny_linear",
    "tiny_mixture",
    "tiny_regression",
]
