"""Files of a checkpoint: pytrees to arrays and back, atomic writes, the verified manifest.

See :mod:`pplsamplers.checkpoint` for the layout and the guarantees.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

FORMAT, VERSION = "pplsamplers-checkpoint", 1
MANIFEST = "manifest.json"
TEMP_PREFIX = ".tmp-"


class CheckpointError(RuntimeError):
    """A checkpoint directory that cannot be used: corrupt, incomplete or of another run.

    Also raised when an MCMC state holds something that cannot be written to a checkpoint.

    Parameters
    ----------
    *args : str
        The message (one string): what is wrong and, where there is one, what to do about it.

    Examples
    --------
    >>> issubclass(CheckpointError, RuntimeError)
    True
    """


# ------------------------------------------------------------------ pytrees <-> files
def _is_key(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def encode_tree(tree: Any, leaves: list, path: str = "") -> Any:
    """A JSON description of ``tree``'s containers; its arrays are appended to ``leaves``."""
    if tree is None:
        return {"none": True}
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):  # a NamedTuple
        cls = type(tree)
        children = [
            encode_tree(tuple.__getitem__(tree, i), leaves, f"{path}.{name}".lstrip("."))
            for i, name in enumerate(cls._fields)
        ]
        return {"namedtuple": f"{cls.__module__}:{cls.__qualname__}", "children": children}
    if isinstance(tree, (tuple, list)):
        kind = "tuple" if isinstance(tree, tuple) else "list"
        return {kind: [encode_tree(x, leaves, f"{path}[{i}]") for i, x in enumerate(tree)]}
    if isinstance(tree, dict):
        items = []
        for key, value in tree.items():
            if not isinstance(key, (str, int, tuple)):
                raise CheckpointError(f"cannot save a dict key of type {type(key).__name__}.")
            name = key if isinstance(key, str) else "_".join(map(str, np.atleast_1d(key)))
            items.append(
                [_encode_key(key), encode_tree(value, leaves, f"{path}.{name}".lstrip("."))]
            )
        return {"dict": items}
    if isinstance(tree, (jax.Array, np.ndarray, np.generic, bool, int, float)):
        node: dict[str, Any] = {"leaf": len(leaves), "path": path or "value"}
        if _is_key(tree):
            node["key_impl"] = str(jax.random.key_impl(tree))
            tree = jax.random.key_data(tree)
        leaves.append(np.asarray(tree))
        return node
    raise CheckpointError(
        f"cannot save a {type(tree).__name__} at {path or 'the top'} of the MCMC state: only "
        "arrays, NamedTuples, tuples, lists, dicts and None are supported."
    )


def _encode_key(key: Any) -> Any:
    if isinstance(key, tuple):
        return {"t": [_encode_key(k) for k in key]}
    return key


def _decode_key(key: Any) -> Any:
    return tuple(_decode_key(k) for k in key["t"]) if isinstance(key, dict) else key


def decode_tree(spec: Any, leaves: list) -> Any:
    """The pytree :func:`encode_tree` described, its classes imported by name, keys rewrapped."""
    if "none" in spec:
        return None
    if "namedtuple" in spec:
        module, qualname = spec["namedtuple"].split(":")
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        return cls(*(decode_tree(child, leaves) for child in spec["children"]))
    if "tuple" in spec:
        return tuple(decode_tree(child, leaves) for child in spec["tuple"])
    if "list" in spec:
        return [decode_tree(child, leaves) for child in spec["list"]]
    if "dict" in spec:
        return {_decode_key(k): decode_tree(v, leaves) for k, v in spec["dict"]}
    leaf = jnp.asarray(leaves[spec["leaf"]])
    return jax.random.wrap_key_data(leaf, impl=spec["key_impl"]) if "key_impl" in spec else leaf


def digest(leaves: list) -> str:
    """SHA-256 of arrays: their dtypes, shapes and bytes."""
    sha = hashlib.sha256()
    for leaf in leaves:
        sha.update(f"{leaf.dtype.str}{leaf.shape}".encode())
        sha.update(np.ascontiguousarray(leaf).tobytes())
    return sha.hexdigest()


def state_digest(state: Any) -> str:
    """SHA-256 of a pytree's arrays (which state a checkpoint holds)."""
    leaves: list = []
    encode_tree(jax.device_get(state), leaves)
    return digest(leaves)


# ------------------------------------------------------------------ atomic files
def sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    sha = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover (platforms without directory handles)
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(directory: Path, name: str, write: Any) -> str:
    """``write(temp_path)``, flush it to disk, move it to ``directory/name``; its SHA-256."""
    fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=Path(name).suffix, dir=directory)
    os.close(fd)
    try:
        write(temp)
        with open(temp, "rb+") as file:
            os.fsync(file.fileno())
        checksum = sha256(Path(temp))
        os.replace(temp, directory / name)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return checksum


def save_state(temp: str, state: Any) -> None:
    """Write ``state`` as ``.npz``: one entry per array and its structure as JSON."""
    leaves: list = []
    structure = encode_tree(jax.device_get(state), leaves)
    arrays = {f"leaf_{i:05d}": leaf for i, leaf in enumerate(leaves)}
    with open(temp, "wb") as file:
        np.savez(file, __structure__=np.asarray(json.dumps(structure)), **arrays)


def load_state(path: Path) -> Any:
    """Read a state written by :func:`save_state` (no pickles)."""
    with np.load(path, allow_pickle=False) as data:
        structure = json.loads(str(data["__structure__"]))
        leaves = [data[f"leaf_{i:05d}"] for i in range(len(data.files) - 1)]
    return decode_tree(structure, leaves)


def save_draws(temp: str, draws: dict) -> None:
    """Write one segment's draws as a netCDF file: a variable per field, its structure in attrs."""
    import xarray as xr

    leaves: list = []
    structure = encode_tree(draws, leaves)
    paths = _leaf_paths(structure)
    variables = {}
    for i, (leaf, path) in enumerate(zip(leaves, paths, strict=True)):
        attrs = {"leaf": i, "dtype": leaf.dtype.str}
        if leaf.dtype == bool:  # netCDF has no boolean type
            leaf = leaf.astype(np.uint8)
        dims = ("chain", "draw", *(f"{path}_dim_{j}" for j in range(leaf.ndim - 2)))
        variables[path.replace("/", "_")] = xr.Variable(dims, leaf, attrs)
    dataset = xr.Dataset(variables, attrs={"structure": json.dumps(structure)})
    dataset.to_netcdf(temp, engine="netcdf4", format="NETCDF4")


def load_draws(path: Path) -> tuple[Any, list]:
    """The structure and arrays of a file written by :func:`save_draws`, dtypes restored."""
    import xarray as xr

    with xr.open_dataset(path, engine="netcdf4", mask_and_scale=False, decode_times=False) as ds:
        structure = json.loads(ds.attrs["structure"])
        leaves: list = [None] * len(ds.data_vars)
        for variable in ds.data_vars.values():
            leaves[int(variable.attrs["leaf"])] = np.asarray(variable.values).astype(
                np.dtype(variable.attrs["dtype"])
            )
    return structure, leaves


def _leaf_paths(spec: Any) -> list[str]:
    found: list[tuple[int, str]] = []

    def walk(node: Any) -> None:
        if "leaf" in node:
            found.append((node["leaf"], node["path"]))
        for key in ("children", "tuple", "list"):
            for child in node.get(key, ()):
                walk(child)
        for _, child in node.get("dict", ()):
            walk(child)

    walk(spec)
    return [path for _, path in sorted(found)]


# ------------------------------------------------------------------ manifest
def read_manifest(directory: Path) -> dict | None:
    """The manifest with every file it names verified; ``None`` if there is none."""
    path = directory / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
        checksum = manifest.pop("checksum")
    except (ValueError, KeyError) as error:
        raise CheckpointError(
            f"{path} is not a readable checkpoint manifest ({error}); delete the directory "
            "to start over."
        ) from None
    if checksum != json_sha(manifest) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} fails its checksum; delete the directory to start over.")
    if manifest["version"] > VERSION:
        raise CheckpointError(f"{path} is format version {manifest['version']}; upgrade.")
    for entry in [manifest["state"], *manifest["segments"]]:
        file = directory / entry["file"]
        if not file.is_file() or sha256(file) != entry["sha256"]:
            raise CheckpointError(
                f"checkpoint file {file} is missing or does not match its checksum in {path}: "
                "the directory was modified after it was written; delete it to start over."
            )
    return manifest


def json_sha(data: dict) -> str:
    """SHA-256 of canonical JSON (the manifest's own checksum)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


__all__ = [
    "FORMAT",
    "MANIFEST",
    "TEMP_PREFIX",
    "VERSION",
    "CheckpointError",
    "decode_tree",
    "digest",
    "encode_tree",
    "json_sha",
    "load_draws",
    "load_state",
    "read_manifest",
    "save_draws",
    "save_state",
    "sha256",
    "state_digest",
    "write_atomic",
]
