"""mirage.runtime on a CPU: bundle manifests round-trip and validate; the launcher's
argument marshalling is checked against a fake CUDA driver that records every call."""
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mirage.runtime import (BundleError, KernelArg, KernelSpec, LaunchError, Manifest,
                            TensorSpec, BufferSpec, load, load_bundle, write_bundle)
from mirage.runtime.launcher import Kernel, view_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PTX = {"a.ptx": ".version 8.0\n.target sm_90\n.visible .entry k1(\n)\n{ ret; }\n"
                ".visible .entry k2(\n)\n{ ret; }\n"}


def manifest(smem=0):
    return Manifest(
        graph_hash="abc123", target="sm_90",
        inputs=[TensorSpec([4, 8], "f16"), TensorSpec([8], "f32")],
        outputs=[TensorSpec([4, 8], "f16")],
        buffers=[BufferSpec([4, 8], "f32")],
        kernels=[KernelSpec("k1", "a.ptx", [2, 1, 1], [128, 1, 1], smem,
                            [KernelArg("input", 1), KernelArg("input", 0), KernelArg("buffer", 0)]),
                 KernelSpec("k2", "a.ptx", [4, 2, 1], [64, 2, 1], 0,
                            [KernelArg("buffer", 0), KernelArg("output", 0)])])


# ------------------------------------------------------------------------------ bundle

def test_manifest_roundtrip(tmp_path):
    m = manifest(smem=100_000)
    write_bundle(tmp_path, m, PTX)
    b = load_bundle(tmp_path)
    assert b.manifest == m
    assert b.ptx == PTX
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["format"] == "mirage-bundle" and data["version"] == 1
    assert data["inputs"][0] == {"shape": [4, 8], "dtype": "f16", "strides": [8, 1]}
    assert data["kernels"][0]["args"][0] == {"kind": "input", "index": 1}
    # JSON dict in, same manifest out
    write_bundle(tmp_path / "again", data, PTX)
    assert load_bundle(tmp_path / "again").manifest == m


def _bad(tmp_path, mutate):
    data = manifest().to_json()
    mutate(data)
    d = tmp_path / "bad"
    d.mkdir(exist_ok=True)
    (d / "manifest.json").write_text(json.dumps(data))
    (d / "a.ptx").write_text(PTX["a.ptx"])
    with pytest.raises(BundleError) as e:
        load_bundle(d)
    return str(e.value)


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.update(version=2), "'version'"),
    (lambda d: d.update(format="other"), "'format'"),
    (lambda d: d.pop("kernels"), "'kernels'"),
    (lambda d: d["inputs"][1].update(dtype="f64"), "'inputs[1].dtype'"),
    (lambda d: d["inputs"][0].update(strides=[1]), "'inputs[0].strides'"),
    (lambda d: d["kernels"][1].update(grid=[1, 1]), "'kernels[1].grid'"),
    (lambda d: d["kernels"][0]["args"][2].update(index=3), "'kernels[0].args[2].index'"),
    (lambda d: d["kernels"][0]["args"][0].update(kind="scalar"), "'kernels[0].args[0].kind'"),
    (lambda d: d["kernels"][0].update(smem_bytes=-1), "'kernels[0].smem_bytes'"),
    (lambda d: d["kernels"][0].update(ptx="../x.ptx"), "'kernels[0].ptx'"),
    (lambda d: d["kernels"][0].update(name="nope"), "'kernels[0].name'"),
    (lambda d: d["kernels"][0].update(block=[1024, 2, 1]), "'kernels[0].block'"),
    (lambda d: d["kernels"][0].update(pdl="yes"), "'kernels[0].pdl'"),
])
def test_manifest_validation_names_field(tmp_path, mutate, field):
    assert field in _bad(tmp_path, mutate)


def test_missing_ptx_and_dir(tmp_path):
    with pytest.raises(BundleError, match="not among the PTX texts"):
        write_bundle(tmp_path / "x", manifest(), {})
    with pytest.raises(BundleError, match="no such directory"):
        load_bundle(tmp_path / "nothing")
    write_bundle(tmp_path / "y", manifest(), PTX)
    os.remove(tmp_path / "y" / "a.ptx")
    with pytest.raises(BundleError, match="'kernels\\[0\\].ptx'.*missing"):
        load_bundle(tmp_path / "y")


def test_runtime_import_is_light():
    code = ("import sys, mirage.runtime, mirage.runtime.launcher; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('mlir', 'z3', 'torch') "
            "or m.startswith('mirage.core.interpret') or m.startswith('mirage.lower')]; "
            "print(bad); assert not bad, bad")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# ----------------------------------------------------------------------- fake driver

class _Enum:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeDriver:
    """Records driver calls; decodes the kernelParams void** array like the driver."""

    CUresult = _Enum(CUDA_SUCCESS=0, CUDA_ERROR_INVALID_VALUE=1)
    CUfunction_attribute = _Enum(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
    CUstreamCaptureStatus = _Enum(CU_STREAM_CAPTURE_STATUS_NONE=0, CU_STREAM_CAPTURE_STATUS_ACTIVE=1)
    CUpointer_attribute = _Enum(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL=9)

    def __init__(self, nargs):
        self.nargs = nargs  # function name -> parameter count (as the PTX would say)
        self.calls, self.launches, self.capturing, self.next_ptr = [], [], False, 0x10000
        self.fail_launch = False
        self.ctx_stack = []

    def cuGetErrorName(self, err): return 0, b"CUDA_ERROR_INVALID_VALUE"
    def cuInit(self, flags): self.calls.append("cuInit"); return (0,)
    def cuDeviceGet(self, i): return 0, i
    def cuDevicePrimaryCtxRetain(self, dev): return 0, f"ctx{dev}"
    def cuCtxPushCurrent(self, ctx): self.ctx_stack.append(ctx); return (0,)
    def cuCtxPopCurrent(self): return 0, self.ctx_stack.pop()

    def cuModuleLoadData(self, addr):
        assert self.ctx_stack, "module loaded without a current context"
        text = ctypes.string_at(addr).decode()
        self.calls.append(("load", text.count(".entry")))
        return 0, ("module", text)

    def cuModuleGetFunction(self, mod, name):
        if name.decode() not in mod[1]:
            return 1, None
        return 0, name.decode()

    def cuFuncSetAttribute(self, f, attr, value):
        self.calls.append(("attr", f, attr, value)); return (0,)

    def cuStreamIsCapturing(self, s):
        return 0, (1 if self.capturing else 0)

    def cuPointerGetAttribute(self, attr, ptr):
        return (0, 0) if ptr >= 0x1000 else (1, None)

    def cuMemAlloc(self, n):
        p = self.next_ptr
        self.next_ptr += (n + 255) // 256 * 256
        self.calls.append(("alloc", n))
        return 0, p

    def cuMemsetD8(self, p, v, n):  # buffers are zeroed once at allocation
        self.calls.append(("memset", int(p), v, n))
        return (0,)

    def cuCtxSynchronize(self):
        return (0,)

    def cuMemFree(self, p): return (0,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        assert self.ctx_stack, "launch without a current context"
        n = self.nargs[f]
        slots = (ctypes.c_void_p * n).from_address(params)
        ptrs = [ctypes.c_void_p.from_address(slots[i]).value or 0 for i in range(n)]
        self.launches.append(dict(f=f, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem,
                                  stream=stream, ptrs=ptrs, extra=extra))
        return (1,) if self.fail_launch else (0,)


class CAI:
    """A device tensor stand-in with __cuda_array_interface__."""

    def __init__(self, ptr, shape, typestr="<f2", strides=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "strides": strides, "version": 3}


@pytest.fixture
def kernel(tmp_path):
    write_bundle(tmp_path, manifest(smem=64 * 1024), PTX)
    drv = FakeDriver({"k1": 3, "k2": 2})
    return load(tmp_path, driver=drv), drv


def test_marshalling_order_and_launch_dims(kernel):
    k, drv = kernel
    x, g = CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4")
    outs = k(x, g, stream=7)
    assert len(outs) == 1 and outs[0].shape == (4, 8) and outs[0].dtype == "f16"
    # buffer 0 allocated first by the runtime (4*8*4 bytes), then the output (4*8*2)
    allocs = [c for c in drv.calls if c[0] == "alloc"]
    assert sorted(a[1] for a in allocs) == [64, 128]
    buf = k._buffers[0][0][0]
    out = outs[0].ptr
    l1, l2 = drv.launches
    assert l1["f"] == "k1" and l1["ptrs"] == [0x200000, 0x100000, buf]
    assert l1["grid"] == (2, 1, 1) and l1["block"] == (128, 1, 1) and l1["smem"] == 64 * 1024
    assert l2["f"] == "k2" and l2["ptrs"] == [buf, out]
    assert l2["grid"] == (4, 2, 1) and l2["block"] == (64, 2, 1) and l2["smem"] == 0
    assert l1["stream"] == 7 and l1["extra"] == 0
    # >48 KiB dynamic smem opted in for k1 only
    attrs = [c for c in drv.calls if c[0] == "attr"]
    assert attrs == [("attr", "k1", 8, 64 * 1024)]
    assert not drv.ctx_stack  # context popped


def test_modules_cached_and_buffers_reused(kernel):
    k, drv = kernel
    x, g = CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4")
    k(x, g)
    k(x, g)
    assert sum(1 for c in drv.calls if c[0] == "load") == 1  # one PTX file, loaded once
    assert len(drv.launches) == 4
    assert drv.launches[0]["ptrs"][2] == drv.launches[2]["ptrs"][2]  # same buffer


def test_out_argument_and_capture(kernel):
    k, drv = kernel
    x, g, o = CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4"), CAI(0x300000, (4, 8))
    drv.capturing = True
    with pytest.raises(LaunchError, match="before capture"):
        k(x, g, out=[o])
    drv.capturing = False
    k(x, g, out=[o])  # warm-up
    drv.capturing = True
    n_alloc = sum(1 for c in drv.calls if c[0] == "alloc")
    res = k(x, g, out=[o])
    assert res[0] is o and drv.launches[-1]["ptrs"][1] == 0x300000
    assert sum(1 for c in drv.calls if c[0] == "alloc") == n_alloc  # no allocation while capturing
    with pytest.raises(LaunchError, match="out="):
        k(x, g)  # would allocate outputs without torch


@pytest.mark.parametrize("args,msg", [
    (lambda: (CAI(0x100000, (4, 9)), CAI(0x200000, (8,), "<f4")), "input 0: shape \\[4, 9\\]"),
    (lambda: (CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f2")), "input 1: dtype f16 does not match .* f32"),
    (lambda: (CAI(0x100000, (4, 8), strides=(2, 8)), CAI(0x200000, (8,), "<f4")), "input 0: strides \\[1, 4\\]"),
    (lambda: (CAI(0x100008, (4, 8)), CAI(0x200000, (8,), "<f4")), "input 0: data pointer .* aligned"),
    (lambda: (CAI(0x100000, (4, 8)), CAI(0x10, (8,), "<f4")), "input 1: .* not CUDA device memory"),
    (lambda: (np.zeros((4, 8), np.float16), np.zeros(8, np.float32)), "input 0: tensor is on .*not on a CUDA device"),
    (lambda: (CAI(0x100000, (4, 8)), [1.0] * 8), "input 1: expected a torch CUDA tensor"),
    (lambda: (CAI(0x100000, (4, 8)),), "takes 2 inputs, 1 given"),
])
def test_errors(kernel, args, msg):
    k, drv = kernel
    with pytest.raises(LaunchError, match=msg):
        k(*args())
    assert not drv.launches


def test_driver_error_is_reported(kernel):
    k, drv = kernel
    drv.fail_launch = True
    with pytest.raises(LaunchError, match="cuLaunchKernel\\(k1.*CUDA_ERROR_INVALID_VALUE"):
        k(CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4"))
    assert not drv.ctx_stack


def test_views_of_dlpack_and_torch():
    a = np.arange(32, dtype=np.float16).reshape(4, 8)[:, ::2]
    v = view_of(a, "x")
    assert v.shape == (4, 4) and v.strides == (8, 2) and v.dtype == "f16" and v.device == -1
    assert v.ptr == a.__array_interface__["data"][0]
    torch = pytest.importorskip("torch")
    t = torch.zeros(3, 5, dtype=torch.bfloat16).t()
    v = view_of(t, "y")
    assert v.shape == (5, 3) and v.strides == (1, 5) and v.dtype == "bf16" and v.device == -1


def test_torch_cpu_tensor_rejected(kernel):
    torch = pytest.importorskip("torch")
    k, _ = kernel
    with pytest.raises(LaunchError, match="input 0: tensor is on cpu"):
        k(torch.zeros(4, 8, dtype=torch.float16), torch.zeros(8))


def test_missing_driver_message(tmp_path, monkeypatch):
    write_bundle(tmp_path, manifest(), PTX)
    k = load(tmp_path)
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(LaunchError, match="cuda-bindings"):
        k(CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4"))


def _fast_kernel_on_cpu(tmp_path, torch):
    """(kernel, driver, x, g): a bundle whose fast path was remembered for x (4x8 f16) and g
    (8 f32), as a checked call with CUDA tensors leaves it, with CPU stand-ins for the
    device and its stream."""
    write_bundle(tmp_path, manifest(smem=64 * 1024), PTX)
    drv = FakeDriver({"k1": 3, "k2": 2})
    k = load(tmp_path, driver=drv)
    k(CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4"), stream=7)  # loads modules, buffers
    x, g = torch.empty(4, 8, dtype=torch.float16), torch.empty(8, dtype=torch.float32)
    k._remember([x, g], 0)
    dev, _, _, outs, launches, ctx = k._fast
    cpu = torch.device("cpu")
    k._fast = (dev, cpu, lambda d: 0, outs, launches, ctx)
    k._fast_out_key = tuple((torch.Size(s), st, dt, cpu) for (s, st, dt, _) in k._fast_out_key)
    return k, drv, x, g


def test_fast_path_takes_out_tensors_of_the_outputs_layout(tmp_path):
    """`out=` tensors of the outputs' shapes, dtypes and dense layout, overlapping nothing,
    stay on the fast path (written in place, returned); any other `out=` takes the checked
    path (which rejects these CPU stand-ins, so it raises)."""
    torch = pytest.importorskip("torch")
    k, drv, x, g = _fast_kernel_on_cpu(tmp_path, torch)
    drv.launches.clear()
    y = torch.empty(4, 8, dtype=torch.float16)
    res = k(x, g, out=[y])
    assert res[0] is y and drv.launches[-1]["ptrs"][-1] == y.data_ptr()
    n = len(drv.launches)
    for bad in (torch.empty(4, 8, dtype=torch.float32),  # another dtype
                torch.empty(8, 4, dtype=torch.float16).t(),  # not row-major
                x):  # the input itself
        with pytest.raises(LaunchError):
            k(x, g, out=[bad])
    assert len(drv.launches) == n  # none of them launched


def test_fast_path_reuses_the_checked_call_and_falls_back_on_a_new_signature(tmp_path):
    """Repeated calls with torch tensors of the remembered signature skip the checks and
    reuse the kernelParams arrays; pointers still come from this call's tensors."""
    torch = pytest.importorskip("torch")
    k, drv, x, g = _fast_kernel_on_cpu(tmp_path, torch)
    import gc
    gc.collect()
    drv.launches.clear()
    for _ in range(2):
        x, g = torch.empty(4, 8, dtype=torch.float16), torch.empty(8, dtype=torch.float32)
        (y,) = k(x, g)
        buf = k._buffers[0][0][0]
        l1, l2 = drv.launches[-2:]
        assert l1["ptrs"] == [g.data_ptr(), x.data_ptr(), buf]
        assert l2["ptrs"][-1] == y.data_ptr() and tuple(y.shape) == (4, 8) and y.dtype == torch.float16
    # another signature takes the checked path (which rejects CPU tensors)
    with pytest.raises(LaunchError):
        k(torch.empty(4, 8, dtype=torch.float32), g)


# ------------------------------------------------------------- programmatic dependent launch

class PDLDriver(FakeDriver):
    """A fake driver that also has cuLaunchKernelEx (launch config objects as in
    cuda.bindings.driver); records the config's dims, stream and attributes."""
    CUlaunchAttributeID = _Enum(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION=6)

    class CUlaunchConfig:
        attrs, numAttrs = (), 0

    class CUlaunchAttribute:
        def __init__(self):
            self.id, self.value = None, _Enum(programmaticStreamSerializationAllowed=0)

    def cuLaunchKernelEx(self, cfg, f, params, extra):
        r = self.cuLaunchKernel(f, cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY,
                                cfg.blockDimZ, cfg.sharedMemBytes, cfg.hStream, params, extra)
        self.launches[-1]["pdl"] = [(a.id, a.value.programmaticStreamSerializationAllowed)
                                    for a in cfg.attrs[:cfg.numAttrs]]
        return r


def _pdl_kernel(tmp_path, driver):
    m = manifest()
    m.kernels[1].pdl = True  # k2 waits on griddepcontrol: a programmatic dependent of k1
    write_bundle(tmp_path, m, PTX)
    return load(tmp_path, driver=driver)


def test_pdl_kernel_is_launched_as_a_programmatic_dependent(tmp_path):
    """A `pdl` kernel goes through cuLaunchKernelEx with programmatic stream serialization
    (same dims, shared memory, stream and arguments as cuLaunchKernel would get); the others,
    and every kernel with a driver that has no cuLaunchKernelEx, through cuLaunchKernel."""
    drv = PDLDriver({"k1": 3, "k2": 2})
    k = _pdl_kernel(tmp_path, drv)
    assert load_bundle(tmp_path).manifest.kernels[1].pdl and not load_bundle(tmp_path).manifest.kernels[0].pdl
    for _ in range(2):  # the second call reuses the launch config
        outs = k(CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4"), stream=7)
        l1, l2 = drv.launches[-2:]
        assert "pdl" not in l1
        assert l2["pdl"] == [(6, 1)]
        assert l2["f"] == "k2" and l2["grid"] == (4, 2, 1) and l2["block"] == (64, 2, 1) and l2["smem"] == 0
        assert l2["stream"] == 7 and l2["ptrs"] == [k._buffers[0][0][0], outs[0].ptr]
    plain = FakeDriver({"k1": 3, "k2": 2})
    k = _pdl_kernel(tmp_path / "plain", plain)
    outs = k(CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4"), stream=7)
    assert [l["f"] for l in plain.launches] == ["k1", "k2"] and plain.launches[1]["ptrs"][-1] == outs[0].ptr


def test_pdl_kernel_on_the_fast_path(tmp_path):
    """The fast path launches a `pdl` kernel as the checked path does, with this call's pointers."""
    torch = pytest.importorskip("torch")
    drv = PDLDriver({"k1": 3, "k2": 2})
    k = _pdl_kernel(tmp_path, drv)
    k(CAI(0x100000, (4, 8)), CAI(0x200000, (8,), "<f4"), stream=7)
    x, g = torch.empty(4, 8, dtype=torch.float16), torch.empty(8, dtype=torch.float32)
    k._remember([x, g], 0)
    dev, _, _, outs, launches, ctx = k._fast
    k._fast = (dev, torch.device("cpu"), lambda d: 0, outs, launches, ctx)
    drv.launches.clear()
    (y,) = k(x, g)
    l1, l2 = drv.launches
    assert "pdl" not in l1 and l1["ptrs"] == [g.data_ptr(), x.data_ptr(), k._buffers[0][0][0]]
    assert l2["pdl"] == [(6, 1)] and l2["ptrs"][-1] == y.data_ptr()
