"""Data sharded over devices and hosts, with JAX's own runtime (``docs/scaling_out.md``).

Placing the data is the user's one step: the model's array arguments go on a device mesh
with ``NamedSharding(mesh, P("data"))`` (:func:`shard_data` does it), and every sampler runs on
them unchanged.  Two things make that scale rather than merely run:

1. **Full-data passes are SPMD** (:func:`sharded_full_pass`).  A potential's per-datum terms
   read the data with a gather (``X[idx]``).  A gather of global indices from a sharded array
   is partitioned by XLA as a masked local gather plus an all-reduce of the gathered rows, so
   every device would compute every chunk and all N rows would cross the interconnect.
   Instead, the full pass runs under :func:`jax.shard_map`: each device scans its own rows
   with local indices and one ``psum`` adds the D + 1 partial sums.  The terms are traced
   once (``jax.make_jaxpr``) and re-evaluated with each device's block in place of the global
   array, which is valid when the data enter the terms only through gathers (checked; any
   other use falls back to the unsharded pass, with the same answer).
2. **The data are arguments, not constants, of the compiled programs.**  The potential closes
   over the model's arguments, and by default ``jax.jit`` embeds closed-over arrays in the
   executable as constants: every device then holds all N rows, and an array spanning several
   hosts cannot be closed over at all.  Start Python with
   ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`` (set before ``import jax``): JAX then passes
   closed-over arrays as arguments, each with its own sharding (see
   https://docs.jax.dev/en/latest/internals/constants.html).  :func:`shard_data` warns when it
   is off.

Minibatch indices stay global: n uniform indices over all N rows (with replacement, or a
contiguous block after a uniform start where the rows were shuffled once), so
E[(N/n) Σ_i ℓ_{I_i}] = Σ_j ℓ_j whatever the placement, and the same key gives the same draws
on 1 device or 8.  The gather of n rows moves at most n·d
numbers per step (see ``docs/scaling_out.md`` for the measured cost).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from pplsamplers.types import Array

CONSTANTS_FLAG = "JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS"
"""The environment variable that makes JAX pass closed-over arrays as executable arguments."""
CHAIN_AXIS = "chain"
"""The mesh axis that vectorised chains are split over, next to the data axis."""


def constants_are_arguments() -> bool:
    """Whether JAX passes closed-over arrays to compiled programs as sharded arguments.

    True when Python was started with ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`` (it must be
    set before ``import jax``).  Otherwise closed-over data are embedded in every executable.
    """
    return bool(jax.config.jax_use_simplified_jaxpr_constants)


def check_processes() -> None:
    """Raise ``RuntimeError`` when several JAX processes run without
    ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1``: an array spanning several hosts cannot be
    compiled into a program as a constant, so every set-up would fail later, obscurely."""
    if jax.process_count() > 1 and not constants_are_arguments():
        raise RuntimeError(
            f"pplsamplers runs in {jax.process_count()} JAX processes, but {CONSTANTS_FLAG} is "
            "off, so jax.jit would compile the data, which span several hosts, into every "
            f"program as constants, which fails. Set {CONSTANTS_FLAG}=1 in the environment of "
            "every process before `import jax` (e.g. `export "
            f"{CONSTANTS_FLAG}=1`, or `import pplsamplers` before `import jax`)."
        )


EMBEDDED_DATA_WARN_BYTES = 1 << 24
"""Data above this size (16 MB) compiled in as constants get :func:`warn_embedded_data`."""


def warn_embedded_data(*data: Any) -> bool:
    """Warn, in one line, when arrays of over 16 MB in ``data`` will be
    compiled into every program as constants because JAX was imported without
    ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`` (``import jax`` before ``import pplsamplers``).

    JAX reads the setting when it is imported (``jax.config.update`` afterwards does not
    change how constants are lowered), so the fix is the user's.  Embedded data make every
    program as large as the data, which lengthens the cold start and slows sampling, and at
    large N the persistent compilation cache cannot store such programs (measured in
    ``docs/scaling_out.md``).  Returns whether it warned.

    Examples
    --------
    >>> import numpy as np
    >>> warn_embedded_data(np.zeros(10))  # small data: nothing to say
    False
    """
    if constants_are_arguments():
        return False
    leaves = jax.tree.leaves(data)
    size = sum(int(getattr(leaf, "nbytes", 0)) for leaf in leaves)
    if size <= EMBEDDED_DATA_WARN_BYTES:
        return False
    warnings.warn(
        f"pplsamplers: jax was imported before pplsamplers without {CONSTANTS_FLAG}=1, so the "
        f"{size / 2**20:.0f} MB of data are compiled into every program as constants "
        "(slower compiles and about half the sampling speed at this size). Fix: `export "
        f"{CONSTANTS_FLAG}=1`, or `import pplsamplers` before `import jax`.",
        UserWarning,
        stacklevel=3,
    )
    return True


def data_mesh(axis_name: str = "data", devices: Any = None, chains: int = 1) -> Mesh:
    """A mesh over ``devices`` (default: all devices of all processes): 1-D ``(axis_name,)``,
    or with ``chains > 1`` 2-D ``("chain", axis_name)``, ``chains`` devices on the chain
    axis (vectorised chains split over them, see :func:`chain_sharding`)."""
    devices = np.asarray(jax.devices() if devices is None else devices).reshape(-1)
    if chains == 1:
        return Mesh(devices, (axis_name,))
    if not isinstance(chains, int) or chains < 1 or devices.size % chains:
        raise ValueError(
            f"chains must be a positive integer that divides the {devices.size} devices; "
            f"got {chains!r}."
        )
    return Mesh(devices.reshape(chains, -1), (CHAIN_AXIS, axis_name))


def shard_data(
    args: Any,
    mesh: Mesh | None = None,
    axis_name: str = "data",
    size: int | None = None,
    chains: int = 1,
) -> Any:
    """Place every array in ``args`` whose leading dimension is the data size on ``mesh``.

    Arrays with leading dimension ``size`` are split by rows (``P(axis_name)``); other arrays
    and non-array leaves are left as they are (they are replicated where they are used).

    Parameters
    ----------
    args : pytree
        A pytree of model arguments, e.g. ``(X, y)``.
    mesh : jax.sharding.Mesh or None, default None
        The device mesh; default :func:`data_mesh` over every device.
    axis_name : str, default "data"
        The mesh axis the rows are split over.
    size : int or None, default None
        The number of data N; default the most common leading dimension among the arrays.
    chains : int, default 1
        Without ``mesh``: split the devices into a ``("chain", axis_name)`` mesh with
        ``chains`` devices on the chain axis, so that ``chain_method="vectorized"`` chains
        also run on different devices (:func:`chain_sharding`).  Default 1: a 1-D data mesh.

    Returns
    -------
    The same pytree with the data arrays sharded.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> X, y = shard_data((jnp.ones((8, 2)), jnp.zeros(8)))
    >>> X.shape, y.sharding.spec
    ((8, 2), P('data',))
    """
    mesh = data_mesh(axis_name, chains=chains) if mesh is None else mesh
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name {axis_name!r} is not an axis of the mesh {mesh.axis_names}.")
    leaves, tree = jax.tree.flatten(args)
    arrays = [np.ndim(leaf) > 0 and hasattr(leaf, "shape") for leaf in leaves]
    if size is None:
        dims = [leaf.shape[0] for leaf, is_array in zip(leaves, arrays, strict=True) if is_array]
        if not dims:
            raise ValueError("shard_data found no array in args; pass the model's data arrays.")
        size = max(set(dims), key=dims.count)
    devices = mesh.shape[axis_name]
    if size % devices:
        raise ValueError(
            f"the data size {size} is not a multiple of the {devices} devices on mesh axis "
            f"{axis_name!r}; drop or pad rows, or use a mesh whose axis divides {size}."
        )
    if not constants_are_arguments() and mesh.size > 1:
        warnings.warn(
            f"pplsamplers: {CONSTANTS_FLAG} is not set, so jax.jit embeds the closed-over data "
            "in every compiled program (each device holds all rows, and data spanning several "
            f"hosts fail). Start Python with {CONSTANTS_FLAG}=1 (before importing jax).",
            stacklevel=2,
        )
    sharding = NamedSharding(mesh, P(axis_name))
    placed = [
        jax.device_put(leaf, sharding) if is_array and leaf.shape[0] == size else leaf
        for leaf, is_array in zip(leaves, arrays, strict=True)
    ]
    return jax.tree.unflatten(tree, placed)


def mesh_sharded(tree: Any) -> bool:
    """Whether an array of ``tree`` is split over several devices of a mesh (``NamedSharding``).

    ``chain_method="parallel"`` cannot take such data: NumPyro's ``pmap`` traces the chains in
    a manual mesh of its own, and the model's ``X[idx]`` on an array of another mesh raises
    "Context mesh ... should match the mesh of sharding" (JAX 0.12).
    """
    return any(
        isinstance(sharding := getattr(leaf, "sharding", None), NamedSharding)
        and sharding.mesh.size > 1
        and not sharding.is_fully_replicated
        for leaf in jax.tree.leaves(tree)
    )


def chain_sharding(tree: Any, num_chains: int) -> NamedSharding | None:
    """``NamedSharding(mesh, P("chain"))`` for a batch of ``num_chains`` vectorised chains,
    when an array of ``tree`` (the model's arguments) lies on a mesh with a ``"chain"`` axis;
    ``None`` otherwise (the chains are then replicated on every device of the data's mesh).

    With a ``("chain", "data")`` mesh each device holds a slice of the chains and a slice of the
    rows: XLA partitions the vmapped chains over ``"chain"`` and each chain's full-data and
    minibatch passes over ``"data"``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> chain_sharding((jnp.ones((8, 2)),), num_chains=2) is None  # data not on a mesh
    True
    """
    meshes = {
        sharding.mesh
        for leaf in jax.tree.leaves(tree)
        if isinstance(sharding := getattr(leaf, "sharding", None), NamedSharding)
        and CHAIN_AXIS in sharding.mesh.axis_names
    }
    if not meshes:
        return None
    if len(meshes) > 1:
        raise ValueError(
            "the model's arrays lie on several meshes with a 'chain' axis; place them all on one "
            "mesh (pplsamplers.shard_data(args, mesh=...))."
        )
    (mesh,) = meshes
    devices = mesh.shape[CHAIN_AXIS]
    if num_chains % devices:
        raise ValueError(
            f"num_chains={num_chains} is not a multiple of the {devices} devices on the data "
            f"mesh's {CHAIN_AXIS!r} axis; use a multiple of {devices} chains, or a mesh whose "
            f"{CHAIN_AXIS!r} axis divides {num_chains}."
        )
    return NamedSharding(mesh, P(CHAIN_AXIS))


def _row_axis(value: Any, N: int) -> tuple[Mesh, str] | None:
    """(mesh, axis) when ``value`` is an array of N rows split over one mesh axis."""
    sharding = getattr(value, "sharding", None)
    if not isinstance(sharding, NamedSharding) or np.ndim(value) == 0 or value.shape[0] != N:
        return None
    spec = tuple(sharding.spec) + (None,)
    axis, rest = spec[0], spec[1:]
    if not isinstance(axis, str) or any(r is not None for r in rest):
        return None
    return sharding.mesh, axis


def _traced_terms(terms: Callable, x: Array, idx: Array) -> Any:
    """``jax.make_jaxpr(terms)``, with closed-over arrays as constvars (not literals)."""
    from jax._src import config as jax_config  # the flag's context manager (JAX >= 0.7)

    with jax_config.use_simplified_jaxpr_constants(False):
        return jax.make_jaxpr(terms)(x, idx)


def _data_layout(closed: Any, N: int) -> tuple[Mesh, str, list[bool]] | None:
    """Which constants of the traced terms are sharded data, if they are used only by gathers."""
    found = [_row_axis(c, N) for c in closed.consts]
    layouts = {f for f in found if f is not None}
    if len(layouts) != 1:
        return None
    ((mesh, axis),) = layouts
    if N % mesh.shape[axis]:
        return None
    is_data = [f is not None for f in found]
    data_ids = {id(v) for v, d in zip(closed.jaxpr.constvars, is_data, strict=True) if d}
    for eqn in closed.jaxpr.eqns:
        for position, var in enumerate(eqn.invars):
            if id(var) in data_ids and (eqn.primitive.name != "gather" or position != 0):
                return None  # a reduction or a reshape of the whole array: not row-local
    if any(id(v) in data_ids for v in closed.jaxpr.outvars):
        return None
    return mesh, axis, is_data


def sharded_full_pass(
    terms: Callable, N: int, chunk_size: int, x: Array
) -> tuple[Array, Array] | None:
    """Σ_i ℓ_i(x) and its gradient, each device summing its own rows; ``None`` if not sharded.

    Applies when the arrays ``terms`` closes over with N rows are split over one axis of one
    mesh and are read only by gathers.  Each device scans its N/devices rows in chunks of
    ``chunk_size`` with local indices, and one ``psum`` of (value, gradient) ends the pass:
    no row leaves its device.  The global term is not included.
    """
    probe = min(chunk_size, N)
    closed = _traced_terms(terms, x, jnp.arange(probe))
    layout = _data_layout(closed, N)
    if layout is None:
        return None
    mesh, axis, is_data = layout
    rows = N // mesh.shape[axis]
    chunk = min(chunk_size, rows)
    num_chunks = -(-rows // chunk)
    closed = _traced_terms(terms, x, jnp.arange(chunk))
    if [_row_axis(c, N) is not None for c in closed.consts] != is_data:
        return None
    data = [c for c, d in zip(closed.consts, is_data, strict=True) if d]

    devices = mesh.shape[axis]
    # (N, ...) -> (devices, rows, ...): a local reshape of row-split data (no row moves)
    blocked = [
        lax.with_sharding_constraint(
            d.reshape(devices, rows, *d.shape[1:]),
            NamedSharding(mesh, P(axis, *([None] * np.ndim(d)))),
        )
        for d in data
    ]

    def block_sum(block: list, z: Array, idx: Array, weight: Array) -> Array:
        rows_of = iter(block)
        consts = [next(rows_of) if d else c for d, c in zip(is_data, closed.consts, strict=True)]
        per_datum = jax.core.eval_jaxpr(closed.jaxpr, consts, z, idx)[1]
        return jnp.sum(weight * per_datum)

    def chunk_sum(z: Array, idx: Array, weight: Array) -> Array:
        # one block per device, vmapped: XLA keeps each block's gather on its own device
        per_block = jax.vmap(block_sum, in_axes=(0, None, None, None))(blocked, z, idx, weight)
        return jnp.sum(per_block)

    def body(carry: tuple[Array, Array], c: Array) -> tuple[tuple[Array, Array], None]:
        raw = c * chunk + jnp.arange(chunk)
        weight = (raw < rows).astype(x.dtype)
        value, grad = jax.value_and_grad(chunk_sum)(x, jnp.minimum(raw, rows - 1), weight)
        return (carry[0] + value, carry[1] + grad), None

    zero = (jnp.zeros((), x.dtype), jnp.zeros_like(x))
    (value, grad), _ = lax.scan(body, zero, jnp.arange(num_chunks))
    return value, grad


def collectives(hlo_text: str) -> dict[str, int]:
    """Counts of the cross-device operations in compiled HLO text (``.compile().as_text()``)."""
    names = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
    return {name: hlo_text.count(f" {name}(") for name in names}


def environment_note() -> str:
    """One line on the devices, processes and the constants flag (for logs and benchmarks)."""
    return (
        f"{jax.process_count()} process(es), {jax.device_count()} device(s) "
        f"({jax.devices()[0].platform}); {CONSTANTS_FLAG}="
        f"{os.environ.get(CONSTANTS_FLAG, 'unset')}"
    )


__all__ = [
    "CHAIN_AXIS",
    "CONSTANTS_FLAG",
    "EMBEDDED_DATA_WARN_BYTES",
    "chain_sharding",
    "check_processes",
    "collectives",
    "constants_are_arguments",
    "data_mesh",
    "environment_note",
    "warn_embedded_data",
    "shard_data",
    "sharded_full_pass",
]
