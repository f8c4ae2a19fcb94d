"""Discrete latent sites marked for enumeration, marginalised datum by datum.

A discrete site inside the data plate (a mixture assignment zᵢ, a zero-inflation flag) that
the model marks for parallel enumeration, as NumPyro's NUTS expects
(``numpyro.contrib.funsor.config_enumerate``, or ``infer={"enumerate": "parallel"}``),
marginalises to a per-datum term

    −log p(yᵢ | θ) = −log Σ_z p(z | θ) p(yᵢ | z, θ),

so the likelihood is still a sum over the data and a minibatch estimates it without bias.
NumPyro's enumeration gives every enumerated site its own tensor dimension left of the plates
(``numpyro.contrib.funsor.enum`` with ``plate_to_enum_plate``); funsor's ``sum_product``
then eliminates those dimensions and every plate *except the data plate*, which is left as
the per-datum axis.  This is NumPyro's own ``_enum_log_density`` with one plate kept, and
without the plate's subsample scale inside the log-sum-exp (where it would be wrong).

What cannot be subsampled is refused with the site's name: a discrete site not marked for
enumeration (the fix is the marking), an enumerated site outside the data plate (its
marginal couples every datum: log Σ_z p(z) Πᵢ p(yᵢ | z) is not a sum over i), and
``markov``/``scan`` enumeration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from numpyro import handlers
from numpyro.primitives import Messenger

from pplsamplers.model import _inputs
from pplsamplers.model._tracing import FullDataOnlyError, _plates_of, _trace_or_explain
from pplsamplers.types import Array

ENUMERATE_FIX = (
    "mark it for enumeration, as NumPyro's NUTS needs: decorate the model with "
    "numpyro.contrib.funsor.config_enumerate, or give the site "
    'infer={"enumerate": "parallel"}'
)


def is_enumerated(site: dict) -> bool:
    """Whether a latent site is marked for parallel enumeration."""
    return (site.get("infer") or {}).get("enumerate") == "parallel"


def discrete_sites(trace: dict) -> dict[str, dict]:
    """The latent sites with a discrete support, by name."""
    return {
        name: site
        for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"] and site["fn"].support.is_discrete
    }


def discrete_latent_sites(
    model: Callable, model_args: tuple, model_kwargs: dict, init_strategy: Callable | None = None
) -> list[str]:
    """Names of the discrete latent sites not marked for enumeration, which no gradient
    sampler can marginalise (raises only where the model's data look missing,
    :func:`~pplsamplers.model._inputs.missing_data_error`)."""
    trace = _trace_or_explain(model, model_args, model_kwargs, init_strategy)
    if (error := _inputs.missing_data_error(trace, model, model_args, model_kwargs)) is not None:
        raise error
    discrete = discrete_sites(trace)
    return [name for name, site in discrete.items() if not is_enumerated(site)]


def largest_plate(
    model: Callable, model_args: tuple, model_kwargs: dict, init_strategy: Callable | None = None
) -> int:
    """The size of the model's largest plate (0 without one): its N where no data plate is
    read (a model with discrete latents that AutoSampler hands to NUTS+Gibbs)."""
    trace = _trace_or_explain(model, model_args, model_kwargs, init_strategy)
    return max((int(s["args"][0]) for s in trace.values() if s["type"] == "plate"), default=0)


def not_enumerated_error(name: str, site: dict) -> ValueError:
    """The error for a discrete latent site the model does not mark for enumeration."""
    return ValueError(
        f"latent site '{name}' is discrete ({type(site['fn']).__name__}) and not marked for "
        f"enumeration; gradient samplers move continuous latents only. To marginalise it, "
        f"{ENUMERATE_FIX}. Otherwise use AutoSampler (NumPyro's DiscreteHMCGibbs on small "
        "data) or NumPyro's MixedHMC."
    )


def check_discrete(discrete: dict[str, dict], data_plate: str | None) -> None:
    """Raise for the first discrete latent site that cannot be marginalised datum by datum:
    one not marked for enumeration, or one marked outside the data plate."""
    for name, site in discrete.items():
        if not is_enumerated(site):
            raise not_enumerated_error(name, site)
        if data_plate is None or data_plate not in _plates_of(site):
            where = f"outside the data plate '{data_plate}'" if data_plate else "with no data plate"
            raise FullDataOnlyError(
                f"the enumerated site '{name}' lies {where}: marginalising it couples every "
                "datum (log Σ_z p(z) Π_i p(y_i | z) is not a sum over the data), so no "
                "minibatch can estimate it. Move it inside the data plate if it is per datum, "
                "or use AutoSampler or NumPyro's NUTS (which enumerate it over the full data).",
                f"the enumerated site '{name}' couples every datum",
            )


def max_plate_nesting(trace: dict) -> int:
    """How many plate dimensions the model uses (NumPyro's ``_guess_max_plate_nesting``):
    enumeration puts its dimensions to the left of them."""
    dims = [
        -frame.dim
        for site in trace.values()
        for frame in site.get("cond_indep_stack", ())
        if frame.dim is not None
    ]
    return max(dims, default=0)


def placeholder(site: dict) -> Array:
    """A valid value (0) for an enumerated site, where a replay reads continuous sites only."""
    return jnp.zeros(site["fn"].shape(), jnp.int32)


def tracer(model: Callable, substitute_fn: Callable, nesting: int | None) -> Callable[..., dict]:
    """``get_trace(*args, **kwargs)`` of ``model`` with its latents from ``substitute_fn``;
    with ``nesting`` (the model's plate dimensions), every enumerated site is enumerated in
    parallel, NumPyro's way: one dimension per site left of the plates, NumPyro's plates
    replaced by their enumeration-aware version while it traces."""
    if nesting is None:
        return handlers.trace(handlers.substitute(model, substitute_fn=substitute_fn)).get_trace
    from numpyro.contrib.funsor import enum
    from numpyro.contrib.funsor.enum_messenger import trace as packed_trace
    from numpyro.contrib.funsor.infer_util import plate_to_enum_plate

    enumerated = handlers.substitute(
        enum(model, first_available_dim=-nesting - 1), substitute_fn=substitute_fn
    )

    def get_trace(*args: Any, **kwargs: Any) -> dict:
        plates = _PlateArgs(enumerated)
        with plate_to_enum_plate():
            trace = packed_trace(plates).get_trace(*args, **kwargs)
        # the packed trace keeps no plate sites; make_terms reads each plate's declared size
        for name, plate_args in plates.args.items():
            trace.setdefault(name, {"type": "plate", "name": name, "args": plate_args})
        return trace

    return get_trace


class _PlateArgs(Messenger):
    """Records each plate's ``(size, subsample_size)`` as the model's handlers left them."""

    def __init__(self, fn: Callable) -> None:
        self.args: dict[str, tuple] = {}
        super().__init__(fn)

    def postprocess_message(self, msg: dict) -> None:
        if msg["type"] == "plate":
            self.args[msg["name"]] = tuple(msg["args"])


def marginal_terms(
    trace: dict, plate: str, log_prob: Callable[[dict], Array], size: int
) -> tuple[Array, Array]:
    """``(global_term, per_datum)`` negative log densities from an enumerating :func:`tracer`:
    the sites outside ``plate`` summed, those inside it reduced by funsor's ``sum_product``
    over the enumerated sites and every other plate, the data plate kept (``size`` entries).

    ``log_prob(site)`` is the site's log density with its scale relative to one datum."""
    import funsor

    names = set(discrete_sites(trace))
    global_term, local, plates = jnp.zeros(()), [], set()
    for name, site in trace.items():
        if site["type"] != "sample":
            continue
        dim_to_name = site["infer"].get("dim_to_name", {})
        if any(n.startswith("_time") or n.startswith("_PREV_") for n in dim_to_name.values()):
            raise FullDataOnlyError(
                f"site '{name}' is enumerated inside numpyro.contrib.control_flow.scan or "
                "markov; pplsamplers marginalises per-datum discrete sites only. Use "
                "AutoSampler or NumPyro's NUTS for such models.",
                f"the site '{name}' is enumerated along a Markov chain",
            )
        value = log_prob(site)
        if plate not in _plates_of(site):
            global_term = global_term - jnp.sum(value)
            continue
        if all(d == 1 for d in jnp.shape(value)) and not dim_to_name:
            value = jnp.squeeze(value)
        local.append(funsor.to_funsor(value, output=funsor.Real, dim_to_name=dim_to_name))
        plates |= {f.name for f in site["cond_indep_stack"] if f.dim is not None}
    sum_vars = frozenset(n for factor in local for n in factor.inputs if n in names)
    with funsor.interpretations.lazy:
        lazy = funsor.sum_product.sum_product(
            funsor.ops.logaddexp,
            funsor.ops.add,
            local,
            eliminate=sum_vars | frozenset(plates - {plate}),
            plates=frozenset(plates),
        )
    result = funsor.optimizer.apply_optimizer(lazy)
    per_datum = result.align((plate,)).data if plate in result.inputs else result.data
    return global_term, -jnp.broadcast_to(per_datum, (size,))


__all__ = [
    "ENUMERATE_FIX",
    "discrete_latent_sites",
    "discrete_sites",
    "tracer",
    "is_enumerated",
    "largest_plate",
    "marginal_terms",
    "max_plate_nesting",
    "check_discrete",
    "not_enumerated_error",
    "placeholder",
]
