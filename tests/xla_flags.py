"""XLA:CPU flags of the test processes (read by ``conftest.py`` and the subprocess tests).

The suite is compile-bound (about 40 % of it is XLA:CPU compiling, two thirds of that in
LLVM), and LLVM at -O1 compiles the suite's programs about 13 % faster than at XLA's default
-O2 with no slower runs (test_bps + test_sgld: 45 -> 39 s; the runtime-bound hierarchical
step-size cells: 91 s either way).  Same semantics, no fast-math either way, but the last
bits of some results move, and with them a chaotic PDMP's path: figures quoted from the
benchmarks (XLA's default, as users run) can differ a little from the suite's.

-O0 compiles faster still but runs about three times slower (SBPS's hierarchical cell: 23 s
of sampling at -O1, 71 s at -O0), so only the subprocesses that compile many programs and run
them briefly use it (:func:`subprocess_flags`): the device test's 22 runs on four devices,
78.5 -> 67.2 s, and the scale-out worker, 54.0 -> 47.8 s (cold caches, alone on 2 cores,
2026-11-27).  Their checks compare runs made at that same level.
"""

from __future__ import annotations

import os

OPTIMIZATION_FLAG = "--xla_backend_optimization_level=1"
"""The suite's level (``conftest.py`` adds it to ``XLA_FLAGS`` unless one is set)."""
COMPILE_BOUND_FLAG = "--xla_backend_optimization_level=0"
"""The level of the compile-bound subprocesses."""


def subprocess_flags(devices: int = 1) -> str:
    """``XLA_FLAGS`` for a compile-bound subprocess on ``devices`` simulated host devices: the
    suite's flags at -O0 (a level the user set is kept) plus the device count."""
    flags = os.environ.get("XLA_FLAGS", "").replace(OPTIMIZATION_FLAG, COMPILE_BOUND_FLAG)
    if devices > 1:
        flags += f" --xla_force_host_platform_device_count={devices}"
    return flags.strip()
