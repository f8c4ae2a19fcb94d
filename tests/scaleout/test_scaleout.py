"""Scale-out on CPU (issue 16): data sharded over 4 simulated devices, and over 2 processes.

Each test runs its JAX work in a subprocess, because the number of devices and
``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS`` must be fixed before JAX starts, and every subprocess
has a timeout after which it is killed (SIGKILL: ``jax.distributed`` catches SIGTERM).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.xla_flags import subprocess_flags

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 480  # generous: CI machines are shared; a hang still ends


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS"] = "1"
    env["XLA_FLAGS"] = subprocess_flags(devices)  # short runs: compile-bound (conftest)
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _start(args: list[str], devices: int = 1) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=_env(devices),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(processes: list[subprocess.Popen]) -> None:
    """Wait for every process (killing all on a timeout) and fail with the output of a failure."""
    try:
        outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in processes]
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
            p.communicate()
        pytest.fail(f"a scale-out subprocess ran past {TIMEOUT_S} s and was killed")
    for p, output in zip(processes, outputs, strict=True):
        assert p.returncode == 0, output[-4000:]


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("scaleout") / "sharded.json"
    names = ["sgld", "sbps", "auto"]
    _finish([_start(["tests.scaleout._sharded_worker", str(out), *names], devices=4)])
    return json.loads(out.read_text())


def test_full_data_pass_is_spmd(four_devices: dict) -> None:
    """Each device reads only its N/4 rows; one all-reduce of (value, gradient), no gather."""
    report = four_devices["full_pass"]
    assert four_devices["devices"] == 4
    assert report["collectives"]["all-gather"] == 0, report
    assert report["collectives"]["all-reduce"] == 1, report
    assert "f32[1000,3]" in report["entry"], report  # N = 4000 rows over 4 devices


def test_sgld_draws_equal_on_sharded_data(four_devices: dict) -> None:
    """SGLD (control variate): same key, same draws to float tolerance.

    Minibatch indices are global and the same; only the full-data passes (mode, anchor
    gradient) add in another order, which moves the draws by float32 rounding.
    """
    assert four_devices["sgld"]["max_abs_diff"] < 1e-4


def test_sbps_agrees_statistically_on_sharded_data(four_devices: dict) -> None:
    """SBPS: the rounding of the sharded mode moves event times, so paths part; the means agree."""
    result = four_devices["sbps"]
    gap = np.abs(np.subtract(result["mean_plain"], result["mean_sharded"]))
    assert np.all(gap < 0.5 * np.asarray(result["sd_plain"])), result


def test_auto_sampler_runs_on_sharded_data(four_devices: dict) -> None:
    """AutoSampler decides and runs on sharded data unchanged (its features' probes and its
    chosen kernel's passes read the sharded rows); the means agree with the plain run."""
    result = four_devices["auto"]
    gap = np.abs(np.subtract(result["mean_plain"], result["mean_sharded"]))
    assert np.all(gap < 0.5 * np.asarray(result["sd_plain"])), result


def test_vectorized_chains_share_sharded_data_and_parallel_is_refused(four_devices: dict) -> None:
    """Two vectorised SGLD chains on sharded data give the unsharded draws; NumPyro's
    ``parallel`` (pmap) cannot trace ``X[idx]`` on data of another mesh, so it gets an error
    that says so and names the fix instead of JAX's "Context mesh ... should match"."""
    assert four_devices["sgld_two_chains"]["max_abs_diff"] < 1e-4
    message = four_devices["parallel_sharded"]
    assert message.startswith("chain_method='parallel' cannot take data sharded"), message
    assert "chain_method='vectorized'" in message


def test_chains_and_data_split_over_one_mesh(four_devices: dict) -> None:
    """``shard_data(args, chains=2)``: a ("chain", "data") mesh of 2 x 2 devices.  Two
    vectorised SGLD chains give the one-device draws, each device holds one chain of the state
    and of the draws (XLA partitions the vmapped chains over "chain"), and the full-data pass
    reads N/2 rows per device with one all-reduce."""
    report = four_devices["chains_on_devices"]
    assert report["mesh"] == {"chain": 2, "data": 2}, report
    assert report["max_abs_diff"] < 1e-4, report
    assert report["state_spec"].startswith("P('chain'"), report
    assert report["state_shard_shapes"] == [[1, 3]], report
    assert report["samples_spec"].startswith("P('chain'"), report
    assert report["samples_shard_shapes"] == [[1, 100, 3]], report
    full_pass = report["full_pass"]
    assert full_pass["collectives"]["all-gather"] == 0, full_pass
    assert full_pass["collectives"]["all-reduce"] == 1, full_pass
    assert "f32[2000,3]" in full_pass["entry"], full_pass  # N = 4000 rows over 2 data devices


def test_two_processes_match_one(tmp_path: Path) -> None:
    """Two processes on 127.0.0.1, each with half the rows, give the one-process draws."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    worker = "tests.scaleout._multiprocess_worker"
    pair, single = tmp_path / "pair.npy", tmp_path / "single.npy"
    _finish(
        [
            _start([worker, str(pair), "0", "2", port]),
            _start([worker, str(pair), "1", "2", port]),
            _start([worker, str(single), "0", "1", "0"]),
        ]
    )
    a, b = np.load(pair), np.load(single)
    assert a.shape == b.shape == (100, 3)
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_chain_mesh_arguments_are_checked() -> None:
    """In process, on this process's devices: a chain axis that does not divide the devices is
    refused with the argument named; data on a ("chain", "data") mesh give the chains'
    sharding, and data off a mesh give none."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh

    from pplsamplers.model.sharding import chain_sharding, data_mesh, shard_data

    with pytest.raises(ValueError, match="chains must be a positive integer that divides"):
        data_mesh(chains=jax.device_count() + 1)
    rows = jnp.ones((8, 2))
    assert chain_sharding((rows,), num_chains=2) is None
    mesh = Mesh(np.asarray(jax.devices()).reshape(-1, 1), ("chain", "data"))
    placed = shard_data((rows,), mesh=mesh)
    sharding = chain_sharding(placed, num_chains=2 * jax.device_count())
    assert sharding is not None and tuple(sharding.spec) == ("chain",)
