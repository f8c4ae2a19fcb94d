"""Find a model's group effects from its gradients: which latent coordinates are local to a
group of data rows, and which are global.

A latent site is *local* when every datum's likelihood reads the elements of one group of it
only (``z[group[i]]``, a row of ``b[group[i]]``), whatever the way the model is written (a
``numpyro.plate`` over the groups or an expanded distribution).  :func:`find_blocks` reads it
off the model's per-datum gradients at a point, where they are generically non-zero:

1. on a few hundred random rows, the per-example gradients show which sites' elements each
   row reads, and whether those elements belong to one group (a site of shape (G, m) groups
   its elements by row);
2. over every datum, two directional derivatives per local site (directions r_j and
   r_j · group(j), with r random) give each datum's group, their ratio, read twice with
   independent r; the few data whose reads disagree (a ratio lost to rounding where the
   datum's derivative cancels, in float32) read their group from the sparsity of their own
   gradient, at the point and at random points near it;
3. the local sites are one set of groups when every datum's groups agree across them;
4. :func:`coupling_check`: one Hessian-vector product checks that the groups do not couple
   (a prior that correlates the groups, a crossed second grouping): the arrowhead Hessian
   must reproduce it.

The result is a :class:`~pplsamplers.estimator.blocks.Blocks`, or ``None`` with the reason.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.estimator import Potential
from pplsamplers.estimator.blocks import BlockHessian, Blocks
from pplsamplers.estimator.curvature import datum_directional
from pplsamplers.types import Array, PRNGKey
from pplsamplers.warmup.modes import host_rng

MIN_GROUPS = 8
"""Fewer groups than this are treated as global latents."""
MAX_GLOBALS = 256
"""The structured approximation keeps a dense p × p block for the globals: at most this many."""
SAMPLED_ROWS = 512
"""Rows whose per-example gradients show which elements each datum reads."""
MAX_UNRESOLVED = 4 * SAMPLED_ROWS
"""Data whose group the directional derivatives leave unknown, read from their own gradients
(``SAMPLED_ROWS`` at a time): at most this many (more, and the data's groups are left
unknown)."""
COUPLING_TOLERANCE = 1e-6
"""Relative mismatch of a Hessian-vector product against the arrowhead above which the groups
are taken to couple."""


def site_coordinates(potential: Potential) -> dict[str, np.ndarray]:
    """Each latent site's flat coordinates, shaped like its unconstrained value."""
    dim = potential.dim
    sites = potential.unravel(jnp.arange(dim, dtype=jnp.result_type(float)))
    return {name: np.asarray(value).astype(int) for name, value in sites.items()}


def _local_sites(
    potential: Potential, x: Array, rng_key: PRNGKey
) -> list[tuple[str, np.ndarray, int]]:
    """(name, flat coordinates, elements per group) of the sites each sampled row reads one
    group of."""
    estimator = potential.estimator
    size = min(SAMPLED_ROWS, estimator.N)
    grads = _row_gradients(estimator, x, host_rng(rng_key).integers(0, estimator.N, size))
    reads = grads > 1e-12 * (1.0 + grads.max())
    found = []
    for name, coords in site_coordinates(potential).items():
        stride = coords.shape[-1] if coords.ndim >= 2 else 1
        flat = coords.reshape(-1)
        groups = flat.size // stride
        hits = reads[:, flat].reshape(reads.shape[0], groups, stride).any(-1)
        if groups < MIN_GROUPS or not hits.any() or hits.sum(1).max() > 1:
            continue
        found.append((name, flat, stride))
    return found


@partial(jax.jit, static_argnums=0)
def _per_example_grads(estimator, x: Array, rows: Array) -> Array:
    """``estimator.per_example_grads``, compiled once per estimator (a ``jax.jit`` of the bound
    method would compile again at every call)."""
    return estimator.per_example_grads(x, rows)


def _row_gradients(estimator, x: Array, rows: np.ndarray) -> np.ndarray:
    """|per-example gradients| (len(rows), D) at ``x``, in blocks of ``min(SAMPLED_ROWS, N)``
    rows (one compiled program whatever the number of rows)."""
    size = min(SAMPLED_ROWS, estimator.N)
    padded = np.resize(rows, -(-rows.size // size) * size).reshape(-1, size)
    grads = [np.abs(np.asarray(_per_example_grads(estimator, x, block))) for block in padded]
    return np.concatenate(grads)[: rows.size]


def _groups_from_gradients(
    estimator, x: Array, rows: np.ndarray, group_coords: np.ndarray, rng_key: PRNGKey
) -> np.ndarray:
    """Each of ``rows``' group (``group_coords``: (G, k) coordinates) from the sparsity of its
    gradient, which is exactly zero off the globals and its own group: at ``x``, then at
    random points near it and farther (a derivative may vanish at one point); −1 where no
    point shows exactly one group."""
    found = np.full(rows.size, -1)
    noise = jax.random.normal(rng_key, (2,) + x.shape, x.dtype)
    for point in (x, x + 0.1 * noise[0], x + noise[1]):
        todo = np.flatnonzero(found < 0)
        if todo.size == 0:
            break
        per_group = _row_gradients(estimator, point, rows[todo])[:, group_coords].sum(-1)
        single = np.count_nonzero(per_group, axis=1) == 1
        found[todo[single]] = np.argmax(per_group[single], axis=1)
    return found


@partial(jax.jit, static_argnums=0)
def _datum_groups(estimator, x: Array, directions: Array) -> Array:
    """Each datum's group for each local site, from directional derivatives along r and
    r · group (−1 where the datum's derivative vanishes at x, or the ratio is not near an
    integer)."""
    derivatives = datum_directional(estimator, x, directions)  # (N, 2 S)
    first, second = derivatives[:, 0::2], derivatives[:, 1::2]
    known = jnp.abs(first) > 1e-9 * (1.0 + jnp.max(jnp.abs(first), axis=0))
    ratio = second / jnp.where(known, first, 1.0)
    known = known & (jnp.abs(ratio - jnp.round(ratio)) < 0.25)  # else lost to rounding
    return jnp.where(known, jnp.round(ratio), -1).astype(jnp.int32)


def find_blocks(potential: Potential, x: Array, rng_key: PRNGKey) -> tuple[Blocks | None, str]:
    """The model's global and group coordinates at ``x`` (module docstring), or ``None`` and
    why not.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from pplsamplers.model import make_potential
    >>> def model(group, y, num_groups=50):  # random intercepts tau * z[g]
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     tau = numpyro.sample("tau", dist.HalfNormal(1))
    ...     z = numpyro.sample("z", dist.Normal(0, 1).expand([num_groups]).to_event(1))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu + tau * z[group[idx]], 1), obs=y[idx])
    >>> group = jnp.repeat(jnp.arange(50), 20)
    >>> y = group % 5 + jax.random.normal(jax.random.key(0), (1000,))
    >>> potential = make_potential(model, (group, y))
    >>> blocks, note = find_blocks(potential, potential.init_position, jax.random.key(0))
    >>> blocks.num_groups, blocks.block_size, int(blocks.globals_.shape[0])  # z; mu and tau
    (50, 1, 2)
    """
    estimator = potential.estimator
    if estimator.N < 2 * MIN_GROUPS:
        return None, "too few data for group effects"
    sample_key, direction_key = jax.random.split(rng_key)
    local = _local_sites(potential, x, sample_key)
    if not local:
        return None, "no latent site is read one group at a time by the data"
    dtype = x.dtype
    directions = []
    for weights in jax.random.uniform(direction_key, (2, estimator.dim), dtype, 1.0, 2.0):
        for _, flat, stride in local:  # two reads with independent weights r
            group_of = np.arange(flat.size) // stride
            plain = jnp.zeros(estimator.dim, dtype).at[flat].set(weights[flat])
            directions += [plain, plain.at[flat].multiply(jnp.asarray(group_of, dtype))]
    first, second = np.split(np.asarray(_datum_groups(estimator, x, jnp.stack(directions))), 2, 1)
    groups = np.where(first == second, first, -1)  # (N, S); a read lost to rounding disagrees
    counts = [flat.size // stride for _, flat, stride in local]
    if len(set(counts)) > 1:
        return None, f"group effects of different numbers of groups {sorted(set(counts))}"
    both = np.all(groups >= 0, axis=1)
    if not np.all(groups[both] == groups[both, :1]):
        return None, "the local sites do not share one grouping (crossed effects)"
    num_groups = counts[0]
    members = [flat.reshape(num_groups, stride) for _, flat, stride in local]
    group_coords = np.concatenate(members, axis=1)
    local_coords = np.zeros(estimator.dim, bool)
    local_coords[group_coords.reshape(-1)] = True
    global_coords = np.flatnonzero(~local_coords)
    if global_coords.size > MAX_GLOBALS:
        return None, f"{global_coords.size} global latents (more than {MAX_GLOBALS})"
    datum = groups.max(axis=1)  # the sites agree where both are known
    unresolved = np.flatnonzero(datum < 0)
    if 0 < unresolved.size <= MAX_UNRESOLVED:
        datum[unresolved] = _groups_from_gradients(
            estimator, x, unresolved, group_coords, jax.random.fold_in(direction_key, 1)
        )
    rows = np.bincount(datum[datum >= 0], minlength=num_groups)
    names = ", ".join(f"'{name}'" for name, _, _ in local)
    known = jnp.asarray(datum) if np.all(datum >= 0) else None
    blocks = Blocks(jnp.asarray(global_coords), jnp.asarray(group_coords), jnp.asarray(rows), known)
    return blocks, (
        f"{num_groups} groups of {group_coords.shape[1]} coordinates ({names}), "
        f"{global_coords.size} global; rows per group {int(rows.min())}–{int(rows.max())}"
    )


@partial(jax.jit, static_argnums=0)
def _mismatch(estimator, x: Array, hessian: BlockHessian, key: PRNGKey) -> Array:
    """‖H v − (arrowhead) v‖ / ‖H v‖ for a random v."""
    v = jax.random.normal(key, x.shape, x.dtype)
    exact = jax.jvp(lambda y: estimator.full_value_and_grad(y)[1], (x,), (v,))[1]
    difference = jnp.linalg.norm(exact - hessian.matvec(v))
    return difference / jnp.maximum(jnp.linalg.norm(exact), jnp.finfo(x.dtype).tiny)


def coupling_check(
    potential: Potential, x: Array, hessian: BlockHessian, rng_key: PRNGKey
) -> str | None:
    """``None`` where the arrowhead ``hessian`` reproduces a Hessian-vector product of U at
    ``x`` in a random direction, else why not (a prior that correlates the groups, a second,
    crossed grouping: the groups couple)."""
    mismatch = float(_mismatch(potential.estimator, x, hessian, rng_key))
    tolerance = COUPLING_TOLERANCE * (1e3 if x.dtype == jnp.float32 else 1.0)
    if mismatch <= tolerance:
        return None
    return f"the groups couple (the arrowhead misses {mismatch:.2g} of a Hessian product)"


__all__ = ["MAX_GLOBALS", "MIN_GROUPS", "coupling_check", "find_blocks", "site_coordinates"]
