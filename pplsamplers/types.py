"""Type aliases shared by every module."""

from typing import Any, TypeAlias

import jax

Array: TypeAlias = jax.Array
PRNGKey: TypeAlias = jax.Array
ArrayTree: TypeAlias = Any
"""A pytree of arrays (dict, tuple, NamedTuple ...)."""


def same_object(self: object, other: object) -> bool:
    """``==`` as ``is``, for the records of arrays that ``jax.jit`` takes as static values.

    A record such as a whitening or a Hessian holds arrays, whose ``==`` is elementwise; as a
    static argument it must hash and compare as one value, so such a class sets
    ``__hash__ = object.__hash__`` and ``__eq__ = same_object``.

    Examples
    --------
    >>> from typing import NamedTuple
    >>> class Record(NamedTuple):
    ...     value: list
    ...     __hash__ = object.__hash__
    ...     __eq__ = same_object
    >>> a = Record([1.0])
    >>> a == a, a == Record([1.0])
    (True, False)
    """
    return self is other


__all__ = ["Array", "ArrayTree", "PRNGKey", "same_object"]
