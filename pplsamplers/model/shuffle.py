"""Shuffle the data rows once, so that a minibatch can be a contiguous block.

A random row gather from a large array is bound by memory latency, and a gather of
consecutive rows is much faster once the data outgrow the cache (measured in
``docs/benchmarks/end_to_end.md``).  Consecutive rows are only as good as random ones
when the rows are in a random order, so the shared warmup permutes every per-datum argument
of the model once, then draws each minibatch as the n rows after a uniform start, wrapping
around.  For any fixed order that block holds each row with probability exactly n / N, so
(N / n) Σ_block ℓ_i is unbiased for Σ_i ℓ_i; the one random permutation makes its variance
that of sampling without replacement.  Sharded data (``jax.sharding``, one process or many)
are permuted in place by one compiled gather whose output keeps the input's sharding, with the
same fixed key in every process, so a sharded run draws the same minibatches as the plain one.

Which arguments are per-datum is not declared in a NumPyro model.  :func:`shuffled_view`
permutes every array argument with N rows along its first axis, then checks that the
model's terms agree row for row with the unshuffled model at two random starts and at the
first one shrunk towards the origin (those of them where the terms are finite: a raw
covariate's exp overflows at a random start in float32); a model that reads
such an array otherwise (a length-N array that is not per-datum, a time index, a transposed
design) fails the check and keeps random rows.  Only the kernel's potential sees the
shuffled copy (memory: one more copy of the per-datum arrays); draws, ``log_likelihood`` and
deterministic sites use the user's data.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.model import _agreement, _numpyro
from pplsamplers.model.view import ModelView
from pplsamplers.types import Array, PRNGKey

CHECKED_ROWS = 64
"""Rows compared, at two points, between the shuffled and the unshuffled model's terms."""


def _take_rows(array: Array, order: Array) -> Array:
    return jnp.take(array, order, axis=0)


_take_rows_jit = jax.jit(_take_rows)
"""One program per shape and dtype, reused by every data set (not a fresh closure per call)."""


def _permuted(leaf: Any, order: np.ndarray) -> Any:
    """``leaf[order]``; a JAX array keeps its sharding (XLA moves the rows between devices)."""
    if isinstance(leaf, np.ndarray):
        return leaf[order]
    sharding = getattr(leaf, "sharding", None)
    if sharding is None or len(sharding.device_set) == 1:
        # one device: leave the placement to JAX, as for the user's array (an explicit
        # out_shardings would commit the copy to device 0, which pmap's chains then refuse)
        return _take_rows_jit(leaf, jnp.asarray(order))
    return jax.jit(_take_rows, out_shardings=sharding)(leaf, jnp.asarray(order))


def _terms_agree(view: ModelView, shuffled: ModelView, order: np.ndarray, key: PRNGKey) -> bool:
    """Whether the shuffled model's terms on rows 0..k-1 equal the original's on the rows
    they came from, at two init-strategy starts and the first one shrunk towards the origin,
    wherever the original terms are finite (:func:`~pplsamplers.model._agreement.check_points`;
    one compiled program, whose answer is a small array, so that it is on every process when
    the data are split over processes)."""
    info = view.info
    original = _numpyro.make_terms(view.model, view.model_args, view.model_kwargs, info)
    moved = _numpyro.make_terms(shuffled.model, shuffled.model_args, shuffled.model_kwargs, info)
    rows = min(CHECKED_ROWS, info.data_size)
    source = jnp.asarray(order[:rows])

    @jax.jit
    def agree(params: dict) -> Array:
        pairs = zip(original(params, source), moved(params, jnp.arange(rows)), strict=True)
        return jnp.stack([_agreement.terms_match(a, b) for a, b in pairs])

    points = _agreement.check_points(
        jax.random.split(key, 2), view.model, view.model_args, view.model_kwargs, info,
        view.init_strategy,
    )  # fmt: skip
    return _agreement.agree_where_finite(agree, points)


def shuffled_view(view: ModelView, rng_key: PRNGKey) -> tuple[ModelView | None, str]:
    """``view`` with the rows of its per-datum arguments permuted once, and a note; or
    ``(None, why not)`` (module docstring: which arguments, the check, sharded data).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from pplsamplers.model import inspect
    >>> def model(x, y):
    ...     w = numpyro.sample("w", dist.Normal(0, 1))
    ...     with numpyro.plate("data", y.shape[0], subsample_size=10) as idx:
    ...         numpyro.sample("y", dist.Normal(w * x[idx], 1), obs=y[idx])
    >>> x = jnp.arange(100.0); view = inspect(model, (x, 2 * x), {})
    >>> shuffled, note = shuffled_view(view, jax.random.key(0))
    >>> note
    '2 arguments with N = 100 rows shuffled once; minibatches are contiguous blocks'
    >>> bool(jnp.all(jnp.sort(shuffled.model_args[0]) == x))
    True
    """
    N = view.data_size
    if view.data_plate is None or N < 2:
        return None, "random rows (no data plate to shuffle)"
    leaves, treedef = jax.tree.flatten((view.model_args, view.model_kwargs))
    rows = [_numpyro.has_rows(leaf, N) for leaf in leaves]
    if not any(rows):
        return None, f"random rows (no argument has N = {N} rows to shuffle)"
    order_key, check_key = jax.random.split(rng_key)
    order = np.asarray(jax.random.permutation(order_key, N))
    moved = [
        _permuted(leaf, order) if row else leaf for row, leaf in zip(rows, leaves, strict=True)
    ]
    args, kwargs = jax.tree.unflatten(treedef, moved)
    shuffled = view._replace(model_args=tuple(args), model_kwargs=dict(kwargs))
    if not _terms_agree(view, shuffled, order, check_key):
        return None, (
            f"random rows (shuffling the arguments with N = {N} rows changed the model's "
            "terms: one of them is not per-datum)"
        )
    count = sum(rows)
    return shuffled, (
        f"{count} argument{'s' if count > 1 else ''} with N = {N} rows shuffled once; "
        "minibatches are contiguous blocks"
    )


__all__ = ["CHECKED_ROWS", "shuffled_view"]
