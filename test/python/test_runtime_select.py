"""Variant bundles (`mirage.runtime.select`) against a fake CUDA driver: the runtime
checks every variant against the reference, times them with events, launches the
fastest, remembers the choice per device on disk, and measures again on another GPU."""
import ctypes
import json
import os

import numpy as np
import pytest

from mirage.runtime import BundleError, KernelArg, KernelSpec, Manifest, TensorSpec, load, write_bundle
from mirage.runtime.select import Selecting, load_variants, write_variant_bundle
from test_runtime import CAI, FakeDriver, _Enum

SHAPE = [4, 8]


class TimingDriver(FakeDriver):
    """FakeDriver plus a clock, events, device names, device memory and an L2 cache: kernel
    `f` takes `cost[f]` ms (`warm[f]` ms when nothing overwrote the L2 cache since the last
    launch) and writes `value[f]` into every element of its last argument."""

    L2 = 50 << 20
    CUdevice_attribute = _Enum(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR=75,
                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=76,
                               CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE=38)
    CUstreamCaptureMode = _Enum(CU_STREAM_CAPTURE_MODE_RELAXED=2)

    def __init__(self, cost, value, name=b"NVIDIA H100 80GB HBM3", warm=None):
        super().__init__({f: 2 for f in cost})
        self.cost, self.value, self.name, self.warm = cost, value, name, warm or {}
        self.clock, self.events, self.mem, self.cold = 0.0, {}, {}, True
        self.live = {}

    def cuDeviceGetName(self, n, dev): return 0, self.name + b"\x00" * 4
    def cuDeviceGetAttribute(self, attr, dev): return 0, {75: 9, 38: self.L2}.get(attr, 0)
    def cuMemsetD32Async(self, p, v, n, s):
        self.cold = self.cold or 4 * n >= self.L2
        return (0,)

    def run(self, f):
        self.clock += self.cost[f] if self.cold else self.warm.get(f, self.cost[f])
        self.cold = False
    def cuEventCreate(self, flags):
        self.events[len(self.events)] = 0.0
        return 0, len(self.events) - 1
    def cuEventRecord(self, ev, stream): self.events[ev] = self.clock; return (0,)
    def cuEventSynchronize(self, ev): return (0,)
    def cuEventElapsedTime(self, a, b): return 0, self.events[b] - self.events[a]
    def cuEventDestroy(self, ev): return (0,)

    def cuLaunchKernel(self, f, *rest):
        r = super().cuLaunchKernel(f, *rest)
        if self.capturing:
            self.captured.append((f, self.launches.pop()["ptrs"][-1]))
            return r
        self.run(f)
        self.mem[self.launches[-1]["ptrs"][-1]] = self.value[f]
        return r

    # streams and graphs: a captured launch runs (takes time, writes) when its graph replays
    def cuStreamCreate(self, flags): return 0, 77
    def cuStreamSynchronize(self, s): return (0,)
    def cuStreamDestroy(self, s): return (0,)
    def cuStreamBeginCapture(self, s, mode):
        self.capturing, self.captured = True, []
        return (0,)
    def cuStreamEndCapture(self, s):
        self.capturing = False
        return 0, list(self.captured)
    def cuGraphInstantiate(self, g, flags): return 0, g
    def cuGraphLaunch(self, exe, s):
        for f, out in exe:
            self.run(f)
            self.mem[out] = self.value[f]
        return (0,)
    def cuGraphExecDestroy(self, e): return (0,)
    def cuGraphDestroy(self, g): return (0,)

    # device memory: what is allocated and not yet freed
    def cuMemAlloc(self, n):
        r = super().cuMemAlloc(n)
        self.live[r[1]] = n
        return r
    def cuMemFree(self, p):
        assert self.ctx_stack, "freed without a current context"
        assert self.live.pop(p, None) is not None, f"{p:#x} freed but not allocated"
        return (0,)
    def flush_allocs(self): return sum(1 for c in self.calls if c == ("alloc", 2 * self.L2))

    def cuMemcpyDtoH(self, dst, src, n):
        arr = np.frombuffer((ctypes.c_char * n).from_address(dst), dtype=np.float16)
        arr[:] = self.mem.get(src, np.nan)
        return (0,)


def bundle(path, fname):
    m = Manifest(graph_hash=fname, target="sm_90", inputs=[TensorSpec(SHAPE, "f16")],
                 outputs=[TensorSpec(SHAPE, "f16")],
                 kernels=[KernelSpec(fname, f"{fname}.ptx", [1, 1, 1], [32, 1, 1], 0,
                                     [KernelArg("input", 0), KernelArg("output", 0)])])
    return write_bundle(path, m, {f"{fname}.ptx": f".version 8.0\n.target sm_90\n.visible .entry {fname}(\n)\n{{ ret; }}\n"})


@pytest.fixture
def variants(tmp_path):
    parts = [(n, bundle(tmp_path / "src" / n, n)) for n in ("rank0", "rank1", "wrong", "reference")]
    return write_variant_bundle(tmp_path / "v", parts, "reference")


COST = {"rank0": 0.030, "rank1": 0.010, "wrong": 0.001, "reference": 0.050}
VALUE = {"rank0": 1.0, "rank1": 1.0, "wrong": 3.0, "reference": 1.0}


def call(k, drv):
    x, out = CAI(0x100000, SHAPE), CAI(0x200000, SHAPE)
    k(x, out=[out])
    return [l["f"] for l in drv.launches]


def test_chooses_the_fastest_correct_variant_and_persists_it(variants, tmp_path, capsys):
    drv = TimingDriver(COST, VALUE)
    k = load(variants, driver=drv, cache_dir=str(tmp_path / "cache"))
    assert isinstance(k, Selecting)
    call(k, drv)
    assert k.report["variant"] == "rank1"
    assert set(k.report["times_us"]) == {"rank0", "rank1", "reference"}   # 'wrong' never timed
    assert k.report["times_us"]["rank1"] == pytest.approx(10.0)
    assert "wrong" in k.report["rejected"] and "relative error" in capsys.readouterr().err
    drv.launches.clear()
    assert call(k, drv) == ["rank1"]                          # from now on: the chosen one only
    saved = json.load(open(tmp_path / "cache" / "variant_choices.json"))
    (key, rec), = saved.items()
    assert key.endswith("|NVIDIA H100 80GB HBM3 sm_90") and rec["variant"] == "rank1"

    # another process, same GPU: no measurement, rank1 straight away
    drv2 = TimingDriver(COST, VALUE)
    k2 = load(variants, driver=drv2, cache_dir=str(tmp_path / "cache"))
    assert call(k2, drv2) == ["rank1"]
    # another GPU: measured again, and both choices kept
    drv3 = TimingDriver({**COST, "rank0": 0.005}, VALUE, name=b"NVIDIA H200")
    k3 = load(variants, driver=drv3, cache_dir=str(tmp_path / "cache"))
    call(k3, drv3)
    assert k3.report["variant"] == "rank0" and k3.report["device"] == "NVIDIA H200 sm_90"
    assert len(json.load(open(tmp_path / "cache" / "variant_choices.json"))) == 2


def test_variants_are_timed_on_a_cold_l2(variants):
    """rank0 is the fastest when its inputs sit in L2 from the run before, rank1 when they
    come from memory, as a model's weights do: the choice follows the cold times."""
    drv = TimingDriver(COST, VALUE, warm={"rank0": 0.002})
    k = load(variants, driver=drv, cache_dir=None)
    call(k, drv)
    assert k.report["variant"] == "rank1"
    assert k.report["times_us"]["rank0"] == pytest.approx(30.0)


def test_one_l2_flush_buffer_per_selection(variants):
    """The buffer overwritten before each timed run is allocated once for all the variants
    of one measurement (three timed here) and freed after it; the next measurement has a
    buffer of its own."""
    drv = TimingDriver(COST, VALUE)
    k = load(variants, driver=drv, cache_dir=None)
    call(k, drv)
    assert len(k.report["times_us"]) == 3
    assert drv.flush_allocs() == 1 and 2 * drv.L2 not in drv.live.values()
    call(k, drv)                                              # chosen: no new measurement
    assert drv.flush_allocs() == 1
    call(load(variants, driver=drv, cache_dir=None), drv)    # nothing stored: measures again
    assert drv.flush_allocs() == 2 and 2 * drv.L2 not in drv.live.values()


def test_l2_flush_buffer_freed_when_timing_fails(variants):
    """A variant whose timing fails is dropped and the measurement goes on with the same
    buffer; when the reference's timing fails the selection raises, the buffer freed."""
    from mirage.runtime import LaunchError

    class FailingGraph(TimingDriver):
        def __init__(self, bad, *a):
            super().__init__(*a)
            self.bad = bad
        def cuGraphInstantiate(self, g, flags):
            return (1, None) if any(f == self.bad for f, _ in g) else (0, g)

    drv = FailingGraph("rank1", COST, VALUE)
    k = load(variants, driver=drv, cache_dir=None)
    call(k, drv)
    assert k.report["variant"] == "rank0" and "cuGraphInstantiate" in k.report["rejected"]["rank1"]
    assert drv.flush_allocs() == 1 and 2 * drv.L2 not in drv.live.values()

    drv = FailingGraph("reference", COST, VALUE)
    k = load(variants, driver=drv, cache_dir=None)
    with pytest.raises(LaunchError, match="cuGraphInstantiate"):
        call(k, drv)
    assert drv.flush_allocs() == 1 and 2 * drv.L2 not in drv.live.values()


def test_a_failed_timing_destroys_what_it_created(variants):
    """Streams, graphs, executable graphs and events made to time a variant are destroyed
    when its timing fails partway (here its graph launch), as when it succeeds."""
    class Counting(TimingDriver):
        def __init__(self, *a):
            super().__init__(*a)
            self.alive = {}
        def made(self, kind, r):
            self.alive[kind] = self.alive.get(kind, 0) + 1
            return r
        def gone(self, kind):
            self.alive[kind] -= 1
            return (0,)
        def cuStreamCreate(self, flags): return self.made("stream", super().cuStreamCreate(flags))
        def cuStreamDestroy(self, s): return self.gone("stream")
        def cuStreamEndCapture(self, s): return self.made("graph", super().cuStreamEndCapture(s))
        def cuGraphDestroy(self, g): return self.gone("graph")
        def cuGraphInstantiate(self, g, flags): return self.made("exe", super().cuGraphInstantiate(g, flags))
        def cuGraphExecDestroy(self, e): return self.gone("exe")
        def cuEventCreate(self, flags): return self.made("event", super().cuEventCreate(flags))
        def cuEventDestroy(self, ev): return self.gone("event")
        def cuGraphLaunch(self, exe, s):
            return (1,) if any(f == "rank1" for f, _ in exe) else super().cuGraphLaunch(exe, s)

    drv = Counting(COST, VALUE)
    k = load(variants, driver=drv, cache_dir=None)
    call(k, drv)
    assert k.report["variant"] == "rank0" and "cuGraphLaunch" in k.report["rejected"]["rank1"]
    assert drv.alive == {"stream": 0, "graph": 0, "exe": 0, "event": 0}


def test_damaged_choice_file_is_measured_again(variants, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "variant_choices.json").write_text("{not json")
    drv = TimingDriver(COST, VALUE)
    k = load(variants, driver=drv, cache_dir=str(cache))
    call(k, drv)
    assert k.report["variant"] == "rank1"
    assert json.load(open(cache / "variant_choices.json"))


def test_reference_kept_when_it_is_fastest(variants):
    drv = TimingDriver({**COST, "reference": 0.0001}, VALUE)
    k = load(variants, driver=drv, cache_dir=None)
    call(k, drv)
    assert k.report["variant"] == "reference"
    drv.launches.clear()
    assert call(k, drv) == ["reference"]


def test_variant_bundle_validation(tmp_path):
    a = bundle(tmp_path / "a", "ka")
    m = Manifest(graph_hash="x", target="sm_90", inputs=[TensorSpec([2, 2], "f16")], outputs=[TensorSpec([2, 2], "f16")],
                 kernels=[KernelSpec("kb", "kb.ptx", [1, 1, 1], [32, 1, 1], 0,
                                     [KernelArg("input", 0), KernelArg("output", 0)])])
    b = write_bundle(tmp_path / "b", m, {"kb.ptx": ".visible .entry kb(\n)\n"})
    with pytest.raises(BundleError, match="other tensors"):
        write_variant_bundle(tmp_path / "v", [("a", a), ("b", b)], "a")
    with pytest.raises(BundleError, match="reference variant 'c'"):
        write_variant_bundle(tmp_path / "w", [("a", a)], "c")
    ok = write_variant_bundle(tmp_path / "ok", [("a", a)], "a")
    idx = json.load(open(os.path.join(ok, "variants.json")))
    idx["reference"] = "zzz"
    json.dump(idx, open(os.path.join(ok, "variants.json"), "w"))
    with pytest.raises(BundleError, match="names no variant"):
        load_variants(ok)
    with pytest.raises(TypeError, match="single bundle"):
        load(a, cache_dir=None)


def test_a_variant_that_fails_to_launch_is_dropped(variants, capsys):
    class Failing(TimingDriver):
        def cuLaunchKernel(self, f, *rest):
            return (1,) if f == "rank1" else super().cuLaunchKernel(f, *rest)

    drv = Failing(COST, VALUE)
    k = load(variants, driver=drv, cache_dir=None)
    call(k, drv)
    assert k.report["variant"] == "rank0" and "failed to launch" in k.report["rejected"]["rank1"]
    assert "not used" in capsys.readouterr().err
