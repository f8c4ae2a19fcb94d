"""Test-suite configuration: float64 everywhere (precision tests need it), repo root importable."""

import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
# what `import pplsamplers` before JAX gives users (pplsamplers/__init__.py); JAX reads it once
os.environ.setdefault("JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# LLVM at -O1, and most optimisations off in the compile-bound modules (the fixture below):
# the suite compiles faster (tests/xla_flags.py says how much, and what moves).  Subprocesses
# inherit both (the scale-out and device tests add their device count).
from tests.xla_flags import OPTIMIZATION_FLAG, RUNTIME_BOUND, set_compile_bound  # noqa: E402

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {OPTIMIZATION_FLAG}".strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
# NumPyro rebuilds every kernel's closures for each MCMC run, so identical programs are
# compiled again and again; the persistent cache (keyed on the program) makes repeats free.
CACHE_DIR = os.environ.get("PPLSAMPLERS_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
# The subprocesses (tutorials, CLI, checkpoints, packaging, scale-out, devices) use the same
# cache with the same zero thresholds instead of pplsamplers' per-user one at 0.2 s, which
# skips the many small programs they compile again and again: test_cli + test_checkpoint +
# the HAMCMC tutorial 109 -> 97 s, cold.  (A user's JAX_COMPILATION_CACHE_DIR is kept.)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", CACHE_DIR)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's in-memory compilation caches after each test module.

    Every XLA:CPU executable holds memory mappings, and NumPyro rebuilds each kernel's closures
    per run, so a test worker that compiles thousands of programs crossed the kernel's
    ``vm.max_map_count`` (65530; one worker had 28 000 mappings after three minutes) and XLA
    then segfaulted inside a compile.  The persistent cache above keeps recompiles cheap.
    """
    yield
    jax.clear_caches()


@pytest.fixture(autouse=True, scope="module")
def _optimization_effort(request: pytest.FixtureRequest):
    """Most XLA optimisations off while a compile-bound module runs, -O1 in a module marked
    ``runtime_bound`` (``tests/xla_flags.py``: which, and what each gains)."""
    set_compile_bound(request.node.get_closest_marker(RUNTIME_BOUND) is None)
    yield
    set_compile_bound(False)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items) -> None:
    """Longest test files first (``tests/durations.py``: the two workers finish together);
    a stable sort, so the tests of a file keep their order."""
    from tests.durations import file_seconds, relative_file

    items.sort(key=lambda item: -file_seconds(relative_file(item)))
