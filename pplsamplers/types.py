"""Type aliases shared by every module."""

from typing import Any, TypeAlias

import jax

Array: TypeAlias = jax.Array
PRNGKey: TypeAlias = jax.Array
ArrayTree: TypeAlias = Any
"""A pytree of arrays (dict, tuple, NamedTuple ...)."""

__all__ = ["Array", "ArrayTree", "PRNGKey"]
