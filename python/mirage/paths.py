"""Default places on disk: everything mirage writes without being told where goes under
the user cache directory, so two users of one machine never share (or clobber) a
directory in /tmp.

    MIRAGE_CACHE_DIR          overrides the root
    $XDG_CACHE_HOME/mirage    else
    ~/.cache/mirage           else

Sub-folders: `bundles/` (g.compile() without out_dir), `search/` (the search's result
cache, `superoptimize(use_cached_graphs=True)`), `ptx/` (the PTX compiler's cache,
`mirage.lower.compile`); the file `search-cache.key` (this user's key of the search cache
entries' HMAC, search/cache.py); the runtime's variant choices use the same root
(`mirage.runtime.select.default_cache_dir`, the same rule restated there because the
runtime imports nothing else of mirage). Imports nothing but the standard library.
"""
from __future__ import annotations

import os
import tempfile


def user_cache_dir(*sub: str) -> str:
    """The mirage cache root (see the module doc), joined with `sub`; not created."""
    root = os.environ.get("MIRAGE_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "mirage")
    return os.path.join(root, *sub)


def bundle_dir() -> str:
    """Root of the kernel bundles `compile` writes when no `out_dir` is given
    (`MIRAGE_CACHE`, the older variable, still overrides it)."""
    return os.environ.get("MIRAGE_CACHE") or user_cache_dir("bundles")


def search_cache_dir() -> str:
    """The search's result cache used by `KNGraph.superoptimize(use_cached_graphs=True)`."""
    return user_cache_dir("search")


def write_atomic(path: str, data: str | bytes) -> None:
    """Write `path` through a temp file of its folder (one per writer), on the disk before
    it is renamed over `path` (atomic within a folder, also on NFS): a reader on any
    machine sees the old file or the new one, never a part; of concurrent writers the last
    wins. The file is readable by other users as the umask allows (mkstemp's 0600 would
    hide a shared cache entry from them)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise
