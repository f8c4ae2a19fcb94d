"""Mixed models at scale: every sampler at its defaults, and AutoSampler, against NumPyro NUTS.

    .venv/bin/python benchmarks/hierarchical.py                          # every configuration
    .venv/bin/python benchmarks/hierarchical.py --configs logit-1e5-1e3 --samplers boomerang
    .venv/bin/python benchmarks/hierarchical.py --configs logit-1e5-1e3 --subsample-size 1000

Models: ``models/mixed_glm.py`` (varying-intercept logistic and Poisson-with-exposure GLMMs, one
varying-slope logistic), lognormal group sizes from 1 row to a few percent of N, raw covariates,
non-centred group effects as NumPyro's examples write them, float32 data.  Configurations are
``<family>-<N>-<groups>`` (``CONFIGS``); ``crossed-2e4`` is ``models/crossed_glm.py``, a
logistic regression with a subject and an item effect per row (two crossed groupings, which
have no arrowhead structure).

Reference: NumPyro NUTS on the same model and data (a dense mass matrix up to
``harness.DENSE_UP_TO`` latents, diagonal beyond), 2 chains × (1000 warmup + 2000 draws) by
default (``--reference-warmup``, ``--reference-draws``), cached as JSON in ``--cache``; its
own run is the NUTS row (its ESS/s does not depend on the number of draws).  At N = 10⁶
NUTS on the model as written (non-centred, diagonal mass) takes hours on a laptop-sized CPU,
so there the reference and the NUTS row are NUTS as an expert would run it: the group effects
centred (``u = τ z``, the same posterior; a group holds a thousand rows on average) and a
dense mass block over α, β and τ, its draws mapped back to ``z = u / τ``.  Each sampler
then runs in a fresh process; the columns are ``harness.py``'s: the global latents are α, β,
τ (and the slopes' scale), the group effects z (and the slopes').
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import Reference, Suite, main  # noqa: E402

CONFIGS = {
    "logit-1e5-1e3": {"family": "logistic", "N": 100_000, "num_groups": 1_000},
    "logit-1e5-1e4": {"family": "logistic", "N": 100_000, "num_groups": 10_000},
    "logit-1e6-1e3": {"family": "logistic", "N": 1_000_000, "num_groups": 1_000},
    "poisson-1e5-1e3": {"family": "poisson", "N": 100_000, "num_groups": 1_000},
    "poisson-1e6-1e3": {"family": "poisson", "N": 1_000_000, "num_groups": 1_000},
    "slope-1e5-1e3": {"family": "logistic", "N": 100_000, "num_groups": 1_000, "slope": True},
    "crossed-2e4": {"N": 20_000, "num_subjects": 150, "num_items": 60},
}


def load(config: str) -> tuple:
    from models import crossed_glm, mixed_glm

    if config.startswith("crossed"):
        return crossed_glm.model, *crossed_glm.load_data(**CONFIGS[config])
    return mixed_glm.model, *mixed_glm.load_data(**CONFIGS[config])


def latents(config: str) -> int:
    spec = CONFIGS[config]
    if config.startswith("crossed"):
        return spec["num_subjects"] + spec["num_items"] + 6
    return spec["num_groups"] * (2 if spec.get("slope") else 1) + 6


def _decentred(samples: dict) -> dict:
    """Draws of the centred model with the group effects as the model writes them, z = u / τ."""
    out = dict(samples)
    out["z"] = out.pop("u") / out["tau"][..., None]
    return out


def reference(config: str) -> Reference | None:
    """NUTS on the centred model with dense globals at N = 10⁶ (module docstring)."""
    spec = CONFIGS[config]
    if spec["N"] < 1_000_000 or spec.get("slope") or config.startswith("crossed"):
        return None

    def centred() -> tuple:
        model, args, kwargs = load(config)
        return model, args, {**kwargs, "centred": True}

    return Reference("centred", centred, [("alpha", "beta", "tau")], _decentred)


SUITE = Suite(
    script=__file__,
    configs=CONFIGS,
    load=load,
    dim=latents,
    globals=("alpha", "beta", "tau", "tau_slope", "tau_s", "tau_i"),
    groups=("z", "z_slope", "z_s", "z_i"),
    cache=".hierarchical",
    reference=reference,
)

if __name__ == "__main__":
    main(SUITE, __doc__.split("\n\n")[0])
