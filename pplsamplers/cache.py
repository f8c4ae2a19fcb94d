"""A persistent JAX compilation cache for pplsamplers users, on by default, with an opt-out.

NumPyro builds fresh closures for every run, and a pplsamplers set-up (mode search,
curvature, probes, the sampling loop) compiles a dozen programs, so a cold process spends
most of a short run compiling.  JAX's persistent cache, keyed on the program (shapes,
dtypes, code, JAX version and backend), makes the second process that compiles the same
program read it from disk instead.

:func:`enable_compilation_cache` (called once by the first sampler ``init``) points JAX's
cache at a user cache directory unless the user already chose:

* ``PPLSAMPLERS_NO_COMPILATION_CACHE=1`` (or ``true``/``yes``): do nothing (opt-out);
* a cache directory already configured (``jax.config.update("jax_compilation_cache_dir",
  ...)``, ``JAX_COMPILATION_CACHE_DIR``, ``jax.experimental.compilation_cache``): kept;
* ``jax_enable_compilation_cache=False``: respected, nothing is set.

The directory is ``$PPLSAMPLERS_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/pplsamplers/jax``,
else ``~/.cache/pplsamplers/jax``, created on first use.  Programs that compile in under
:data:`MIN_COMPILE_SECONDS` are not written (reading a small entry costs about what compiling
it does).  The directory is capped at :data:`MAX_CACHE_BYTES` (the least recently used
programs go first; ``jax_compilation_cache_max_size`` set by the user wins), and can be
deleted at will: it is only a cache.

The cache is trusted code: do not point it at a directory others can write to (JAX's
warning, :func:`jax.experimental.compilation_cache.compilation_cache.set_cache_dir`).

Examples
--------
>>> import os, tempfile
>>> from pplsamplers.cache import enable_compilation_cache
>>> path = enable_compilation_cache(os.path.join(tempfile.mkdtemp(), "jax"))
>>> path is None or os.path.isdir(path)
True
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

OPT_OUT_ENV = "PPLSAMPLERS_NO_COMPILATION_CACHE"
"""Set to ``1`` to keep pplsamplers from enabling the persistent compilation cache."""
DIR_ENV = "PPLSAMPLERS_CACHE_DIR"
"""Overrides the cache directory (before ``$XDG_CACHE_HOME``)."""
MIN_COMPILE_SECONDS = 0.2
"""Programs compiling faster than this are not cached (JAX's own default is 1 s, which
misses most of the set-up's programs; below ~0.1 s a disk read gains nothing)."""
MAX_CACHE_BYTES = 2**30
"""Cap on the cache directory: JAX evicts the least recently used programs beyond it."""

_JAX_DEFAULT_MIN_COMPILE_SECONDS = 1.0


def _opted_out() -> bool:
    return os.environ.get(OPT_OUT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def default_cache_dir() -> Path:
    """``$PPLSAMPLERS_CACHE_DIR``, else ``$XDG_CACHE_HOME/pplsamplers/jax``, else
    ``~/.cache/pplsamplers/jax`` (not created here)."""
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).expanduser() / "pplsamplers" / "jax"


def _reset_jax_cache_state() -> None:
    """Let JAX re-read the directory if it already decided "no cache" at an earlier compile.

    JAX checks the cache configuration once, at the first compilation of the process; a
    directory set afterwards is ignored until the cache state is reset.  Resetting is a no-op
    for a process that has not compiled yet.
    """
    from jax._src import compilation_cache as jax_cache

    if getattr(jax_cache, "_cache", None) is None:
        from jax.experimental.compilation_cache import compilation_cache as public

        public.reset_cache()


def enable_compilation_cache(path: str | os.PathLike | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache in a user cache directory.

    Parameters
    ----------
    path
        The directory; ``None`` (default) for :func:`default_cache_dir`.

    Returns
    -------
    str or None
        The cache directory in use after the call: the one set here, the user's own if one
        was already configured, or ``None`` when the cache is off (opt-out through
        ``PPLSAMPLERS_NO_COMPILATION_CACHE=1``, ``jax_enable_compilation_cache=False``, or a
        directory that cannot be created, which is not an error).

    Notes
    -----
    Idempotent: once a directory is configured (here or by the user) later calls return it
    and change nothing but the size cap, which applies to the user's own directory too
    unless they set ``jax_compilation_cache_max_size``.  Called by the first ``init`` of a
    pplsamplers sampler; call it yourself (or set a directory with
    ``jax.config.update("jax_compilation_cache_dir", ...)``) to cache the programs of code
    that runs before.
    """
    configured = jax.config.jax_compilation_cache_dir
    if configured:  # the user's choice (config, JAX_COMPILATION_CACHE_DIR, set_cache_dir)
        _cap_size()
        return str(configured)
    if _opted_out() or not jax.config.jax_enable_compilation_cache:
        return None
    directory = Path(path).expanduser() if path is not None else default_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a read-only home, say: run without a cache rather than fail
    if jax.config.jax_persistent_cache_min_compile_time_secs == _JAX_DEFAULT_MIN_COMPILE_SECONDS:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    _cap_size()
    jax.config.update("jax_compilation_cache_dir", str(directory))
    _reset_jax_cache_state()
    return str(directory)


def _cap_size() -> None:
    """:data:`MAX_CACHE_BYTES` unless a cap is already set (JAX's default -1 is none)."""
    if jax.config.jax_compilation_cache_max_size == -1:
        jax.config.update("jax_compilation_cache_max_size", MAX_CACHE_BYTES)


__all__ = ["DIR_ENV", "OPT_OUT_ENV", "default_cache_dir", "enable_compilation_cache"]
