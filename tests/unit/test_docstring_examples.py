"""The docstrings' examples run as a user who installed the package would run them.

One test per module of ``pplsamplers`` whose docstrings hold numpydoc ``Examples`` (``>>>``
lines): the module is imported with :mod:`importlib` and its examples run with :mod:`doctest`
(``ELLIPSIS`` and ``NORMALIZE_WHITESPACE``), each docstring in a copy of the module's globals,
as ``pytest --doctest-modules`` runs them.  They run in float32, JAX's default and the users'
(the suite's ``conftest.py`` turns ``jax_enable_x64`` on), since their outputs show dtypes and
float32 rounding.  The examples import nothing from outside the package (the repository's
``models/`` folder is not installed).  ``pplsamplers.cli.__main__``
runs the command line when imported and holds no example, so it is not imported.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import jax
import pytest

import pplsamplers

PACKAGE = Path(pplsamplers.__file__).resolve().parent
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
NOT_IMPORTED = {"pplsamplers.cli.__main__"}
"""Modules with side effects on import (the command line's entry point)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_with_examples() -> list[str]:
    """The modules whose source holds a ``>>>`` line, found without importing them."""
    names = {module_name(path) for path in PACKAGE.rglob("*.py") if ">>>" in path.read_text()}
    return sorted(names - NOT_IMPORTED)


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_run(name: str):
    module = importlib.import_module(name)
    tests = [test for test in doctest.DocTestFinder().find(module) if test.examples]
    assert tests, f"{name} has '>>>' lines but no docstring example doctest finds"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    with jax.enable_x64(False):
        for test in sorted(tests, key=lambda test: test.lineno or 0):
            runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_every_public_class_and_function_has_an_example():
    import inspect

    missing = [
        name
        for name in pplsamplers.__all__
        if (inspect.isclass(obj := getattr(pplsamplers, name)) or inspect.isfunction(obj))
        and "\nExamples\n--------" not in (inspect.getdoc(obj) or "")
    ]
    assert not missing, f"public names without a numpydoc Examples section: {missing}"
