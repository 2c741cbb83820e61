"""Result cache: `<dir>/<key>.mlir`, key = hash of the reference program's MLIR text
(under a fixed function name: renamed copies share an entry), the search configuration
and the mirage version. Files hold the ranked candidates as functions (`@<name>_0` best
first), printed by mirage.core.mlir_text (op and dtype names, never enum numbers).

The folder may be shared by several machines (NFS or any file system they all mount):
entries are written atomically (`_write_atomic`: a reader sees the old file or the whole
new one; of concurrent writers of one key the last wins, each with a complete entry),
readable by the other users as the umask allows, and a reader discards a bad entry only
if no writer has replaced it since it was read.

Nothing is returned unchecked: reading back goes through `mirage.core.mlir_import.parse_mlir`
(MLIR + the C++ dialects, so the cached graphs pass the C++ verifiers and the Python
builder's checks again), then every cached program must have the reference's signature
and pass the verifier against it (finite-field trials). A file that does not parse, or
an entry that fails a check (edited, another program's, written by another version), is
reported with a warning, deleted, and the search runs again.

Checkpoint files (`store_checkpoint` / `load_checkpoint`, Mirage's `previous_checkpoint`)
hold the same ranked results for one program as JSON (`mirage.core.serialize`), at a path
the caller names; they are checked the same way, and an existing file is never replaced."""
from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from dataclasses import asdict

from ..core.mlir_text import print_module

FORMAT = "mirage-superoptimize-cache 2"


def cache_key(ref, cfg) -> str:
    from .. import __version__

    relevant = {k: v for k, v in asdict(cfg).items()
                if k not in ("time_limit", "workers", "executor", "top_k", "warmup_iters", "profile_iters")}  # not what is found
    old = ref.name
    ref.name = "program"  # the key does not depend on the function's name
    try:
        h = hashlib.sha256(ref.to_mlir().encode())
    finally:
        ref.name = old
    h.update(repr(sorted(relevant.items())).encode())
    h.update(f"{FORMAT} {__version__}".encode())
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
    _write_atomic(p, f"// {FORMAT} for @{ref.name}; ranked best first\n" + text)
    return p


def _write_atomic(path: str, text: str) -> None:
    """Write `path` through a temp file of its folder (one per writer), on the disk before
    it is renamed over `path` (atomic within a folder, also on NFS): a reader on any
    machine sees the old file or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide the entry from other users
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def parse_cached(text: str):
    """The one function behind which reading the cache back sits."""
    from ..core.mlir_import import parse_mlir

    return parse_mlir(text)


def _signature(g):
    return ([(t.shape, t.dtype.mlir) for t in g.inputs], [(t.shape, t.dtype.mlir) for t in g.outputs],
            sorted(g.strides.items()))


def check_entry(ref, graphs) -> str | None:
    """Why the cached `graphs` must not be returned for `ref`, or None."""
    from ..verify import check_equivalence

    if not graphs:
        return "no program in the entry"
    for k, g in enumerate(graphs):
        if _signature(g) != _signature(ref):
            return f"program {k} takes or returns other tensors than the reference"
        r = check_equivalence(ref, g, fp_check=False)
        if not r.equivalent:
            return f"program {k} is not equivalent to the reference ({r.reason or 'verifier'})"
    return None


def load(cache_dir: str, ref, cfg):
    p = path(cache_dir, ref, cfg)
    read = None
    try:
        with open(p) as f:
            read = os.fstat(f.fileno())
            graphs = parse_cached(f.read())
        why = check_entry(ref, graphs)
    except FileNotFoundError:
        return None
    except Exception as e:  # unreadable, or a program the checks cannot take
        why = f"unreadable ({type(e).__name__}: {e})"
    if why is not None:
        warnings.warn(f"search cache entry {p} discarded: {why}; searching again", stacklevel=3)
        _remove_if_unchanged(p, read)
        return None
    for g in graphs:
        g.name = ref.name
    return graphs


def _remove_if_unchanged(p: str, read) -> None:
    """Remove `p` unless another writer replaced it after it was read (`read`: its stat then)."""
    try:
        now = os.stat(p)
        same = lambda st: (st.st_ino, st.st_mtime_ns, st.st_size)  # noqa: E731
        if read is None or same(now) == same(read):
            os.remove(p)
    except OSError:  # gone already, or not ours to remove
        pass


# -- checkpoint files (Mirage's `previous_checkpoint`) -------------------------------------

CHECKPOINT_FORMAT = "mirage-checkpoint"


def store_checkpoint(path: str, ref, graphs) -> str:
    """Write the ranked `graphs` found for `ref` to the JSON file `path` (best first; each
    in the format of `mirage.core.serialize`), atomically."""
    import json

    from ..core.serialize import owner_independent_hash, to_data

    data = {"format": CHECKPOINT_FORMAT, "version": 1, "reference": f"{owner_independent_hash(ref):016x}",
            "graphs": [to_data(g) for g in graphs]}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _write_atomic(path, json.dumps(data) + "\n")
    return path


def load_checkpoint(path: str, ref):
    """The graphs of checkpoint file `path` if they are results for `ref` (same signature,
    each passes the verifier against it), else None with a warning saying why; the file
    is left as it is either way (it may be Mirage's own, which this does not read)."""
    import json

    from ..core.serialize import from_data

    try:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            why = "not a checkpoint written by this implementation (Mirage's own checkpoint files are not read)"
        else:
            graphs = [from_data(d) for d in data.get("graphs", [])]
            why = check_entry(ref, graphs)
    except Exception as e:  # unreadable or malformed: search instead
        why = f"unreadable ({type(e).__name__}: {e})"
    if why is not None:
        warnings.warn(f"previous_checkpoint {path} not used: {why}; searching (the file is left as it is)",
                      stacklevel=3)
        return None
    for g in graphs:
        g.name = ref.name
    return graphs
