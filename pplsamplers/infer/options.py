"""A sampler class's signature and Parameters, derived from its options dataclass, so that
each default is stated once (in the dataclass) and documented once (in its docstring)."""

from __future__ import annotations

import dataclasses
import inspect
import re

SHARED_PARAMETERS = """\
model : callable or None, default None
    A NumPyro model whose likelihood sits in a data plate (``None`` when ``potential`` is
    given).
subsample_size : int or None, default None
    Minibatch size n.  ``None`` (default): the model plate's own ``subsample_size`` if it has
    one, else chosen automatically so that the gradient noise is about 0.3 posterior sds
    (``kernel.setup.notes["subsample_size"]`` says why).
data_plate : str or None, default None
    Name of the data plate, if it cannot be found automatically.
potential : Potential or None, default None
    A ready :class:`~pplsamplers.estimator.Potential` instead of a model.
control_variate : bool, "auto" or array_like, default "auto"
    ``"auto"`` (default): anchor a control-variate gradient at the mode when the mode probe
    finds one mode; ``True``, ``False``, or an anchor (a flat unconstrained array).
precondition : {"auto", "dense", "diag"}, array_like or None, default "auto"
    ``"auto"`` (default), ``"dense"``, ``"diag"``, ``None``, or a covariance matrix
    ``(D, D)`` or variance vector ``(D,)`` over the unconstrained coordinates: the kernel runs
    on x = c + L z with L Lᵀ the posterior covariance estimate.
init_strategy : callable, default init_to_uniform
    NumPyro init strategy, used where there is no mode to start from.
steps_per_sample : int or None, default None
    Kernel steps per draw; ``None`` (default): the sampler's own (10 for the step-size kernels,
    more in high dimension where their automatic step shrinks; 1 for the PDMPs, whose sample
    interval already spends about ten proposals).  ``sample_stats.data_evals`` counts every
    step.
setup : Setup or None, default None
    A :class:`~pplsamplers.warmup.Setup` computed before for the same data (AutoSampler hands
    its own to the kernel it chooses); ``None``: computed at ``init``.
self_check : bool, default True
    ``True`` (default): at its last draw the run checks its own draws and warns in one line
    when they fail (:doc:`/troubleshooting`); the result is ``kernel.self_check_result``.
"""

_SECTION = re.compile(r"^(Parameters|Attributes)\n-+\n", re.MULTILINE)
_NEXT = re.compile(r"^\S[^\n]*\n-+\n", re.MULTILINE)


def options_signature(
    options: type, positional: tuple[str, ...], shared: inspect.Signature
) -> inspect.Signature:
    """``(model=None, <positional>, *, <options>, <shared options>)``: the options dataclass's
    fields and defaults, then the keyword-only parameters of ``shared`` (the adapter's
    ``__init__``), so that every default is read from where it is declared."""
    kind = inspect.Parameter
    params = [kind("model", kind.POSITIONAL_OR_KEYWORD, default=None)]
    fields = {f.name: f for f in dataclasses.fields(options)}
    for name in (*positional, *(n for n in fields if n not in positional)):
        field = fields[name]
        default = field.default
        if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        where = kind.POSITIONAL_OR_KEYWORD if name in positional else kind.KEYWORD_ONLY
        params.append(kind(name, where, default=default))
    params += [p for p in shared.parameters.values() if p.kind == kind.KEYWORD_ONLY]
    return inspect.Signature(params)


def parameters_section(options: type | None) -> str:
    """The entries of the options dataclass's Parameters (or Attributes) section (none for
    ``None``)."""
    doc = inspect.cleandoc(getattr(options, "__doc__", None) or "")
    found = _SECTION.search(doc)
    if found is None:
        return ""
    rest = doc[found.end() :]
    following = _NEXT.search(rest)
    return (rest if following is None else rest[: following.start()]).strip("\n")


def describe_options(doc: str, options: type | None) -> str:
    """``doc`` (a class docstring) with a Parameters section made of the options dataclass's
    entries (none for ``None``) and :data:`SHARED_PARAMETERS`, placed before its Examples."""
    doc = inspect.cleandoc(doc)
    entries = "\n".join(filter(None, [parameters_section(options), SHARED_PARAMETERS.strip()]))
    section = f"Parameters\n----------\n{entries}\n\n"
    at = doc.find("\nExamples\n--------")
    if at < 0:
        return f"{doc}\n\n{section}".rstrip() + "\n"
    return f"{doc[: at + 1]}{section}{doc[at + 1 :]}"


__all__ = [
    "SHARED_PARAMETERS",
    "describe_options",
    "options_signature",
    "parameters_section",
]
