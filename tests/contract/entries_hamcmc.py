import jax.numpy as jnp

from pplsamplers.infer.hamcmc import HAMCMC, SGRLD

ENTRIES = {
    "HAMCMC": lambda model: HAMCMC(
        model, step_size=0.1, initial_scale=0.01, memory_size=3, subsample_size=20
    ),
    # the contract model's Fisher information is about 50·I (N = 200, unit covariates)
    "SGRLD": lambda model: SGRLD(model, step_size=0.1, metric=50.0 * jnp.eye(3), subsample_size=20),
}
