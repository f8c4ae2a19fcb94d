"""``import pplsamplers`` before JAX turns on JAX's hoisting of closed-over arrays (the data)
as program arguments (``pplsamplers/__init__.py``); the environment's own choice wins."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import pplsamplers, jax, jax.numpy as jnp\n"
    "data = jax.random.normal(jax.random.key(0), (20000, 5))\n"
    "grad = jax.grad(lambda w: jnp.sum(jnp.logaddexp(0.0, data @ w)))\n"
    "print(jax.config.jax_use_simplified_jaxpr_constants, "
    "len(jax.jit(grad).lower(jnp.ones(5)).as_text()))\n"
)


@pytest.mark.parametrize(("env", "hoisted"), [(None, True), ("0", False)])
def test_import_before_jax_hoists_the_data_out_of_programs(env, hoisted):
    environ = {k: v for k, v in os.environ.items() if k != "JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS"}
    if env is not None:
        environ["JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS"] = env
    environ["PYTHONPATH"] = str(ROOT) + os.pathsep + environ.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    flag, size = done.stdout.split()
    assert (flag == "True") is hoisted
    # 100 000 numbers written into the program text, or none of them
    assert (int(size) < 20_000) if hoisted else (int(size) > 500_000)
