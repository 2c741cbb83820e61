"""Variant bundles: several compiled versions of one program, the fastest chosen on the
GPU that runs them (as Triton's autotuner chooses a config), the choice kept on disk.

A variant bundle is a directory holding `variants.json` and one ordinary bundle per
variant (sub-directories)::

    {"format": "mirage-variants", "version": 1, "reference": "reference",
     "variants": [{"name": "rank0", "dir": "rank0"}, ..., {"name": "reference", "dir": "reference"}]}

Every variant takes the same inputs and returns the same outputs (checked on load).
`load(path)` returns a `Selecting` kernel. On its first call on a device it runs every
variant on the call's inputs, compares each variant's outputs with the reference
variant's (relative error `tolerance`; a variant that disagrees is dropped with a
warning), times the rest with CUDA events, and from then on launches the fastest. The
choice is stored under the user cache directory (`MIRAGE_CACHE_DIR`, else
`$XDG_CACHE_HOME/mirage`, else `~/.cache/mirage`; `cache_dir=None` keeps it in memory),
keyed by the bundle's content, the device name and its compute capability: another
process on the same kind of GPU reuses it, a different GPU measures again.

Each timed run starts with a cold L2 cache (a buffer twice its size is overwritten
first), as in a model where every layer's weights come from memory, and as
`triton.testing.do_bench` times: timed warm, variants that stream large weights rank
differently (GatedMLP at batch 8 on an H100: warm timing chose a variant 12% slower
cold). The ranking is of the variants against each other, not an absolute figure.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from .bundle import BundleError, load_bundle

FORMAT = "mirage-variants"
VERSION = 1
INDEX = "variants.json"
_NP = {"f16": np.float16, "f32": np.float32, "bf16": np.uint16}


def default_cache_dir() -> str:
    root = os.environ.get("MIRAGE_CACHE_DIR")
    if root:
        return root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mirage")


def is_variant_bundle(path) -> bool:
    return os.path.isfile(os.path.join(os.fspath(path), INDEX))


def write_variant_bundle(dest, variants: list[tuple[str, str]], reference: str) -> str:
    """Assemble a variant bundle at `dest` from (name, bundle directory) pairs (a bundle
    already at `dest/<name>` stays where it is); `reference` names the variant the others
    are checked against. Returns `dest`."""
    import shutil

    names = [n for n, _ in variants]
    if reference not in names:
        raise BundleError(f"{dest}: reference variant {reference!r} is not among {names}")
    if len(set(names)) != len(names):
        raise BundleError(f"{dest}: variant names repeat: {names}")
    dest = os.fspath(dest)
    os.makedirs(dest, exist_ok=True)
    for name, src in variants:
        load_bundle(src)  # validate before copying
        if os.path.basename(name) != name or name.startswith("."):
            raise BundleError(f"{dest}: variant name {name!r} must be a plain directory name")
        to = os.path.join(dest, name)
        if os.path.abspath(src) == os.path.abspath(to):
            continue
        if os.path.isdir(to):
            shutil.rmtree(to)
        shutil.copytree(src, to)
    with open(os.path.join(dest, INDEX), "w") as f:
        json.dump({"format": FORMAT, "version": VERSION, "reference": reference,
                   "variants": [{"name": n, "dir": n} for n in names]}, f, indent=1)
    load_variants(dest)
    return dest


def load_variants(path) -> tuple[dict, list]:
    """Read and validate `variants.json`; returns (index, [(name, Bundle)])."""
    path = os.fspath(path)
    p = os.path.join(path, INDEX)
    try:
        with open(p) as f:
            idx = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise BundleError(f"{p}: cannot read the variant index: {e}") from None
    if not isinstance(idx, dict) or idx.get("format") != FORMAT or idx.get("version") != VERSION:
        raise BundleError(f"{p}: not a {FORMAT} v{VERSION} index")
    entries = idx.get("variants")
    if not isinstance(entries, list) or not entries:
        raise BundleError(f"{p}: 'variants' must be a non-empty list")
    bundles = []
    for i, v in enumerate(entries):
        if not isinstance(v, dict) or not isinstance(v.get("name"), str) or not isinstance(v.get("dir"), str):
            raise BundleError(f"{p}: variants[{i}] needs string 'name' and 'dir'")
        if os.path.basename(v["dir"]) != v["dir"]:
            raise BundleError(f"{p}: variants[{i}].dir {v['dir']!r} must be a plain directory name")
        bundles.append((v["name"], load_bundle(os.path.join(path, v["dir"]))))
    names = [n for n, _ in bundles]
    if idx.get("reference") not in names:
        raise BundleError(f"{p}: 'reference' {idx.get('reference')!r} names no variant ({names})")
    sig0 = _signature(bundles[0][1].manifest)
    for name, b in bundles[1:]:
        if _signature(b.manifest) != sig0:
            raise BundleError(f"{p}: variant {name!r} takes or returns other tensors than {names[0]!r}")
    return idx, bundles


def _signature(m):
    return ([(s.shape, s.dtype, s.strides) for s in m.inputs], [(s.shape, s.dtype) for s in m.outputs])


def _digest(bundles) -> str:
    h = hashlib.sha256()
    for name, b in bundles:
        h.update(name.encode())
        h.update(json.dumps(b.manifest.to_json(), sort_keys=True).encode())
        for k in sorted(b.ptx):
            h.update(b.ptx[k].encode())
    return h.hexdigest()[:20]


class ChoiceStore:
    """The on-disk record of choices: one JSON file, rewritten atomically under a lock."""

    def __init__(self, cache_dir: str | None):
        self.path = os.path.join(cache_dir, "variant_choices.json") if cache_dir else None
        self.memory: dict = {}

    def get(self, key: str):
        if self.path is None:
            return self.memory.get(key)
        return self._read().get(key)

    def put(self, key: str, value: dict) -> None:
        if self.path is None:
            self.memory[key] = value
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with self._lock():
            data = self._read()
            data[key] = value
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".choices")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)

    def _read(self) -> dict:
        try:
            with open(self.path) as f:
                data = json.load(f)
            return data if isinstance(data, dict) else {}
        except (OSError, json.JSONDecodeError):
            return {}  # absent or damaged: measure again (and rewrite it)

    @contextlib.contextmanager
    def _lock(self):
        try:
            import fcntl
        except ImportError:  # not POSIX: last writer wins
            yield
            return
        with open(self.path + ".lock", "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lk, fcntl.LOCK_UN)


class Selecting:
    """A variant bundle, called like a `Kernel`: the first call on a device chooses."""

    def __init__(self, path, driver=None, alignment: int = 16, cache_dir: str | None = "default",
                 tolerance: float = 2e-2, reps: int = 30):
        from .launcher import Kernel

        self.path = os.fspath(path)
        self.index, bundles = load_variants(self.path)
        self.names = [n for n, _ in bundles]
        self.reference = self.names.index(self.index["reference"])
        self.kernels = [Kernel(b, driver=driver, alignment=alignment) for _, b in bundles]
        self.manifest = self.kernels[0].manifest
        self.digest = _digest(bundles)
        self.store = ChoiceStore(default_cache_dir() if cache_dir == "default" else cache_dir)
        self.tolerance, self.reps = tolerance, reps
        self.chosen: dict[int, int] = {}  # device -> variant index
        self.report: dict = {}            # the last measurement (or the stored record)

    @property
    def driver(self):
        return self.kernels[0].driver

    def __call__(self, *tensors, stream=None, out=None) -> list:
        if len(self.chosen) == 1 and stream is None:
            # the common case: chosen already (the kernel's own fast path follows). A call on a
            # second device runs this choice too until a call with stream= chooses there.
            return self.kernels[next(iter(self.chosen.values()))](*tensors, out=out)
        ref = self.kernels[self.reference]
        device = self._device_of(ref, tensors)
        j = self.chosen.get(device)
        if j is None:
            key = f"{self.digest}|{self.device_key(device)}"
            rec = self.store.get(key)
            if rec and rec.get("variant") in self.names:
                self.report = rec
                j = self.chosen[device] = self.names.index(rec["variant"])
            else:
                results = ref(*tensors, stream=stream, out=out)  # checks the arguments
                j = self.chosen[device] = self._measure(key, device, tensors, results, stream)
                if j == self.reference:
                    return results
        return self.kernels[j](*tensors, stream=stream, out=out)

    def _device_of(self, k, tensors) -> int:
        from .launcher import view_of

        views = [view_of(x, f"input {i}") for i, x in enumerate(tensors)]
        for v in views:
            k._resolve_device(v, "input")
        return k._device(views)

    def device_key(self, device: int) -> str:
        d = self.driver
        self.kernels[0]._context(device)  # initializes the driver
        dev = self.kernels[0]._check(d.cuDeviceGet(device), f"cuDeviceGet({device})")
        name = self.kernels[0]._check(d.cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = (name.decode() if isinstance(name, bytes) else str(name)).split("\x00")[0].strip()
        A = d.CUdevice_attribute
        cc = [self.kernels[0]._check(d.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute")
              for a in (A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)]
        return f"{name} sm_{cc[0]}{cc[1]}"

    def _measure(self, key: str, device: int, tensors, ref_results, stream) -> int:
        """Check every variant against the reference's results, time the others, store and
        return the fastest's index."""
        dkey = key.split("|", 1)[1]
        want = [self._host(r, s, device) for r, s in zip(ref_results, self.manifest.outputs)]
        from .launcher import LaunchError

        times, rejected = {}, {}
        with self._flush_buffer(device) as flush:
            for j, (name, k) in enumerate(zip(self.names, self.kernels)):
                try:
                    if j != self.reference:
                        got = [self._host(r, s, device) for r, s in zip(k(*tensors, stream=stream), self.manifest.outputs)]
                        err = max(_rel_err(g, w) for g, w in zip(got, want))
                        if not err <= self.tolerance:  # NaN too
                            rejected[name] = f"relative error {err:.2e} against {self.names[self.reference]!r}"
                            continue
                    times[name] = self._time(k, tensors, stream, device, flush)
                except LaunchError as e:  # e.g. more shared memory than this GPU has
                    if j == self.reference:
                        raise
                    rejected[name] = f"failed to launch: {e}"
        for name, why in rejected.items():
            print(f"mirage.runtime: variant {name!r} of {self.path} not used on {dkey}: {why}", file=sys.stderr)
        best = min(times, key=times.get)
        self.report = {"variant": best, "times_us": {n: round(t, 2) for n, t in times.items()},
                       "rejected": rejected, "device": dkey, "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
        self.store.put(key, self.report)
        return self.names.index(best)

    @contextlib.contextmanager
    def _flush_buffer(self, device: int):
        """(pointer, 32-bit words) of a buffer twice the L2 cache, overwritten before each
        timed run: one for all the variants of a measurement, freed when it ends (also on
        an error)."""
        k, d = self.kernels[0], self.driver
        ck = k._check
        ctx = k._context(device)  # the primary context: the one every variant's kernel uses
        ck(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            dev = ck(d.cuDeviceGet(device), f"cuDeviceGet({device})")
            l2 = ck(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev),
                    "cuDeviceGetAttribute(L2_CACHE_SIZE)")
            words = max(int(l2), 1 << 20) // 2  # 32-bit words in twice the L2
            scratch = ck(d.cuMemAlloc(4 * words), "cuMemAlloc(L2 flush buffer)")
        finally:
            d.cuCtxPopCurrent()
        try:
            yield scratch, words
        finally:
            ck(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
            try:
                d.cuMemFree(scratch)
            finally:
                d.cuCtxPopCurrent()

    def _time(self, k, tensors, stream, device: int, flush) -> float:
        """Median µs of one cold run of kernel `k`: captured in a CUDA graph on a private
        stream (as a model replays it; launch overhead, which would favour fewer kernels,
        stays out), each replay after overwriting `flush` (`_flush_buffer`), between two
        events."""
        d = self.driver
        ck = k._check
        scratch, words = flush
        made = []  # destroy calls of what was created, run in reverse however the timing ends
        ck(d.cuCtxPushCurrent(k._context(device)), "cuCtxPushCurrent")
        try:
            s = ck(d.cuStreamCreate(1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING
            made.append(lambda: d.cuStreamDestroy(s))
            h = int(s)
            outs = k(*tensors, stream=h)  # modules loaded, buffers allocated: capture-ready
            k(*tensors, stream=h, out=outs)
            ck(d.cuStreamSynchronize(s), "cuStreamSynchronize")
            ck(d.cuStreamBeginCapture(s, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture")
            try:
                k(*tensors, stream=h, out=outs)
            finally:
                graph = ck(d.cuStreamEndCapture(s), "cuStreamEndCapture")
                made.append(lambda: d.cuGraphDestroy(graph))
            exe = ck(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            made.append(lambda: d.cuGraphExecDestroy(exe))
            start = ck(d.cuEventCreate(0), "cuEventCreate")
            made.append(lambda: d.cuEventDestroy(start))
            end = ck(d.cuEventCreate(0), "cuEventCreate")
            made.append(lambda: d.cuEventDestroy(end))
            ck(d.cuGraphLaunch(exe, s), "cuGraphLaunch")  # warm-up
            ms = []
            for _ in range(self.reps):
                ck(d.cuMemsetD32Async(scratch, 0, words, s), "cuMemsetD32Async")
                ck(d.cuEventRecord(start, s), "cuEventRecord")
                ck(d.cuGraphLaunch(exe, s), "cuGraphLaunch")
                ck(d.cuEventRecord(end, s), "cuEventRecord")
                ck(d.cuEventSynchronize(end), "cuEventSynchronize")
                ms.append(float(ck(d.cuEventElapsedTime(start, end), "cuEventElapsedTime")))
        finally:
            for destroy in reversed(made):
                destroy()
            d.cuCtxPopCurrent()
        return statistics.median(ms) * 1e3

    def _host(self, x, spec, device: int) -> np.ndarray:
        """Copy a device tensor to a float64 numpy array (after the device is idle)."""
        from .launcher import view_of

        k = self.kernels[0]
        d = self.driver
        v = view_of(x, "output")
        arr = np.empty(spec.numel, dtype=_NP[spec.dtype])
        ck = k._check
        ck(d.cuCtxPushCurrent(k._context(device)), "cuCtxPushCurrent")
        try:
            ck(d.cuCtxSynchronize(), "cuCtxSynchronize")
            ck(d.cuMemcpyDtoH(arr.ctypes.data, v.ptr, arr.nbytes), "cuMemcpyDtoH")
        finally:
            d.cuCtxPopCurrent()
        if spec.dtype == "bf16":
            return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return arr.astype(np.float64)

    def __repr__(self):
        return (f"<mirage.runtime.Selecting {os.path.basename(self.path)}: variants {self.names}, "
                f"reference {self.names[self.reference]!r}, chosen {self.chosen}>")


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    if not np.all(np.isfinite(got)):
        return float("nan")
    den = float(np.linalg.norm(want))
    return float(np.linalg.norm(got - want)) / (den if den else 1.0)
