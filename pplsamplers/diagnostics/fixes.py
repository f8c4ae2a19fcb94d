"""What a failed self-check suggests, and when a counted event fails a run.

:func:`~pplsamplers.diagnostics.checks.self_check` names each failure and joins the fixes of
all of them, in this order: the fixes of the failed checks (``FIXES``), the model's own
(:func:`model_hints`), then the alternatives the caller names (another sampler, AutoSampler).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

MAX_REJECTED_FRACTION = 1e-3
"""Steps rejected (non-finite) after warmup, as a fraction of the draws, above which the run
fails: a rejected step leaves the chain where it was, which biases it only if it is common."""

MAX_CAPPED_FRACTION = 1e-2
"""A PDMP's sample intervals cut short at its event cap after warmup, as a fraction of the
draws, above which the run fails.  A cut interval hands out its draw before the grid time, a
small error where rare; where common the process is stuck in a region curved far more
sharply than its reference (a funnel's neck), and the run is both slow and wrong."""

COUNTED = MappingProxyType(
    {
        "rejected": ("{} steps rejected", MAX_REJECTED_FRACTION, "counts"),
        "divergent": ("{} steps divergent", MAX_REJECTED_FRACTION, "counts"),
        "capped": ("{} sample intervals cut short at the event cap", MAX_CAPPED_FRACTION, "capped"),
    }
)
"""Per counted key of ``self_check``'s ``counts``: its message, the fraction of the draws above which
it fails, and its fixes (a key not listed: ``"{} steps <key>"``, ``MAX_REJECTED_FRACTION``)."""

FIXES = MappingProxyType(
    {
        "stein": ("more warmup", "a smaller step"),
        "rhat": ("more warmup and draws",),
        "ess": ("more warmup and draws",),
        "drift": ("a smaller step",),
        "outlying": ("a smaller step",),
        "frozen": ("a smaller step",),
        "stuck": ("another start (init_strategy)", "a non-centred parameterisation"),
        "diverged": ("a smaller step",),
        "nonfinite": ("a smaller step", "checking the data and the model's support"),
        "counts": ("a smaller step", "checking the data and the model's support"),
        "capped": ("a larger max_events_per_sample", "a non-centred parameterisation"),
        "unverified": ("more draws", "a smaller step", "an exact sampler (Boomerang, NUTS)"),
    }
)
"""The fixes a failed check suggests, per check (``COUNTED`` names a count's)."""


LABEL_SWITCHING_FIX = (
    "ordered component means (dist.transforms.OrderedTransform), as chains of an unordered "
    "mixture may sit in different labellings"
)
"""The fix a failed R-hat adds for a model with enumerated discrete sites: a mixture's K!
symmetric modes put two right chains in two labellings, which R-hat across chains cannot tell
from a miss; ordering the components collapses the copies to one."""


def model_hints(
    enumerated: tuple[str, ...], ordered: tuple[str, ...] = (), labelled: tuple[Any, ...] = ()
) -> dict[str, tuple[str, ...]]:
    """The ``hints`` of ``self_check`` for a model with the enumerated discrete sites
    ``enumerated``, the latents on an ordered vector ``ordered`` and the per-component
    latents ``labelled`` (:mod:`~pplsamplers.model._components`): :data:`LABEL_SWITCHING_FIX`
    on R-hat for a mixture whose components are neither ordered nor found (found ones are
    ordered before R-hat, :mod:`~pplsamplers.diagnostics.labelling`).

    >>> model_hints(("z",))["rhat"][0].startswith("ordered component means")
    True
    >>> model_hints(("z",), ordered=("mu",)), model_hints(()), model_hints(("z",), labelled=("mu",))
    ({}, {}, {})
    """
    return {"rhat": (LABEL_SWITCHING_FIX,)} if enumerated and not (ordered or labelled) else {}


__all__ = [
    "COUNTED",
    "FIXES",
    "LABEL_SWITCHING_FIX",
    "MAX_CAPPED_FRACTION",
    "MAX_REJECTED_FRACTION",
    "model_hints",
]
