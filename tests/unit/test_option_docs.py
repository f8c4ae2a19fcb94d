"""The defaults that the options dataclasses' docstrings state (numpydoc ``name : type, default
X``) are the fields' own: a default is declared once in code, and its documentation must not
drift from it."""

import ast
import dataclasses
import re

import pytest

from pplsamplers.infer.options import parameters_section
from pplsamplers.kernels.pdmp.boomerang import BoomerangOptions
from pplsamplers.kernels.pdmp.bps import BPSOptions
from pplsamplers.kernels.pdmp.builder import ThinningOptions
from pplsamplers.kernels.pdmp.sbps_kernel import SBPSOptions
from pplsamplers.kernels.sgmcmc.csgld import CSGLDOptions
from pplsamplers.kernels.sgmcmc.hamcmc import HAMCMCOptions
from pplsamplers.kernels.sgmcmc.sgbd import SGBDOptions
from pplsamplers.kernels.sgmcmc.sgld import SGLDOptions
from pplsamplers.kernels.sgmcmc.sgrld import SGRLDOptions
from pplsamplers.select.pilot import PilotOptions
from pplsamplers.warmup.options import SetupOptions

OPTIONS = (BoomerangOptions, BPSOptions, ThinningOptions, SBPSOptions, CSGLDOptions,
           HAMCMCOptions, SGBDOptions, SGLDOptions, SGRLDOptions, PilotOptions, SetupOptions)  # fmt: skip
ENTRY = re.compile(r"^(\S[^:\n]*?) : ([^\n]*)$", re.MULTILINE)


def _stated_defaults(options: type) -> list[tuple[str, str]]:
    """(field, the default its entry states) for every entry with a literal default."""
    stated = []
    for names, kind in ENTRY.findall(parameters_section(options)):
        found = re.search(r"defaults? (.*)$", kind)
        if found is None:
            continue
        fields = [name.strip() for name in names.split(",")]
        values = re.split(r" and |, ", found.group(1))
        stated += zip(
            fields,
            values if len(values) == len(fields) else [found.group(1)] * len(fields),
            strict=True,
        )
    return stated


@pytest.mark.parametrize("options", OPTIONS, ids=lambda cls: cls.__name__)
def test_a_documented_default_is_the_fields_default(options):
    fields = {field.name: field.default for field in dataclasses.fields(options)}
    stated, checked = _stated_defaults(options), 0
    for name, text in stated:
        assert name in fields, f"{options.__name__} documents {name!r}, which is no field"
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            continue  # not a literal (a call, a function's name): read by the reader
        assert value == fields[name], (
            f"{options.__name__}.{name}: docs {text!r}, code {fields[name]!r}"
        )
        checked += 1
    assert checked or not stated
