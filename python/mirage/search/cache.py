"""Result cache: `<dir>/<key>.mlir`, key = hash of the reference program's MLIR text
(under a fixed function name: renamed copies share an entry), the search configuration,
the mirage version, the source of the code that decides what is found and how it ranks
(`search_code_hash`: a changed cost model must not hand back the old model's picks) and
whether the formal verifier checks the candidates (`check.USE_FORMAL_VERIFIER`). Files hold the ranked candidates as functions
(`@<name>_0` best first), printed by mirage.core.mlir_text (op and dtype names, never
enum numbers).

The folder may be shared by several machines (NFS or any file system they all mount):
entries are written atomically (`mirage.paths.write_atomic`: a reader sees the old file or the whole
new one; of concurrent writers of one key the last wins, each with a complete entry),
readable by the other users as the umask allows, and a reader discards a bad entry only
if no writer has replaced it since it was read.

Nothing is returned unchecked: reading back goes through `mirage.mlir.importer.parse_mlir`
(MLIR + the C++ dialects, so the cached graphs pass the C++ verifiers and the Python
builder's checks again), then every cached program must have the reference's signature
and pass the verifier against it (finite-field trials). A file that does not parse, or
an entry that fails a check (edited, another program's, written by another version), is
reported with a warning, deleted, and the search runs again.

A search stopped by its time limit is cached too (its candidates are verified like any
others): the entry records the limit (`stopped at time_limit=T`), and a later call with a
larger `time_limit` searches again (and replaces the entry); one with the same or a smaller
limit takes it. A search stopped by Ctrl-C is not cached.

Re-checking an entry at full size is slow (the verifier on a decoder layer: ~40 s), so an
entry carries an HMAC of its key and text under this user's secret (`secret()`, a file of
the user cache root readable by its owner only): an entry this user's processes wrote (and
verified before writing) is taken after parsing and reprinting to the same text; any other
(another user's in a shared folder, an edited one) goes through the checks above.

Checkpoint files (`store_checkpoint` / `load_checkpoint`, Mirage's `previous_checkpoint`)
hold the same ranked results for one program as JSON (`mirage.core.serialize`), at a path
the caller names; they are checked the same way, and an existing file is never replaced."""
from __future__ import annotations

import functools
import glob
import hashlib
import hmac
import os
import secrets
import warnings
from dataclasses import asdict

from ..core.mlir_text import print_module
from ..paths import user_cache_dir, write_atomic as _write_atomic
from . import check as CHK

FORMAT = "mirage-superoptimize-cache 3"


def cache_key(ref, cfg) -> str:
    from ..version import __version__

    relevant = {k: v for k, v in asdict(cfg).items()
                if k not in ("time_limit", "workers", "executor", "top_k", "warmup_iters", "profile_iters")}  # not what is found
    old = ref.name
    ref.name = "program"  # the key does not depend on the function's name
    try:
        h = hashlib.sha256(ref.to_mlir().encode())
    finally:
        ref.name = old
    h.update(repr(sorted(relevant.items())).encode())
    h.update(f"{FORMAT} {__version__} {search_code_hash()}".encode())
    if not CHK.USE_FORMAL_VERIFIER:  # its entries were float64-checked only: a verifying run does not take them
        h.update(b" float64 check only")
    return h.hexdigest()[:24]


@functools.lru_cache(maxsize=None)
def search_code_hash() -> str:
    """Hash of the search package's sources, the op table, the targets and the lowering's
    rules the cost model reads (what the search visits and how it ranks it), read once a
    process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = sorted(glob.glob(os.path.join(root, "search", "*.py"))) + \
        [os.path.join(root, *f) for f in (("core", "ops.py"), ("target.py",), ("lower", "kernel_plan.py"),
                                          ("lower", "predefined.py"), ("lower", "convert.py"))]
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


def path(cache_dir: str, ref, cfg) -> str:
    return os.path.join(cache_dir, cache_key(ref, cfg) + ".mlir")


def _body(name: str, graphs) -> str:
    """The entry's MLIR: the graphs as functions @<name>_<k>, best first."""
    named = []
    for k, g in enumerate(graphs):
        old = g.name
        g.name = f"{name}_{k}"
        named.append((g, old))
    try:
        return print_module([g for g, _ in named])
    finally:
        for g, old in named:
            g.name = old


def store(cache_dir: str, ref, cfg, graphs, stopped: str | None = None) -> str:
    """Write the verified `graphs` (best first) found for `ref` under `cfg`; `stopped`: why
    the search stopped early ("time limit", ...), None when it finished."""
    os.makedirs(cache_dir, exist_ok=True)
    body = _body(ref.name, graphs)
    status = "complete" if not stopped else f"stopped at time_limit={float(cfg.time_limit)!r}"
    p = path(cache_dir, ref, cfg)
    mac = _mac(cache_key(ref, cfg), status, body)
    _write_atomic(p, f"// {FORMAT} for @{ref.name}; ranked best first; {status}; hmac {mac}\n" + body)
    return p


def _mac(key: str, status: str, body: str) -> str:
    return hmac.new(secret(), f"{key}\n{status}\n{body}".encode(), hashlib.sha256).hexdigest()


def secret() -> bytes:
    """This user's key for the entries' HMAC: `<user cache root>/search-cache.key`, 32 random
    bytes made on first use, mode 0600 (of concurrent creators the first wins: os.link does
    not replace an existing file)."""
    p = user_cache_dir("search-cache.key")
    try:
        with open(p, "rb") as f:
            key = f.read()
        if len(key) == 32:
            return key
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(p), exist_ok=True)
    tmp = f"{p}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, p)
        except FileExistsError:  # another process made it first; a bad one (not 32 bytes) is replaced
            with open(p, "rb") as f:
                if len(f.read()) != 32:
                    os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    with open(p, "rb") as f:
        return f.read()


def parse_cached(text: str):
    """The one function behind which reading the cache back sits."""
    from ..mlir.importer import parse_mlir

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


def _header(text: str) -> tuple[str, str, str, str]:
    """(function name, status, mac, body) of an entry; ("", "", "", text) when its first
    line is no header."""
    first, _, body = text.partition("\n")
    parts = first.split("; ")
    lead = f"// {FORMAT} for @"
    if len(parts) == 4 and parts[0].startswith(lead) and parts[3].startswith("hmac "):
        return parts[0][len(lead):], parts[2], parts[3][5:], body
    return "", "", "", text


def _limit(status: str) -> float | None:
    """The time limit that stopped the search of an entry; None for a complete one."""
    if status.startswith("stopped at time_limit="):
        return float(status.split("=", 1)[1])
    return None


def load(cache_dir: str, ref, cfg):
    """The cached graphs for `ref` under `cfg`, or None: no entry, an entry of a search
    stopped by a smaller time limit than `cfg.time_limit`, or a bad entry (warned, removed)."""
    p = path(cache_dir, ref, cfg)
    read = None
    try:
        with open(p) as f:
            read = os.fstat(f.fileno())
            text = f.read()
        name, status, mac, body = _header(text)
        limit = _limit(status)
        if limit is not None and cfg.time_limit > limit:
            return None  # a larger limit may find more: search again (the entry is replaced)
        graphs = parse_cached(body)
        ours = bool(mac) and hmac.compare_digest(mac, _mac(cache_key(ref, cfg), status, body))
        # this user's own entry, parsed back to the text it wrote: verified when it was written
        # (against this reference: the MAC covers the key, which hashes its MLIR, signature
        # and strides included, so no signature check is needed here)
        trusted = ours and bool(graphs) and _body(name, graphs) == body
        why = None if trusted else check_entry(ref, graphs)
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
