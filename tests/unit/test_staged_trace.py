"""The staged trace (one compiled pass over the data, ``model._tracing._trace``) takes the
model's arrays as the program's arguments, so that XLA does not fold the model's data-only
operations (an index check over every row) at compile time, and still traces a model that
reads its arguments' values in Python, with those arrays as constants.

    .venv/bin/pytest -q tests/unit/test_staged_trace.py -p no:cacheprovider
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from pplsamplers.model import _tracing


def _grouped(x, group):
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("groups", 4):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(tau * z[group], 1.0), obs=x)


def _reads_values(x, group):
    counts = np.bincount(np.asarray(group))  # concrete values: NumPy, not a traced operation
    with numpyro.plate("groups", counts.shape[0]):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(z[group], 1.0), obs=x)


def _data():
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.normal(size=40)), jnp.asarray(np.arange(40) % 4)


def test_the_data_are_the_programs_arguments(monkeypatch):
    compiled_with: list[tuple] = []
    jit = jax.jit

    def recording(fun, *a, **k):
        program = jit(fun, *a, **k)
        return lambda *args: compiled_with.append(args) or program(*args)

    monkeypatch.setattr(_tracing.jax, "jit", recording)
    x, group = _data()
    trace = _tracing._trace(_grouped, (x, group), {}, staged=True)
    assert len(compiled_with) == 1
    assert any(arg is x for arg in compiled_with[0]) and any(
        arg is group for arg in compiled_with[0]
    )
    np.testing.assert_array_equal(trace["y"]["value"], x)
    assert trace["z"]["value"].shape == (4,) and "unconstrained_value" in trace["tau"]


@pytest.mark.parametrize("checked", [False, True])
def test_a_model_that_reads_its_arguments_is_traced_with_them_as_constants(checked):
    x, group = _data()
    found: list[str] = []
    out_of_bounds = found.append if checked else None
    trace = _tracing._trace(_reads_values, (x, group), {}, staged=True, out_of_bounds=out_of_bounds)
    eager = _tracing._trace(_reads_values, (x, group), {})
    assert trace.keys() == eager.keys() and trace["z"]["value"].shape == (4,)
    np.testing.assert_array_equal(trace["y"]["value"], x)
    assert not found
    abstract = _tracing._trace(_reads_values, (x, group), {}, abstract=True)
    assert abstract["z"]["value"].shape == (4,)


def test_a_read_past_an_arguments_end_is_still_reported():
    x, group = _data()
    found: list[str] = []
    _tracing._trace(_grouped, (x, group + 1), {}, staged=True, out_of_bounds=found.append)
    assert found and "out-of-bounds" in found[0].lower()
