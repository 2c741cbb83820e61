"""Shared pytest setup of the Python tests."""
import pytest


@pytest.fixture(autouse=True)
def _private_user_cache(tmp_path_factory, monkeypatch):
    """Every test gets a fresh, empty user cache directory (`mirage.paths`): mirage-opt's
    `--mirage-superoptimize` caches its results there by default, and a test must neither
    write into the user's ~/.cache nor be answered from what an earlier run left there.
    Tests that look at the cache location themselves set or unset these variables."""
    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path_factory.mktemp("mirage-cache")))
    monkeypatch.delenv("MIRAGE_CACHE", raising=False)
