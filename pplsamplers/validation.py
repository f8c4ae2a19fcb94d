"""One validation style for every sampler option.

Each sampler's options are a frozen dataclass whose ``__post_init__`` calls these checks once,
at construction, before any tracing or compilation; each error names the argument and says
what is allowed.  Nothing in a traced function validates.

Examples
--------
>>> positive("step_size", 0.1)
0.1
>>> positive("step_size", -1.0)
Traceback (most recent call last):
...
ValueError: step_size must be a finite positive number; got -1.0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """``value`` as a float, if it is a finite number > 0 (≥ 0 with ``allow_zero``)."""
    ok = _is_number(value) and np.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        what = "a finite number >= 0" if allow_zero else "a finite positive number"
        raise ValueError(f"{name} must be {what}; got {value!r}.")
    return float(value)


def optional_positive(name: str, value: Any) -> float | None:
    """``None`` (adapted in warmup) or :func:`positive`."""
    return None if value is None else positive(name, value)


def positive_or_auto(name: str, value: Any, *, allow_zero: bool = False) -> Any:
    """``"auto"`` (set from the model at ``init``) or :func:`positive`."""
    if isinstance(value, str) and value == "auto":
        return value
    return positive(name, value, allow_zero=allow_zero)


def positive_int(name: str, value: Any) -> int:
    """``value`` if it is an integer ≥ 1."""
    if not (isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


def in_interval(name: str, value: Any, low: float, high: float, *, closed: bool = False) -> float:
    """``value`` if it lies in [low, high) (``closed``: [low, high])."""
    ok = _is_number(value) and low <= value and (value <= high if closed else value < high)
    if not ok:
        bracket = "]" if closed else ")"
        raise ValueError(f"{name} must lie in [{low}, {high}{bracket}; got {value!r}.")
    return float(value)


def at_least(name: str, value: Any, low: float) -> float:
    """``value`` if it is a finite number ≥ ``low``."""
    if not (_is_number(value) and np.isfinite(value) and value >= low):
        raise ValueError(f"{name} must be a finite number >= {low}; got {value!r}.")
    return float(value)


def one_of(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}.")
    return value


def positive_array(name: str, value: Any, dim: int | None = None) -> np.ndarray:
    """A scalar or a vector of finite positive numbers (of length ``dim`` if given)."""
    array = np.asarray(value, dtype=float)
    if array.ndim > 1 or array.size == 0 or not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{name} must be finite and > 0 (a scalar or a vector); got {value!r}.")
    if dim is not None and array.ndim == 1 and array.shape[0] != dim:
        raise ValueError(f"{name} has {array.shape[0]} values; the model has {dim} dimensions.")
    return array


def switches(options: Any) -> None:
    """Every option of ``options`` (a dataclass or a NamedTuple) whose default is ``True`` or
    ``False`` must be given a bool: the string ``"False"`` (from a command line or a config
    file) would otherwise switch the option on.

    >>> from typing import NamedTuple
    >>> class Options(NamedTuple):
    ...     clamp: bool = True
    >>> switches(Options(False))
    >>> switches(Options("False"))
    Traceback (most recent call last):
    ...
    ValueError: clamp must be True or False; got 'False'.
    """
    if dataclasses.is_dataclass(options):
        defaults = {f.name: f.default for f in dataclasses.fields(options)}
    else:
        defaults = getattr(options, "_field_defaults", {})
    for name, default in defaults.items():
        value = getattr(options, name)
        if isinstance(default, bool) and not isinstance(value, bool | np.bool_):
            raise ValueError(f"{name} must be True or False; got {value!r}.")


__all__ = [
    "at_least",
    "in_interval",
    "one_of",
    "optional_positive",
    "positive",
    "positive_array",
    "positive_int",
    "positive_or_auto",
    "switches",
]
