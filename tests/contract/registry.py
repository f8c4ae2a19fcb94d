"""The contract registry: every NumPyro kernel of pplsamplers, built on a small model.

Each sampler module contributes entries in a file ``tests/contract/entries_<name>.py``
defining ``ENTRIES: dict[str, Callable[[model], MCMCKernel]]``; they are collected here
so that adding a sampler never edits a shared file.  ``test_contract.py`` runs every entry
through compile, determinism per key, no-NaN, shapes and the three chain methods.
"""

import importlib
import pkgutil
from pathlib import Path

REGISTRY: dict = {}
for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if module.name.startswith("entries_"):
        REGISTRY.update(importlib.import_module(f"tests.contract.{module.name}").ENTRIES)
