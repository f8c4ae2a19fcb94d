"""The persistent compilation cache of :mod:`pplsamplers.cache` (no real home directory)."""

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from pplsamplers import cache

_KEYS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_compilation_cache_max_size",
    "jax_enable_compilation_cache",
)


@pytest.fixture
def clean(monkeypatch, tmp_path):
    """No cache configured, HOME and XDG_CACHE_HOME in tmp_path; JAX's state restored after."""
    saved = {key: getattr(jax.config, key) for key in _KEYS}
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for name in (cache.OPT_OUT_ENV, cache.DIR_ENV):
        monkeypatch.delenv(name, raising=False)
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_compilation_cache_max_size", -1)
    jax_cache.reset_cache()  # the suite's own cache may be open already
    yield tmp_path
    for key, value in saved.items():
        jax.config.update(key, value)
    jax_cache.reset_cache()  # reopened at the restored directory on the next compile


def test_default_dir_under_xdg_cache_home_created_on_demand(clean):
    expected = clean / "xdg" / "pplsamplers" / "jax"
    assert not expected.exists()
    assert cache.enable_compilation_cache() == str(expected)
    assert expected.is_dir()
    assert jax.config.jax_compilation_cache_dir == str(expected)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == cache.MIN_COMPILE_SECONDS


def test_home_fallback_without_xdg(clean, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.enable_compilation_cache() == str(
        clean / "home" / ".cache" / "pplsamplers" / "jax"
    )


def test_opt_out_env(clean, monkeypatch):
    monkeypatch.setenv(cache.OPT_OUT_ENV, "1")
    assert cache.enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir is None
    assert not (clean / "xdg").exists()


def test_respects_user_dir_and_settings(clean):
    jax.config.update("jax_compilation_cache_dir", str(clean / "mine"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 5.0)
    assert cache.enable_compilation_cache() == str(clean / "mine")
    assert jax.config.jax_compilation_cache_dir == str(clean / "mine")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 5.0
    assert not (clean / "xdg").exists()


def test_the_cache_is_capped_unless_the_user_capped_it(clean):
    assert cache.enable_compilation_cache(clean / "capped") == str(clean / "capped")
    assert jax.config.jax_compilation_cache_max_size == cache.MAX_CACHE_BYTES
    jax.config.update("jax_compilation_cache_max_size", 12345)
    assert cache.enable_compilation_cache() == str(clean / "capped")
    assert jax.config.jax_compilation_cache_max_size == 12345


def test_respects_jax_disable(clean):
    jax.config.update("jax_enable_compilation_cache", False)
    assert cache.enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir is None


def test_idempotent(clean, monkeypatch):
    first = cache.enable_compilation_cache(clean / "given")
    assert first == str(clean / "given")
    monkeypatch.setenv(cache.OPT_OUT_ENV, "1")  # decided already: later calls change nothing
    assert cache.enable_compilation_cache() == first
    assert cache.enable_compilation_cache(clean / "other") == first
    assert not (clean / "other").exists()


def test_unwritable_dir_is_not_an_error(clean):
    blocker = clean / "file"
    blocker.write_text("not a directory")
    assert cache.enable_compilation_cache(blocker / "jax") is None
    assert jax.config.jax_compilation_cache_dir is None


def test_writes_entries_after_an_earlier_compile(clean):
    """A directory set after the process compiled without a cache still takes effect."""
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()  # JAX decides "no cache" here
    path = cache.enable_compilation_cache(clean / "late")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.jit(lambda x: x * 3.0 - 7.0)(2.0).block_until_ready()
    assert any((clean / "late").iterdir()), path
