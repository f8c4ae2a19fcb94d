"""The selector's output: which kernel, with which parameters, and why; and the checks of the
options a user hands AutoSampler for the kernel it chooses."""

from __future__ import annotations

import json
from typing import NamedTuple

import numpy as np

from pplsamplers.select.competence import Candidate
from pplsamplers.select.features import ModelFeatures, features_table

SUBSAMPLING_ONLY = ("subsample_size", "step_size", "control_variate", "data_plate")
"""Overrides that only minibatch kernels take (dropped, with a warning, if NUTS is chosen)."""


def check_overrides(overrides: dict) -> None:
    """Reject AutoSampler's bad ``subsample_size``/``step_size`` overrides before any MAP
    fit or compile."""
    size = overrides.get("subsample_size")
    integer = isinstance(size, int | np.integer) and not isinstance(size, bool)
    if size is not None and (not integer or size < 1):
        raise ValueError(f"subsample_size must be a positive integer; got {size!r}.")
    step = overrides.get("step_size")
    if step is not None and not isinstance(step, str):
        values = np.asarray(step, dtype=float)
        if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError(f"step_size must be finite and > 0; got {step!r}.")


def format_params(params: dict) -> str:
    """``{name: value}`` with vectors shown as their length and range (readable for D = 100)."""
    parts = []
    for name, value in params.items():
        array = np.asarray(value) if not isinstance(value, str | bool | type(None)) else None
        if array is not None and array.ndim > 0 and array.size > 1:
            text = f"[{array.size} values {array.min():.3g}..{array.max():.3g}]"
        elif isinstance(value, float):
            text = f"{value:.3g}"
        else:
            text = repr(value)
        parts.append(f"{name}={text}")
    return ", ".join(parts)


class Decision(NamedTuple):
    """A sampler choice with its evidence.

    Parameters
    ----------
    kernel : str
        Registry name of the chosen sampler (see :data:`pplsamplers.registry.SAMPLERS`).
    params : dict
        Constructor parameters chosen for it.
    reasons : tuple of str
        Plain-language reasons, most important first.
    scores : dict
        ``{candidate: score}``: competence levels (rules) or ESS per epoch (pilot).
    features : ModelFeatures
        The :class:`~pplsamplers.select.ModelFeatures` the choice was made from.
    ranking : tuple of Candidate
        Every candidate considered, best first, with its own reasons.
    strategy : {"rules", "pilot"}, default "rules"
        ``"rules"`` or ``"pilot"``.
    pilot : dict, default {}
        Pilot measurements per candidate (empty for rules): ESS/epoch, KSD, rejected flag.

    Examples
    --------
    AutoSampler builds one; by hand, from the rules' ranking of some features:

    >>> from pplsamplers.datasets.tiny import tiny_features
    >>> f = tiny_features()  # a near-Gaussian posterior with N = 10⁴ data
    >>> from pplsamplers import rank_candidates
    >>> ranking = tuple(rank_candidates(f))
    >>> best = ranking[0]
    >>> d = Decision(best.name, best.params, best.reasons,
    ...              {c.name: c.score for c in ranking}, f, ranking)
    >>> d.explain().splitlines()[0]
    'AutoSampler (rules) chose: boomerang'
    >>> d.to_attrs()["pplsamplers_auto_kernel"]
    'boomerang'
    """

    kernel: str
    params: dict
    reasons: tuple[str, ...]
    scores: dict
    features: ModelFeatures
    ranking: tuple[Candidate, ...]
    strategy: str = "rules"
    pilot: dict = {}

    def explain(self) -> str:
        """The decision as a readable table (returned, not printed: ``print(d.explain())``,
        or :meth:`print_explanation`; a notebook shows the returned text once)."""
        lines = [
            f"AutoSampler ({self.strategy}) chose: {self.kernel}"
            + (f"  ({format_params(self.params)})" if self.params else "")
        ]
        lines += [f"  because {reason}" for reason in self.reasons]
        lines.append("")
        score_name = "ESS/epoch" if self.strategy == "pilot" else "score"
        lines.append(f"  {'candidate':<12} {score_name:>10}  {'note'}")
        for candidate in self.ranking:
            score = self.scores.get(candidate.name, float("nan"))
            note = candidate.reasons[0] if candidate.reasons else ""
            if candidate.name in self.pilot:
                measured = self.pilot[candidate.name]
                if "error" in measured:
                    note = f"FAILED ({measured['error'][:60]}); {note}"
                else:
                    check = measured.get("self_check")
                    note = (
                        f"KSD² {measured['ksd_squared']:.2g} ± {measured['ksd_se']:.1g}"
                        + (" REJECTED by self-check" if check else "")
                        + (" REJECTED by bias guard" if measured["rejected"] and not check else "")
                        + f"; {note}"
                    )
            lines.append(f"  {candidate.name:<12} {score:>10.3g}  {note}")
        lines.append("")
        lines.append("features:")
        lines.append(features_table(self.features))
        return "\n".join(lines)

    def print_explanation(self) -> None:
        """Print :meth:`explain`."""
        print(self.explain())

    def __str__(self) -> str:
        return self.explain()

    def to_attrs(self) -> dict[str, str]:
        """Flat string attributes for an ArviZ DataTree (netCDF-safe)."""
        return {
            "pplsamplers_auto_kernel": self.kernel,
            "pplsamplers_auto_strategy": self.strategy,
            "pplsamplers_auto_params": json.dumps(
                {
                    k: np.asarray(v).tolist() if hasattr(v, "shape") else v
                    for k, v in self.params.items()
                },
                default=str,
            ),
            "pplsamplers_auto_reasons": " | ".join(self.reasons),
            "pplsamplers_auto_scores": json.dumps(self.scores, default=float),
            "pplsamplers_auto_features": json.dumps(self.features.as_dict(), default=str),
            "pplsamplers_auto_explanation": self.explain(),
        }


__all__ = ["SUBSAMPLING_ONLY", "Decision", "check_overrides", "format_params"]
