"""One process of a multi-process run, or the single-process reference (tests and docs).

Usage: ``python -m tests.scaleout._multiprocess_worker OUT.npy PROCESS_ID NUM_PROCESSES PORT``.
With ``NUM_PROCESSES == 1`` it runs on the full data in one process (the reference).  Each
process loads only its own rows, ``jax.distributed`` joins the processes (gloo collectives on
CPU, 127.0.0.1 only), a global array is built from the process-local rows, SGLD with a control
variate runs, and process 0 writes the draws.  Needs ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1``.
"""

from __future__ import annotations

import sys

import jax

OUT, PROCESS_ID, NUM_PROCESSES, PORT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if NUM_PROCESSES > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{PORT}",
        num_processes=NUM_PROCESSES,
        process_id=PROCESS_ID,
        initialization_timeout=120,
    )

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

from pplsamplers import SGLD  # noqa: E402
from pplsamplers.datasets import logistic_regression as lr  # noqa: E402
from pplsamplers.model.sharding import data_mesh  # noqa: E402

N, DIM = 4000, 3


def main() -> None:
    (X, y), _ = lr.load_data(N=N, d=DIM, seed=0)  # a real run reads only its own file
    rows = slice(PROCESS_ID * N // NUM_PROCESSES, (PROCESS_ID + 1) * N // NUM_PROCESSES)
    local = (np.asarray(X)[rows], np.asarray(y)[rows])
    mesh = data_mesh()  # every device of every process
    args = tuple(
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), part)
        for part in local
    )
    kernel = SGLD(lr.model, subsample_size=100, control_variate=True)
    mcmc = MCMC(kernel, num_warmup=50, num_samples=100, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *args)
    w = mcmc.get_samples()["w"]  # replicated over processes: every process holds it
    if jax.process_index() == 0:
        np.save(OUT, np.asarray(jax.device_get(w)))
    if NUM_PROCESSES > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
