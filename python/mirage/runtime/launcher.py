"""Launch kernel bundles with the CUDA driver API.

`load(bundle_dir)` returns a `Kernel`; `kernel(*tensors, stream=None, out=None)`
checks the tensors against the manifest, allocates the outputs (torch tensors when
torch is importable, else driver allocations exposing `__cuda_array_interface__`),
launches every kernel of the bundle in order on the stream, and returns the outputs.

Tensors may be torch CUDA tensors, objects with `__cuda_array_interface__` (CuPy,
Numba, ...) or DLPack producers (`__dlpack__` + `__dlpack_device__`). Every tensor
argument is passed to the kernel as ONE bare device pointer, in `args` order.

The driver is injected: `Kernel(bundle, driver=...)` takes any module-like object with
the `cuda.bindings.driver` functions used here, so the marshalling can be tested on a
CPU with a fake driver. Nothing here imports MLIR, z3 or the compiler.

Streams and CUDA graphs: the launch goes to `stream` (a torch stream, a driver
`CUstream`, or an int handle), by default torch's current stream on the tensors'
device (or the legacy default stream 0 without torch). A launch never synchronizes.
While the stream is capturing a CUDA graph, the launch allocates nothing and loads
nothing: call the kernel once before capturing (as torch's graph capture idiom does)
so that modules are loaded and intermediate buffers exist, and pass `out=` unless
torch allocates the outputs (torch's allocator is capture-aware).

Intermediate buffers (`buffers` in the manifest) are allocated and zeroed once per device and
reused by every call (split for-loops keep self-resetting arrival counters there): two
calls of the same `Kernel` must not run concurrently on
different streams (nor from different threads: the fast path below reuses its argument arrays).

Fast path: after a checked call with torch tensors (no `stream=`), a call with torch tensors
of the same shapes, strides, dtypes and device skips the checks (only the new pointers'
alignment is checked, and that `out=` tensors, if given, are dense outputs of the right
shapes and dtypes overlapping nothing) and reuses the kernelParams arrays; it launches on
torch's current stream.
"""
from __future__ import annotations

import ctypes
import hashlib
import numbers
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from .bundle import DTYPE_BYTES, Bundle, KernelSpec, TensorSpec, load_bundle


class LaunchError(RuntimeError):
    """A tensor does not fit the bundle, or a CUDA driver call failed."""


# ------------------------------------------------------------------------ tensor views

@dataclass
class TensorView:
    """What the launcher needs from any tensor-like argument."""
    ptr: int
    shape: tuple
    strides: tuple  # elements
    dtype: str      # f16 | bf16 | f32 | other text for unsupported types
    device: int | None  # CUDA ordinal; None = unknown; -1 = not on a CUDA device
    device_name: str = ""
    keepalive: object = None
    read_only: bool = False  # __cuda_array_interface__ data[1]: may not be an output


_TORCH_DTYPES = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32"}
_CAI_DTYPES = {"<f2": "f16", "<f4": "f32", "<V2": "bf16", "bfloat16": "bf16"}
# DLPack type codes: 2 = float, 4 = bfloat
_DL_DTYPES = {(2, 16): "f16", (2, 32): "f32", (4, 16): "bf16"}
_KDLCUDA, _KDLCUDA_MANAGED = 2, 13


def _torch():
    return sys.modules.get("torch")


def _is_torch(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _dlpack_view(x, what: str) -> TensorView:
    dev_type, dev_id = x.__dlpack_device__()
    try:
        capsule = x.__dlpack__(stream=None) if dev_type in (_KDLCUDA, _KDLCUDA_MANAGED) else x.__dlpack__()
    except TypeError:
        capsule = x.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    addr = get(capsule, b"dltensor")  # DLManagedTensor*: its first member is the DLTensor
    t = _DLTensor.from_address(addr)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = (tuple(t.strides[i] for i in range(t.ndim)) if t.strides
               else _contig(shape))
    dt = _DL_DTYPES.get((t.dtype.code, t.dtype.bits), f"dlpack(code={t.dtype.code},bits={t.dtype.bits})")
    if t.dtype.lanes != 1:
        dt = f"{dt}x{t.dtype.lanes}"
    on_cuda = t.device.device_type in (_KDLCUDA, _KDLCUDA_MANAGED)
    # the capsule keeps the producer's memory alive until it is destroyed
    return TensorView((t.data or 0) + t.byte_offset, shape, strides, dt,
                      t.device.device_id if on_cuda else -1,
                      f"cuda:{t.device.device_id}" if on_cuda else f"DLPack device type {t.device.device_type}",
                      capsule)


def _contig(shape) -> tuple:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def view_of(x, what: str) -> TensorView:
    """A `TensorView` of a torch tensor, a `__cuda_array_interface__` object or a
    DLPack producer; raises LaunchError naming `what` for anything else."""
    if _is_torch(x):
        dt = _TORCH_DTYPES.get(str(x.dtype), str(x.dtype))
        dev = x.device.index if x.is_cuda else -1
        if x.is_cuda and dev is None:
            dev = _torch().cuda.current_device()
        return TensorView(x.data_ptr(), tuple(x.shape), tuple(x.stride()), dt, dev, str(x.device), x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return _cai_view(cai, x, what)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return _dlpack_view(x, what)
    raise LaunchError(f"{what}: expected a torch CUDA tensor, an object with "
                      f"__cuda_array_interface__ or a DLPack producer, got {type(x).__name__}")


_TYPESTR = re.compile(r"[<>|=][a-zA-Z]\d+")


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)  # numpy ints too


def _cai_view(cai, x, what: str) -> TensorView:
    """A `TensorView` of a `__cuda_array_interface__` dict (version 3 layout), every field
    checked: a malformed interface is the producer's bug, reported as one LaunchError
    naming the field rather than a KeyError/TypeError from deep inside the launch."""
    bad = f"{what}: malformed __cuda_array_interface__"
    if not isinstance(cai, Mapping):
        raise LaunchError(f"{bad}: expected a dict, got {type(cai).__name__}")
    missing = [k for k in ("shape", "typestr", "data") if k not in cai]
    if missing:
        raise LaunchError(f"{bad}: missing key(s) {', '.join(repr(k) for k in missing)}")
    shape = cai["shape"]
    if not isinstance(shape, (tuple, list)) or not all(_is_int(d) and d >= 0 for d in shape):
        raise LaunchError(f"{bad}: 'shape' must be a tuple of non-negative ints, got {shape!r}")
    shape = tuple(int(d) for d in shape)
    typestr = cai["typestr"]
    if not isinstance(typestr, str) or not _TYPESTR.fullmatch(typestr):
        raise LaunchError(f"{bad}: 'typestr' must be an array-interface type string such as '<f2', "
                          f"got {typestr!r}")
    data = cai["data"]
    if not isinstance(data, (tuple, list)) or len(data) != 2 or not _is_int(data[0]):
        raise LaunchError(f"{bad}: 'data' must be a (pointer: int, read_only: bool) pair, got {data!r}")
    ptr = int(data[0])
    if not 0 <= ptr < 2**64:
        raise LaunchError(f"{what}: data pointer {ptr:#x} is out of range (not a 64-bit address)")
    if cai.get("mask") is not None:
        raise LaunchError(f"{what}: masked arrays (__cuda_array_interface__ 'mask') are not supported")
    dt = _CAI_DTYPES.get(typestr, typestr)
    size = DTYPE_BYTES.get(dt) or int(typestr[2:])
    st = cai.get("strides")
    if st is None:
        strides = _contig(shape)
    else:
        if not isinstance(st, (tuple, list)) or len(st) != len(shape) or not all(_is_int(s) for s in st):
            raise LaunchError(f"{bad}: 'strides' must be None or {len(shape)} ints (bytes), got {st!r}")
        if any(s % size for s in st):
            raise LaunchError(f"{what}: byte strides {list(st)} are not multiples of the "
                              f"element size {size}")
        strides = tuple(int(s) // size for s in st)
    return TensorView(ptr, shape, strides, dt, None, "cuda", x, read_only=bool(data[1]))


def _span(v: TensorView) -> tuple[int, int]:
    """[first, last) byte addresses `v` can touch (empty for a tensor with no element)."""
    if any(d == 0 for d in v.shape):
        return v.ptr, v.ptr
    size = DTYPE_BYTES.get(v.dtype, 1)
    lo = v.ptr + size * sum((d - 1) * s for d, s in zip(v.shape, v.strides) if s < 0)
    hi = v.ptr + size * (1 + sum((d - 1) * s for d, s in zip(v.shape, v.strides) if s > 0))
    return lo, hi


def check_no_alias(inputs: list, outputs: list) -> None:
    """An output may not share memory with an input or another output: the kernels read
    inputs after some outputs are written, and write each output once, so aliasing gives
    wrong results silently. (Tensors are dense, as check_tensor requires, so byte ranges
    overlap exactly when elements do.)"""
    hit = first_overlap([_span(v) for v in inputs], [_span(v) for v in outputs])
    if hit is not None:
        j, (lo, hi), name, (a, b) = hit
        raise LaunchError(f"output {j} (bytes {lo:#x}..{hi:#x}) overlaps {name} (bytes {a:#x}..{b:#x}): "
                          f"outputs must not alias inputs or other outputs; pass a separate tensor "
                          f"in out=[...]")


def first_overlap(inputs: list, outputs: list):
    """The first output byte range [lo, hi) that overlaps an input's or an earlier output's,
    as (output index, its range, "input i" / "output j", that range); None if none does."""
    spans = [(f"input {i}", s) for i, s in enumerate(inputs)]
    for j, (lo, hi) in enumerate(outputs):
        if lo == hi:
            continue
        for name, (a, b) in spans:
            if a < hi and lo < b:
                return j, (lo, hi), name, (a, b)
        spans.append((f"output {j}", (lo, hi)))
    return None


def _torch_span(x) -> tuple[int, int]:
    """[first, last) bytes of a dense torch tensor."""
    return x.data_ptr(), x.data_ptr() + x.numel() * x.element_size()


def _strides_match(shape, got, want) -> bool:
    return all(g == w for d, g, w in zip(shape, got, want) if d != 1)


def check_tensor(v: TensorView, spec: TensorSpec, what: str, alignment: int = 16) -> None:
    if tuple(v.shape) != tuple(spec.shape):
        raise LaunchError(f"{what}: shape {list(v.shape)} does not match the bundle's {spec.shape}")
    if v.dtype != spec.dtype:
        raise LaunchError(f"{what}: dtype {v.dtype} does not match the bundle's {spec.dtype}")
    if not _strides_match(v.shape, v.strides, spec.strides):
        raise LaunchError(f"{what}: strides {list(v.strides)} (elements) do not match the bundle's "
                          f"{spec.strides}; pass a tensor with that layout (e.g. .contiguous())")
    if v.device == -1:
        raise LaunchError(f"{what}: tensor is on {v.device_name or 'the host'}, not on a CUDA device")
    lo, hi = _span(v)
    if (v.ptr == 0 and hi > lo) or lo < 0 or hi > 2**64:  # NULL or wrapping: would fault or corrupt memory
        raise LaunchError(f"{what}: data pointer {v.ptr:#x} is out of range for a tensor of "
                          f"{hi - lo} bytes")
    if alignment and v.ptr % alignment:
        raise LaunchError(f"{what}: data pointer {v.ptr:#x} is not {alignment}-byte aligned "
                          f"(the kernels use {alignment}-byte vector accesses)")


# ----------------------------------------------------------------------- driver access

def default_driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6 layout
        except ImportError:
            raise LaunchError("mirage.runtime needs the CUDA driver bindings: pip install "
                              "cuda-bindings (a GPU is required to launch kernels)") from None
    return driver


class DeviceArray:
    """A driver allocation with `__cuda_array_interface__` (outputs without torch)."""

    _TYPESTR = {"f16": "<f2", "f32": "<f4", "bf16": "<V2"}

    def __init__(self, launcher: "Kernel", ptr, shape, dtype: str, device: int):
        self._launcher, self._handle = launcher, ptr
        self.ptr, self.shape, self.dtype, self.device = int(ptr), tuple(shape), dtype, device

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self._TYPESTR[self.dtype],
                "data": (self.ptr, False), "strides": None, "version": 3}

    def __del__(self):
        try:
            self._launcher._free(self._handle)
        except Exception:
            pass


class Kernel:
    """A loaded bundle; call it on tensors to run it."""

    def __init__(self, bundle: Bundle | str | os.PathLike, driver=None, alignment: int = 16):
        self.bundle = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
        self.manifest = self.bundle.manifest
        self.alignment = alignment
        self._driver = driver
        self._ctx: dict[int, object] = {}          # device -> primary context
        self._funcs: dict[int, list] = {}           # device -> CUfunction per kernel
        self._modules: dict[tuple, object] = {}     # (device, ptx digest) -> CUmodule
        self._buffers: dict[int, list] = {}         # device -> [(ptr, keepalive)]
        self._ptx_images = {name: ctypes.create_string_buffer(text.encode())
                            for name, text in self.bundle.ptx.items()}
        # fast path (torch tensors, default stream, no out=): the per-call state of the last
        # call that passed every check, keyed by the inputs' (shape, strides, dtype, device)
        self._fast_key = None
        self._fast = None

    # -- driver helpers --
    @property
    def driver(self):
        if self._driver is None:
            self._driver = default_driver()
        return self._driver

    def _check(self, result, call: str):
        if isinstance(result, tuple):
            err, rest = result[0], result[1:]
        else:
            err, rest = result, ()
        d = self.driver
        if err != d.CUresult.CUDA_SUCCESS:
            try:
                name = d.cuGetErrorName(err)[1]
                name = name.decode() if isinstance(name, bytes) else str(name)
            except Exception:
                name = str(err)
            raise LaunchError(f"{call} failed: {name} (bundle {self.bundle.path}, graph "
                              f"{self.manifest.graph_hash or '?'})")
        return rest[0] if len(rest) == 1 else (rest or None)

    def _context(self, device: int):
        ctx = self._ctx.get(device)
        if ctx is None:
            d = self.driver
            self._check(d.cuInit(0), "cuInit")
            dev = self._check(d.cuDeviceGet(device), f"cuDeviceGet({device})")
            ctx = self._check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            self._ctx[device] = ctx
        return ctx

    def _functions(self, device: int, capturing: bool) -> list:
        funcs = self._funcs.get(device)
        if funcs is not None:
            return funcs
        if capturing:
            raise LaunchError("the kernel was first called while its stream is capturing a CUDA "
                              "graph; call it once before capture so its modules are loaded and its "
                              "buffers allocated")
        d = self.driver
        funcs = []
        for i, k in enumerate(self.manifest.kernels):
            key = (device, hashlib.sha256(self.bundle.ptx[k.ptx].encode()).hexdigest())
            mod = self._modules.get(key)
            if mod is None:
                mod = self._check(d.cuModuleLoadData(ctypes.addressof(self._ptx_images[k.ptx])),
                                  f"cuModuleLoadData({k.ptx})")
                self._modules[key] = mod
            f = self._check(d.cuModuleGetFunction(mod, k.name.encode()),
                            f"cuModuleGetFunction({k.name})")
            if k.smem_bytes > 48 * 1024:
                self._check(d.cuFuncSetAttribute(
                    f, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    k.smem_bytes), f"cuFuncSetAttribute(kernels[{i}] {k.name}, max dynamic smem "
                                   f"{k.smem_bytes})")
            funcs.append(f)
        self._funcs[device] = funcs
        return funcs

    def _alloc(self, nbytes: int, device: int, shape, dtype: str, use_torch: bool, zero: bool = False):
        t = _torch()
        if use_torch and t is not None:
            tdt = {"f16": t.float16, "bf16": t.bfloat16, "f32": t.float32}[dtype]
            x = (t.zeros if zero else t.empty)(tuple(shape), dtype=tdt, device=f"cuda:{device}")
            return x.data_ptr(), x
        ptr = self._check(self.driver.cuMemAlloc(max(nbytes, 1)), f"cuMemAlloc({nbytes})")
        if zero:
            self._check(self.driver.cuMemsetD8(ptr, 0, max(nbytes, 1)), f"cuMemsetD8({nbytes})")
            self._check(self.driver.cuCtxSynchronize(), "cuCtxSynchronize")
        return int(ptr), DeviceArray(self, ptr, shape, dtype, device)

    def _free(self, ptr):
        self.driver.cuMemFree(ptr)

    def _stream_handle(self, stream, device: int):
        t = _torch()
        if stream is None:
            if t is not None and t.cuda.is_available():
                return t.cuda.current_stream(device).cuda_stream
            return 0
        if hasattr(stream, "cuda_stream"):
            return int(stream.cuda_stream)
        return int(stream)

    def _capturing(self, handle) -> bool:
        d = self.driver
        if not hasattr(d, "cuStreamIsCapturing"):
            return False
        status = self._check(d.cuStreamIsCapturing(self._cu_stream(handle)), "cuStreamIsCapturing")
        none = d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
        return status != none

    def _cu_stream(self, handle):
        d = self.driver
        return d.CUstream(handle) if hasattr(d, "CUstream") else handle

    # -- the call --
    def __call__(self, *tensors, stream=None, out=None) -> list:
        if stream is None and self._fast_key is not None:
            r = self._fast_call(tensors, out)
            if r is not None:
                return r
        m = self.manifest
        if len(tensors) != len(m.inputs):
            raise LaunchError(f"the bundle takes {len(m.inputs)} inputs, {len(tensors)} given")
        views = [view_of(x, f"input {i}") for i, x in enumerate(tensors)]
        for i, (v, spec) in enumerate(zip(views, m.inputs)):
            check_tensor(v, spec, f"input {i}", self.alignment)
            self._resolve_device(v, f"input {i}")
        device = self._device(views)
        use_torch = any(_is_torch(x) for x in tensors) or (not tensors and _torch() is not None)
        handle = self._stream_handle(stream, device)
        d = self.driver
        self._check(d.cuCtxPushCurrent(self._context(device)), "cuCtxPushCurrent")
        try:
            results = self._call(views, tensors, out, device, use_torch, handle)
        finally:
            d.cuCtxPopCurrent()
        if stream is None and tensors and all(_is_torch(x) for x in tensors):
            self._remember(tensors, device)
        return results

    # -- the fast path: repeated calls with torch tensors of one signature --
    @staticmethod
    def _key(tensors) -> tuple:
        return tuple((x.shape, x.stride(), x.dtype, x.device) for x in tensors)

    def _remember(self, tensors, device: int) -> None:
        """After a checked call with torch tensors: keep what the next call with tensors of
        the same shapes, strides, dtypes and device can reuse (the checks' verdict, the
        functions, buffers, output allocation arguments, the kernelParams arrays)."""
        t = _torch()
        funcs, bufs = self._funcs.get(device), self._buffers.get(device)
        if t is None or funcs is None or bufs is None:
            return
        raw = getattr(t._C, "_cuda_getCurrentRawStream", None)
        outs = [(tuple(spec.shape), {"f16": t.float16, "bf16": t.bfloat16, "f32": t.float32}[spec.dtype])
                for spec in self.manifest.outputs]
        launches = []
        for k, f in zip(self.manifest.kernels, funcs):
            vals = [ctypes.c_void_p(0) for _ in k.args]
            params = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])
            slots = [(v, a.kind, a.index) for v, a in zip(vals, k.args)]
            for v, kind, i in slots:  # buffers never move
                if kind == "buffer":
                    v.value = bufs[i][0]
            # params holds the addresses of vals: keep vals alive with it
            launches.append((*self._launch_fn(k, f), [(v, kind, i) for v, kind, i in slots if kind != "buffer"],
                             (params, vals)))
        tdev = t.device(f"cuda:{device}")
        self._fast = (device, tdev, raw, outs, launches, self._context(device))
        self._fast_key = self._key(tensors)
        # what `out=` tensors must be for the fast path: dense, row-major, of the outputs' dtypes
        self._fast_out_key = tuple((t.Size(shape), _contig(shape), dt, tdev) for shape, dt in outs)

    def _fast_call(self, tensors, out=None):
        """The launch for tensors matching the remembered signature, or None (then the
        checked path runs). Outputs come from torch's allocator, which is capture-aware, or
        are `out`'s torch tensors of the outputs' exact layout that overlap no input and no
        other output; the modules and buffers exist, so nothing here depends on stream
        capture."""
        t = _torch()
        if t is None:
            return None
        try:
            if self._key(tensors) != self._fast_key or (out is not None and self._key(out) != self._fast_out_key):
                return None
        except (AttributeError, TypeError):  # not torch tensors (or `out` not a sequence)
            return None
        align = self.alignment
        ptrs = [x.data_ptr() for x in tensors]
        results = list(out) if out is not None else None
        optrs = [r.data_ptr() for r in results] if results is not None else []
        if align and any(p % align for p in ptrs + optrs):
            return None
        if results is not None and first_overlap([_torch_span(x) for x in tensors],
                                                 [_torch_span(r) for r in results]) is not None:
            return None  # the checked path says which
        device, tdev, raw, outs, launches, ctx = self._fast
        handle = raw(device) if raw is not None else t.cuda.current_stream(device).cuda_stream
        if results is None:
            results = [t.empty(shape, dtype=dt, device=tdev) for shape, dt in outs]
            optrs = [r.data_ptr() for r in results]
        d = self.driver
        s = self._cu_stream(handle)
        self._check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            for launch, what, slots, params in launches:
                for v, kind, i in slots:
                    v.value = ptrs[i] if kind == "input" else optrs[i]
                self._check(launch(s, ctypes.addressof(params[0])), what)
        finally:
            d.cuCtxPopCurrent()
        return results

    def _call(self, views, tensors, out, device, use_torch, handle) -> list:
        m = self.manifest
        capturing = self._capturing(handle)
        funcs = self._functions(device, capturing)

        # outputs
        if out is not None:
            if not isinstance(out, (list, tuple)):  # list() of a tensor would iterate its rows
                raise LaunchError(f"out: expected a list of {len(m.outputs)} output tensor(s), got "
                                  f"{type(out).__name__}")
            out = list(out)
            if len(out) != len(m.outputs):
                raise LaunchError(f"out: the bundle has {len(m.outputs)} outputs, {len(out)} given")
            out_views = [view_of(x, f"output {i}") for i, x in enumerate(out)]
            for i, (v, spec) in enumerate(zip(out_views, m.outputs)):
                check_tensor(v, spec, f"output {i}", self.alignment)
                if v.read_only:
                    raise LaunchError(f"output {i}: the tensor is read-only (__cuda_array_interface__ 'data')")
                self._resolve_device(v, f"output {i}")
            check_no_alias(views, out_views)
            if self._device(views + out_views) != device:
                raise LaunchError(f"outputs are not on the inputs' device cuda:{device}")
            results, out_ptrs = out, [v.ptr for v in out_views]
        else:
            if capturing and not (use_torch and _torch() is not None):
                raise LaunchError("while capturing a CUDA graph without torch, pass preallocated "
                                  "outputs with out=[...]")
            results, out_ptrs = [], []
            for spec in m.outputs:
                if spec.strides != list(_contig(spec.shape)):
                    raise LaunchError(f"the bundle's outputs have non-contiguous strides "
                                      f"{spec.strides}; pass them with out=[...]")
                ptr, obj = self._alloc(spec.nbytes, device, spec.shape, spec.dtype, use_torch)
                results.append(obj)
                out_ptrs.append(ptr)

        # intermediate buffers (allocated once per device)
        bufs = self._buffers.get(device)
        if bufs is None:
            if capturing:
                raise LaunchError("intermediate buffers are not allocated yet: call the kernel once "
                                  "before capturing a CUDA graph")
            # zeroed once: split for-loops keep arrival counters there (reset by the kernel)
            bufs = [self._alloc(b.nbytes, device, b.shape, b.dtype, use_torch, zero=True) for b in m.buffers]
            if use_torch:
                _torch().cuda.synchronize(device)
            self._buffers[device] = bufs

        ptrs = {"input": [v.ptr for v in views], "output": out_ptrs,
                "buffer": [p for p, _ in bufs]}
        self._launch_all(funcs, ptrs, handle)
        return results

    def _resolve_device(self, v: TensorView, what: str) -> None:
        """Ask the driver which device a raw pointer (CUDA array interface) lives on."""
        if v.device is not None:
            return
        d = self.driver
        if not hasattr(d, "cuPointerGetAttribute"):
            return
        res = d.cuPointerGetAttribute(
            d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, v.ptr)
        if res[0] != d.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"{what}: pointer {v.ptr:#x} is not CUDA device memory")
        v.device = int(res[1])

    def _device(self, views) -> int:
        devs = {v.device for v in views if v.device is not None}
        if len(devs) > 1:
            raise LaunchError(f"tensors are on different CUDA devices {sorted(devs)}; "
                              f"move them to one device")
        if devs:
            return devs.pop()
        t = _torch()
        if t is not None and t.cuda.is_available():
            return t.cuda.current_device()
        return 0

    def _launch_all(self, funcs, ptrs, handle):
        s = self._cu_stream(handle)
        for k, f in zip(self.manifest.kernels, funcs):
            # kernelParams: an array of pointers to the argument values (void**); the
            # driver copies the values during the call, so they may be freed after it.
            vals = [ctypes.c_void_p(ptrs[a.kind][a.index]) for a in k.args]
            params = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])
            launch, what = self._launch_fn(k, f)
            self._check(launch(s, ctypes.addressof(params)), what)

    def _launch_fn(self, k: KernelSpec, f):
        """(launch, what): launch(stream, kernelParams address) -> the driver's result,
        launching kernel `k`, and the call as error messages name it: a
        `pdl` kernel with programmatic stream serialization (cuLaunchKernelEx), so that its
        launch overlaps the tail of the kernel before it (it waits on griddepcontrol before
        it touches memory); any other, or with a driver without cuLaunchKernelEx, by
        cuLaunchKernel (a pdl kernel's wait is then satisfied at once)."""
        d = self.driver
        dims = f"({k.name}, grid {k.grid}, block {k.block}, smem {k.smem_bytes})"
        if not (k.pdl and hasattr(d, "cuLaunchKernelEx")):
            return (lambda s, params: d.cuLaunchKernel(f, *k.grid, *k.block, k.smem_bytes, s, params, 0),
                    "cuLaunchKernel" + dims)
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = k.grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = k.block
        cfg.sharedMemBytes = k.smem_bytes
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        cfg.attrs = [attr]
        cfg.numAttrs = 1

        def launch(s, params):
            cfg.hStream = s
            return d.cuLaunchKernelEx(cfg, f, params, 0)
        return launch, "cuLaunchKernelEx" + dims

    def __repr__(self):
        m = self.manifest
        return (f"<mirage.runtime.Kernel {os.path.basename(self.bundle.path)}: "
                f"{len(m.kernels)} kernel(s), {len(m.inputs)} inputs, {len(m.outputs)} outputs, {m.target}>")


def load(bundle_dir: str | os.PathLike, driver=None, alignment: int = 16, **select):
    """Load and validate a bundle directory; the modules are loaded on the first call.
    A variant bundle (`variants.json`, see `select.py`) gives a `Selecting` kernel, which
    picks its fastest variant on first use; `select` passes its options (cache_dir=...)."""
    from .select import Selecting, is_variant_bundle

    if is_variant_bundle(bundle_dir):
        return Selecting(bundle_dir, driver=driver, alignment=alignment, **select)
    if select:
        raise TypeError(f"{bundle_dir} is a single bundle: {', '.join(select)} apply to variant bundles only")
    return Kernel(bundle_dir, driver=driver, alignment=alignment)


def clear_cache(kernel: Kernel) -> None:
    """Forget loaded modules and buffers of `kernel` (they are reloaded on the next call)."""
    kernel._funcs.clear()
    kernel._modules.clear()
    kernel._buffers.clear()
    kernel._fast_key = kernel._fast = None
