"""SBPS in the contract registry.

``PSBPS`` is the same adapter class with ``preconditioned=True``; it is left out here to keep
the suite's time budget (each contract entry costs about a dozen NumPyro recompilations of
the kernel), and is covered by ``tests/unit/test_sbps.py`` and ``tests/statistical/test_sbps.py``.
"""

from pplsamplers.infer.sbps import SBPS

ENTRIES = {
    "SBPS": lambda model: SBPS(model, k=3.0, subsample_size=20),
}
