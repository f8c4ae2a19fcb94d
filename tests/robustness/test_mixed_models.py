"""Robustness on a mixed model: 10³ group effects of very unequal size, float32.

``models/mixed_glm.py``: a varying-intercept logistic regression with 1000 groups at
N = 2·10⁴ (D = 1005), raw covariates, groups from 1 row to a few percent of N, non-centred
group effects as NumPyro's examples write them.  Reference: NumPyro NUTS stored in
``tests/data/mixed_logit_1k_nuts.json`` (``tests/data/make_references.py``).

Each cell runs a sampler at its defaults, 2 vectorised chains × (300 + 500) draws, and reads

* the global latents (α, β, τ): max |Δmean| / sd_ref ≤ 0.25 and max |sd ratio − 1| ≤ 0.30;
* the group effects z: the root mean square over the groups of |Δmean| / sd_ref ≤ 0.15 and
  of |sd ratio − 1| ≤ 0.30 (a maximum over a thousand coordinates would read the chains'
  Monte Carlo error, not a bias);
* a run outside either bound must have warned, and no draw is non-finite or frozen.

The cells are the Boomerang, SBPS, SGLD, HAMCMC, SGBD, cSGLD and AutoSampler
(:data:`SAMPLERS`); the variants (pSGLD, SGRLD, pSBPS, σBPS) and BPS run on the same set-up,
and BPS moves τ as SBPS does.  SGBD and cSGLD read the minibatch's per-example gradient
variance, which the group structure gives from k + p forward products.

The straight-flow PDMPs (SBPS, BPS) move the group scale τ only through refreshments, so they
need O(D) events per independent draw of τ and may miss in 2 × 500 draws.  For them the
tolerance test asks what the package promises instead: the run warned, and AutoSampler did
not pick that kernel for the model.

    .venv/bin/pytest -q tests/robustness/test_mixed_models.py -p no:cacheprovider
"""

import pytest

from tests.robustness.common import STRAIGHT_FLOW_KERNELS, cell, group_verdict, sampler_names

pytestmark = [pytest.mark.robustness, pytest.mark.runtime_bound]

SAMPLERS = ("boomerang", "hamcmc", "sbps", "sgld", "sgbd", "csgld", "auto")


def _cells() -> list[tuple[str, str]]:
    assert set(SAMPLERS) <= set(sampler_names())
    return [(name, "mixed_1k") for name in SAMPLERS]


@pytest.mark.parametrize("sampler, model", _cells())
def test_mixed_model_defaults_within_tolerance(sampler: str, model: str) -> None:
    ok, line = group_verdict(sampler, model)
    if not ok and sampler in STRAIGHT_FLOW_KERNELS:
        chosen = cell("auto", model).chosen
        assert cell(sampler, model).warned, "a slow kernel missed without a warning: " + line
        assert chosen != sampler, f"AutoSampler picked {sampler}, which misses: " + line
        return
    assert ok, "defaults are wrong: " + line


@pytest.mark.parametrize("sampler, model", _cells())
def test_mixed_model_miss_is_flagged(sampler: str, model: str) -> None:
    ok, line = group_verdict(sampler, model)
    assert ok or cell(sampler, model).warned, "a wrong run went without a warning: " + line


@pytest.mark.parametrize("sampler, model", _cells())
def test_mixed_model_no_divergence_or_freeze(sampler: str, model: str) -> None:
    result = cell(sampler, model)
    assert result.error is None, result.describe()
    assert result.nonfinite == 0 and not result.frozen, result.describe()
