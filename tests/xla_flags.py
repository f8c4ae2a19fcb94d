"""How hard XLA:CPU optimises the test processes' programs (``conftest.py`` and the
subprocess tests read this).

The suite is compile-bound (about 40 % of it is XLA:CPU compiling, two thirds of that in
LLVM), and LLVM at -O1 compiles the suite's programs about 13 % faster than at XLA's default
-O2 with no slower runs (test_bps + test_sgld: 45 -> 39 s; the runtime-bound hierarchical
step-size cells: 91 s either way), so every test process starts at -O1
(:data:`OPTIMIZATION_FLAG`).  Same semantics, no fast-math at any level, but the last bits of
some results move, and with them a chaotic PDMP's path: figures quoted from the benchmarks
(XLA's default, as users run) can differ a little from the suite's.

Most test modules compile many programs and run each briefly, and for them JAX's
``jax_disable_most_optimizations`` (LLVM at -O0 without its expensive passes) pays: on one
process with cold caches, ``tests/unit`` took 603 -> 511 s, ``tests/contract/test_contract.py``
156 -> 137 s, the linear and logistic robustness files 130 -> 105 s, four of the tutorials
119 -> 107 s (2026-11-27).  Whole ``make test`` runs on fresh clones with cold caches, the same
evening on 2 cores: the files it applies to summed 1204 -> 1034 s, the device and scale-out
files 219 -> 210 s, the ``runtime_bound`` files 711 -> 712 s, and pytest took
1075 -> 987 s.  Programs that run long lose three times over at -O0 (the hierarchical
step-size cells 102 -> 327 s, the SBC file 83 -> 147 s), so the modules whose time is spent
running carry ``pytestmark = pytest.mark.runtime_bound`` and keep -O1.  ``conftest.py`` sets
the level per module (:func:`set_compile_bound`) and exports it to the module's subprocesses
(CLI, checkpoint, tutorial, device and scale-out runs) through
``JAX_DISABLE_MOST_OPTIMIZATIONS``.  A check that compares two runs makes them at the same
level (one module, one level).
"""

from __future__ import annotations

import os

import jax

OPTIMIZATION_FLAG = "--xla_backend_optimization_level=1"
"""The suite's base level (``conftest.py`` adds it to ``XLA_FLAGS`` unless one is set)."""
RUNTIME_BOUND = "runtime_bound"
"""The marker of a test module whose time is spent running its programs (kept at -O1)."""
_ENVIRONMENT = "JAX_DISABLE_MOST_OPTIMIZATIONS"


def set_compile_bound(compile_bound: bool) -> None:
    """Compile this process's next programs, and its subprocesses', with most optimisations
    off (``compile_bound``) or at the base level."""
    jax.config.update("jax_disable_most_optimizations", compile_bound)
    os.environ[_ENVIRONMENT] = "1" if compile_bound else "0"


def subprocess_flags(devices: int = 1) -> str:
    """``XLA_FLAGS`` for a subprocess on ``devices`` simulated host devices: the suite's flags
    plus the device count (the optimisation level comes through the environment)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if devices > 1:
        flags += f" --xla_force_host_platform_device_count={devices}"
    return flags.strip()
