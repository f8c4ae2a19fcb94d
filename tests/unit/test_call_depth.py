"""How many of the package's Python frames a sampling step passes through to reach the
estimator, traced through NumPyro's ``MCMC.run``.

BlackJAX goes step → kernel → proposal → log density.  Here a step-size kernel goes adapter
``sample`` → chain loop → move → kernel step → kernel → estimator (7 frames to the model's
terms); a PDMP adds its event loop: the driver's ``while_loop`` body, the next-event search,
the thinning loop's body and the event rate (13 for BPS, the Boomerang and SBPS).  The bounds
keep that path from growing.

    .venv/bin/pytest -q tests/unit/test_call_depth.py -p no:cacheprovider -s
"""

import inspect

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from pplsamplers import make_kernel
from pplsamplers.estimator import core

MAX_FRAMES = {"sgld": 7, "sgbd": 10, "boomerang": 13, "sbps": 13, "bps": 13}


def _model(y):
    mu = numpyro.sample("mu", dist.Normal(0, 10))
    with numpyro.plate("data", y.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])


def _frames_to_the_estimator(monkeypatch: pytest.MonkeyPatch, sampler: str) -> list[str]:
    """The package's frames from the adapter's ``sample`` down to ``Estimator.terms``, on the
    deepest path traced during a short run."""
    stacks: list[list[inspect.FrameInfo]] = []
    terms = core.Estimator.terms

    def recording(self, z, idx):
        stacks.append(inspect.stack())
        return terms(self, z, idx)

    monkeypatch.setattr(core.Estimator, "terms", recording)
    y = np.random.default_rng(0).normal(size=200).astype(np.float32)
    mcmc = MCMC(make_kernel(sampler, _model), num_warmup=3, num_samples=3, progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    deepest: list[str] = []
    for stack in stacks:
        ours = [
            f"{f.filename.rsplit('pplsamplers/', 1)[-1]}:{f.function}"
            for f in stack
            if "/pplsamplers/" in f.filename
        ]
        starts = [i for i, name in enumerate(ours) if name == "infer/adapter.py:sample"]
        if starts and starts[0] + 1 > len(deepest):
            deepest = ours[: starts[0] + 1][::-1]
    return deepest


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("sampler", sorted(MAX_FRAMES))
def test_a_step_reaches_the_estimator_in_few_frames(monkeypatch, sampler):
    path = _frames_to_the_estimator(monkeypatch, sampler)
    assert path, "no sampling step reached the estimator"
    print(sampler, len(path), " > ".join(path))
    assert len(path) <= MAX_FRAMES[sampler], " > ".join(path)
