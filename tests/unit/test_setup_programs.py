"""The set-up of a run compiles a few programs, not one per operation of the model.

A minibatch run starts with the shared warmup (inspection, mode, curvature, mode probe,
control-variate anchor, batch size) and each chain's ``init``.  Run eagerly (or under
``jax.ensure_compile_time_eval``, where the operations on the data inside a compiled program
run eagerly too), every operation of the model is lowered and compiled as its own small XLA
program: the SGLD run below lowered 599 programs that way, and 108 with the
set-up jitted; the BPS run lowered 294 while its time-scale probe (``default_params``) ran
eagerly, and 122 with it jitted.  Lowering is the part of compilation that the persistent cache cannot skip,
so the count is a cold-start cost users pay on every run.  The count is deterministic:
JAX's own compile events (:mod:`jax.monitoring`) are counted from a cleared in-memory cache.
"""

from collections.abc import Callable

import jax
import pytest
from numpyro.infer import MCMC

from models import logistic_regression
from pplsamplers import BPS, SGLD

LOWERING_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
MAX_PROGRAMS = 200
"""108 (SGLD) and 122 (BPS) measured with the jitted set-up, 599 and 294 with parts of it eager
(module docstring): the bound sits between them, with room for a few more probes."""

_counting: list[int] = []


def _count_lowering(event: str, duration: float, **kwargs) -> None:
    if _counting and event == LOWERING_EVENT:
        _counting[0] += 1


jax.monitoring.register_event_duration_secs_listener(_count_lowering)


def _short_run(sampler: type, model: Callable = logistic_regression.model) -> Callable[[], None]:
    """A short vectorized run of ``sampler`` on a small logistic regression, built now and
    run (to its last draw) when the returned function is called."""
    args, kwargs = logistic_regression.load_data(N=1_000, d=3, seed=1)
    mcmc = MCMC(
        sampler(model),
        num_warmup=20,
        num_samples=20,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )

    def run() -> None:
        mcmc.run(jax.random.key(0), *args, **kwargs)
        jax.block_until_ready(mcmc.get_samples())

    return run


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("sampler", [SGLD, BPS], ids=["sgld", "bps"])
def test_a_run_lowers_a_bounded_number_of_programs(sampler):
    run = _short_run(sampler)
    jax.clear_caches()
    _counting.append(0)
    try:
        run()
    finally:
        lowered = _counting.pop()
    print(f"{sampler.__name__}: {lowered} programs lowered")
    assert lowered <= MAX_PROGRAMS, (
        f"one run lowered {lowered} XLA programs (bound {MAX_PROGRAMS}): part of the set-up "
        "runs eagerly, one program per operation; jit it"
    )


MAX_MODEL_CALLS = 30
"""The run below called the model 66 times before its terms were one jitted function (each
trace of the potential, under jvp, grad or vmap, re-ran NumPyro's handlers in Python), 15
after (inspection, initial values, constraining, and one trace per shape of the terms)."""


@pytest.mark.filterwarnings("ignore")
def test_a_run_traces_the_model_a_bounded_number_of_times():
    """Tracing the model runs NumPyro's handlers in Python: a run does it a few times, not
    at every trace of the potential (``MAX_MODEL_CALLS``)."""
    calls = []

    def counted_model(*model_args, **model_kwargs):  # a new function: a set-up of its own
        calls.append(1)
        return logistic_regression.model(*model_args, **model_kwargs)

    _short_run(SGLD, counted_model)()
    assert len(calls) <= MAX_MODEL_CALLS, (
        f"one run called the model {len(calls)} times (bound {MAX_MODEL_CALLS}): a potential "
        "re-traces the model where it should reuse its jitted terms"
    )
