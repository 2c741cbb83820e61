"""Result cache: `<dir>/<key>.mlir`, key = hash of the reference program's MLIR text
and the search configuration. Files hold the ranked candidates as functions
(`@<name>_0` best first), printed by mirage.core.mlir_text (op and dtype names, never
enum numbers). Reading back goes through `mirage.core.mlir_import.parse_mlir` (MLIR +
the C++ dialects, so the cached graphs pass the C++ verifiers and the Python builder's
checks again); a file that does not parse is a miss."""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict

from ..core.mlir_text import print_module


def cache_key(ref, cfg) -> str:
    relevant = {k: v for k, v in asdict(cfg).items() if k not in ("time_limit", "workers", "top_k")}
    h = hashlib.sha256(ref.to_mlir().encode())
    h.update(repr(sorted(relevant.items())).encode())
    return h.hexdigest()[:24]


def path(cache_dir: str, ref, cfg) -> str:
    return os.path.join(cache_dir, cache_key(ref, cfg) + ".mlir")


def store(cache_dir: str, ref, cfg, graphs) -> str:
    os.makedirs(cache_dir, exist_ok=True)
    named = []
    for k, g in enumerate(graphs):
        old = g.name
        g.name = f"{ref.name}_{k}"
        named.append((g, old))
    try:
        text = print_module([g for g, _ in named])
    finally:
        for g, old in named:
            g.name = old
    p = path(cache_dir, ref, cfg)
    tmp = p + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"// mirage-superoptimize cache for @{ref.name}; ranked best first\n")
        f.write(text)
    os.replace(tmp, p)
    return p


def parse_cached(text: str):
    """The one function behind which reading the cache back sits."""
    from ..core.mlir_import import parse_mlir

    return parse_mlir(text)


def load(cache_dir: str, ref, cfg):
    p = path(cache_dir, ref, cfg)
    if not os.path.exists(p):
        return None
    try:
        with open(p) as f:
            graphs = parse_cached(f.read())
    except Exception:  # unreadable or stale cache entry: search again (and overwrite it)
        return None
    for g in graphs:
        g.name = ref.name
    return graphs or None
