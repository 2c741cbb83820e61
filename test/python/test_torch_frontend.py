"""PyTorch front end: modules import to kn graphs that compute what the module computes.

Method: every module is built in float32 (the import needs a kn element type), then
imported; the kn graph is evaluated by the reference interpreter in float64 on fresh
random inputs and compared with the module converted to float64 (`module.double()`) on
the same (float32-representable) inputs. The only differences left are the constants
TOSA stores in float32 (eps, 1/n, 1/sqrt(2)), which move results by ~1e-7 relative:
hence rtol = atol = 1e-5 after scaling by the output's magnitude.
"""
import copy
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
pytest.importorskip("mlir")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mirage.torch as mt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from torch_modules import (Attention, Block, GatedMLP, LayerNormLinear, LoRA, NTrans,  # noqa: E402
                           QKNormAttention, RMSNormLinear)

TOL = 1e-5


def _rand(*shape, scale=1.0):
    return torch.randn(*shape) * scale


CASES = {
    "rmsnorm_linear": (RMSNormLinear, lambda: [_rand(4, 64)]),
    "layernorm_linear": (LayerNormLinear, lambda: [_rand(4, 64, scale=2.0) + 0.5]),
    "gated_mlp": (GatedMLP, lambda: [_rand(8, 64)]),
    "lora": (LoRA, lambda: [_rand(16, 64)]),
    "gqa": (Attention, lambda: [_rand(2, 16, 32, scale=0.3), _rand(2, 32, 64, scale=0.3), _rand(2, 64, 32)]),
    "qknorm_attention": (QKNormAttention, lambda: [_rand(2, 16, 32), _rand(2, 32, 64), _rand(2, 64, 32)]),
    "ntrans": (NTrans, lambda: [_rand(8, 64), _rand(8, 64), _rand(8, 64, scale=0.1)]),
    "transformer_block": (Block, lambda: [_rand(2, 4, 32)]),
}


def _close(got, want):
    want = want.detach().numpy()
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * scale)


@pytest.fixture(scope="module")
def imported():
    torch.manual_seed(0)
    out = {}
    for name, (cls, inputs) in CASES.items():
        m = cls().float()
        out[name] = (m, inputs, mt.import_module(m, inputs()))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_import_is_one_kn_graph_equal_to_module(imported, name):
    m, inputs, res = imported[name]
    assert res.fully_converted, res.report()
    g = res.graph
    assert "kn." in str(g) and "tosa" not in str(g)
    # weights are kernel inputs bound to the module's parameters, not constants
    params = {n for n, _ in m.named_parameters()}
    assert {b.name for b in res.bindings if b.kind == "parameter"} == params
    m64 = copy.deepcopy(m).double()
    for seed in (1, 2):  # fresh inputs, not the example ones
        torch.manual_seed(100 + seed)
        xs = inputs()
        (got,) = g.evaluate(res.graph_inputs(*xs))
        _close(got, m64(*[x.double() for x in xs]))


def test_fused_patterns_are_recognised(imported):
    kinds = lambda name: {op.kind for op in imported[name][2].graph.ops}  # noqa: E731
    assert "silu" in kinds("gated_mlp") and "sigmoid" not in kinds("gated_mlp")
    assert {"matmul", "rsqrt", "reduction"} <= kinds("rmsnorm_linear")
    assert {"reduce_max", "exp", "div"} <= kinds("qknorm_attention")
    assert "gelu" in kinds("transformer_block")
    # a 2-D linear layer is a 2-D kn.matmul (TOSA's rank-3 reshapes folded away)
    mm = [op for op in imported["gated_mlp"][2].graph.ops if op.kind == "matmul"]
    assert all(len(op.outputs[0].shape) == 2 for op in mm)


@pytest.mark.parametrize("fn", [
    lambda x: x / torch.std(x, dim=-1, keepdim=True),                    # var.correction, correction 1
    lambda x: torch.var(x, (0, 1), correction=0, keepdim=True) * x,      # several dims, correction 0
    lambda x: torch.var_mean(x, -1)[0] * torch.var_mean(x, -1)[1] + 1.0,  # keepdim False: rank 1
    lambda x: F.layer_norm(x, (16,)) * 3.0,                                # no affine
], ids=["std", "var_dims", "var_mean", "layer_norm"])
def test_variance_imports_to_kn(fn):
    # torch-mlir's table leaves var_mean / var whole; ours writes them in kn's ops
    res = mt.import_module(fn, [torch.randn(4, 16)])
    assert res.fully_converted, res.report()
    assert {op.kind for op in res.graph.ops} <= {"reduction", "sub", "mul", "div", "add", "constant", "rsqrt",
                                                  "reshape", "sqrt"}
    torch.manual_seed(11)
    x = torch.randn(4, 16) * 3.0 + 1.0
    (got,) = res.graph.evaluate(res.graph_inputs(x))
    _close(got, fn(x.double()))


class FusedQKV(nn.Module):
    """GPT-2's attention input: one projection (with bias), split into q, k and v."""

    def __init__(self, d=32):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v


class FusedGateUp(nn.Module):
    """Phi-3's gated MLP: the gate and up projections in one matrix, chunked."""

    def __init__(self, d=32, h=64):
        super().__init__()
        self.gate_up = nn.Linear(d, 2 * h, bias=False)
        self.down = nn.Linear(h, d, bias=False)

    def forward(self, x):
        g, u = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(g) * u)


@pytest.mark.parametrize("cls, shape", [(FusedQKV, (2, 8, 32)), (FusedGateUp, (8, 32)), (FusedGateUp, (2, 4, 32))])
def test_split_projection_becomes_projections_of_the_weights_columns(cls, shape):
    torch.manual_seed(13)
    m = cls()
    res = mt.import_module(m, [torch.randn(*shape)])
    assert res.fully_converted, res.report()
    assert "slice(s) of a projection's output moved onto its weight" in res.report()
    # no selection matrix left: every input is the module's input or a (cut) parameter
    assert {b.kind for b in res.bindings} == {"input", "parameter"}, res.report()
    assert any(t[0] == "narrow" for b in res.bindings for t in b.transforms)
    params = {id(t) for b, t in zip(res.bindings, res.graph.inputs) if b.kind == "parameter"}
    assert sum(op.kind == "matmul" and id(op.inputs[1]) in params for op in res.graph.ops) == 3  # q, k, v / gate, up, down
    if cls is FusedGateUp and len(shape) == 2:  # the gated MLP the search fuses
        assert [op.kind for op in res.graph.ops] == ["matmul", "matmul", "silu", "mul", "matmul"]
    m64 = copy.deepcopy(m).double()
    x = torch.randn(*shape)
    (got,) = res.graph.evaluate(res.graph_inputs(x))
    _close(got, m64(x.double()))
    # the kernels get the weight's columns, cut once
    calls = []
    _fake_kernels(list(res.program.segments.values()), calls)
    res.program.set_mode("kernels")
    for _ in range(2):
        np.testing.assert_allclose(res.program(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    w = (m.qkv if cls is FusedQKV else m.gate_up).weight.detach().t()
    k = w.shape[1] // (3 if cls is FusedQKV else 2)
    i = next(i for i, t in enumerate(calls[0]) if torch.equal(t, w[:, k:2 * k]))  # k, or up
    assert calls[1][i] is calls[0][i]


class SharedWeightView(nn.Module):
    """Two column slices of one transposed weight, used on both sides of an op left to
    PyTorch (cumsum): two kn segments."""

    def __init__(self, d=16):
        super().__init__()
        self.w = nn.Parameter(torch.randn(2 * d, d))

    def forward(self, x):
        w, d = self.w.t(), x.shape[-1]
        return torch.cumsum(x @ w[:, :d], -1) @ w[:, d:]


def test_each_segment_folds_its_own_view_of_a_weight():
    torch.manual_seed(14)
    m = SharedWeightView()
    x = torch.randn(4, 16)
    res = mt.import_module(m, [x])
    segs = list(res.program.segments.values())
    assert len(segs) == 2, res.report()
    # no selection matrix: each segment's weight is the parameter's columns, cut at binding
    assert all(a[0] != "const" for s in segs for a in s.arg_map), res.report()
    np.testing.assert_allclose(res.program(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_slice_of_a_value_used_whole_stays_a_selection():
    lin = nn.Linear(16, 32)

    def f(x):
        y = lin(x)
        return y[..., :8] * 2.0 + y.sum(-1, keepdim=True)  # y is used whole too: not cut

    res = mt.import_module(f, [torch.randn(4, 16)])
    assert res.fully_converted and "moved onto its weight" not in res.report()
    x = torch.randn(4, 16)
    (got,) = res.graph.evaluate(res.graph_inputs(x))
    _close(got, f(x).detach())


class ReturnsCache(nn.Module):
    """Returns an object torch.export cannot flatten, as a transformers model returns its cache."""

    class DynamicCache:
        def __init__(self, t):
            self.t = t

    def forward(self, x):
        return x * 2.0, ReturnsCache.DynamicCache(x)


def test_export_failure_names_the_module_and_the_way_out():
    with pytest.raises(ValueError, match="could not export ReturnsCache") as e:
        mt.import_module(ReturnsCache(), [torch.randn(4, 8)])
    assert "returns a DynamicCache object" in str(e.value) and "use_cache = False" in str(e.value)
    assert isinstance(e.value.__cause__, Exception)  # torch's own error kept
    with pytest.warns(RuntimeWarning, match="could not export ReturnsCache"):  # the drop-in runs the module
        fast = mt.superoptimize(ReturnsCache(), [torch.randn(4, 8)])
    x = torch.randn(4, 8)
    assert torch.equal(fast(x)[0], x * 2.0)


class WithUnsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Linear(16, 16, bias=False)

    def forward(self, x):
        y = F.silu(self.w(x))
        z = torch.log(y.abs() + 1.0)  # abs and log: not in kn
        return self.w(z) * y


def test_unsupported_op_is_partitioned_out_and_reported():
    torch.manual_seed(3)
    m = WithUnsupported()
    res = mt.import_module(m, [torch.randn(4, 16)])
    ops = {o.op for o in res.offloaded}
    assert ops == {"aten.abs.default", "aten.log.default"}, res.report()
    assert all(o.reason == "no kn equivalent" for o in res.offloaded)
    assert len(res.graphs) >= 2 and not res.fully_converted
    rep = res.report()
    assert "aten.log.default" in rep and "kn segment" in rep
    with pytest.raises(ValueError, match="not one kn graph"):
        res.graph
    x = torch.randn(4, 16)
    want = m(x)
    res.program.set_mode("interpreter")  # kn segments by the reference interpreter
    np.testing.assert_allclose(res.program(x).detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    res.program.set_mode("torch")
    np.testing.assert_allclose(res.program(x).detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_function_import_and_float64_is_offloaded():
    res = mt.import_module(lambda a, b: torch.exp(a) * b, [torch.randn(4, 8), torch.randn(1, 8)])
    assert res.fully_converted
    assert [b.kind for b in res.bindings] == ["input", "input"]
    res64 = mt.import_module(lambda a: torch.exp(a), [torch.randn(4, 8, dtype=torch.float64)])
    assert not res64.graphs and "float64" in res64.offloaded[0].reason


def test_superoptimize_falls_back_on_cpu_with_one_warning():
    torch.manual_seed(4)
    m = GatedMLP()
    x = torch.randn(8, 64)
    opt = mt.superoptimize(m, [x], search=False)
    assert isinstance(opt, torch.nn.Module) and opt.result.fully_converted
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            assert torch.equal(opt(x), m(x))
    mine = [x for x in w if "mirage" in str(x.message)]
    assert len(mine) == 1, [str(x.message) for x in mine]
    y = torch.randn(3, 64)  # another shape: falls back too, still correct
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(opt(y), m(y))


def test_torch_compile_backend_on_cpu_is_identical(monkeypatch):
    import torch._dynamo

    monkeypatch.setitem(mt.BACKEND_OPTIONS, "search", False)
    torch._dynamo.reset()
    mt.compile_reports(clear=True)
    torch.manual_seed(5)
    m = RMSNormLinear(32, 48)
    c = torch.compile(m, backend="mirage")
    for _ in range(2):
        x = torch.randn(4, 32)
        assert torch.equal(c(x), m(x))
    reps = mt.compile_reports()
    assert reps and reps[0].fully_converted, reps and reps[0].report()


# -- save / load: the deployable module ------------------------------------------------------

def _no_heavy_imports_in_loader():
    """The loader's modules import no MLIR, torch-mlir or z3 at module level."""
    import ast
    import pathlib

    root = pathlib.Path(mt.__file__).parent
    for f in ("frontend/deploy.py", "runtime/__init__.py", "runtime/bundle.py", "runtime/launcher.py"):
        tree = ast.parse((root / f).read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] in ("mlir", "torch_mlir", "z3")], (f, names)


@pytest.mark.parametrize("cls,shape", [(GatedMLP, (8, 64)), (WithUnsupported, (4, 16))])
def test_save_load_round_trip_on_cpu(tmp_path, cls, shape):
    _no_heavy_imports_in_loader()
    torch.manual_seed(6)
    m = cls()
    x = torch.randn(*shape)
    opt = mt.superoptimize(m, [x], search=False)  # bundles compiled for sm_90 without a GPU
    assert all(s.bundle is not None for s in opt.result.program.segments.values()), opt.report
    d = opt.save(str(tmp_path / "m"))
    import json
    import os

    man = json.load(open(os.path.join(d, "manifest.json")))
    for s in man["segments"]:
        b = os.path.join(d, s["bundle"])
        assert os.path.isfile(os.path.join(b, "manifest.json")) and any(f.endswith(".ptx") for f in os.listdir(b))
    assert os.path.isfile(os.path.join(d, "weights.pt"))

    # saved weights, no module: CPU inputs run the exported ATen graph (same function)
    ld = mt.load(d)
    assert all(s.bundle_path for s in ld.program.segments().values())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            np.testing.assert_allclose(ld(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6, atol=1e-6)
    assert len([a for a in w if "mirage" in str(a.message)]) == 1
    ld.program.set_mode("interpreter")  # kn segments by the reference interpreter, from the saved graphs
    np.testing.assert_allclose(ld.program(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="do not match"):
        ld(torch.randn(2, shape[1]))

    # bound to the module: its parameters, bit-identical fallback, other shapes too
    ld2 = mt.load(d, module=m, weights=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(ld2(x), m(x))
        y = torch.randn(3, shape[1])
        assert torch.equal(ld2(y), m(y))
    with torch.no_grad():  # parameters are read at call time, not copied
        next(m.parameters()).mul_(2)
    ld2.program.set_mode("torch")
    np.testing.assert_allclose(ld2.program(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_bundles_are_cached_by_graph_hash():
    import mirage.lower as L

    g = mt.import_module(lambda a, b: torch.exp(a) * b, [torch.randn(4, 8), torch.randn(1, 8)]).graphs[0]
    g2 = mt.import_module(lambda a, b: torch.exp(a) * b, [torch.randn(4, 8), torch.randn(1, 8)]).graphs[0]
    c1 = L.compile(g, "sm_90")
    assert L.compile(g2, "sm_90") is c1  # an equal graph (another object): no recompilation
    assert L.compile(g, "sm_80") is not c1


# -- layout transforms of weights folded into the bindings; fp32 upcast elision --------------

def _fake_kernels(segments, calls):
    """CPU stand-ins for compiled kernels: the segment's kn graph in float64 on the tensors
    the kernel would receive (so the shapes and the folded transforms are checked)."""
    for seg in segments:
        def k(ins, g=seg.graph):
            calls.append([t for t in ins])
            assert [tuple(t.shape) for t in ins] == [tuple(i.shape) for i in g.inputs]
            return [torch.from_numpy(o) for o in g.evaluate([t.double().numpy() for t in ins])]

        seg.kernel = k


def test_weight_layout_is_folded_into_bindings(imported):
    m, inputs, res = imported["rmsnorm_linear"]
    g = res.graph
    assert not {"transpose", "reshape"} & {op.kind for op in g.ops}, res.report()
    assert [str(b) for b in res.bindings] == ["input:x", "parameter:g.reshape(1,64)",
                                              "parameter:w.weight.transpose(1,0)"]
    assert [tuple(t.shape) for t in g.inputs] == [(4, 64), (1, 64), (64, 96)]
    assert "folded: parameter:w.weight.transpose(1,0)" in res.report()
    # nn.Linear in the gated MLP: both weights enter the matmuls pre-transposed
    assert all(op.kind in ("matmul", "silu", "mul") for op in imported["gated_mlp"][2].graph.ops)
    # unfolded import keeps the layout ops as kernels
    raw = mt.import_module(m, inputs(), fold_layout=False)
    assert {"transpose", "reshape"} <= {op.kind for op in raw.graph.ops}


def test_folded_transform_runs_once_and_follows_the_weights():
    torch.manual_seed(8)
    m = RMSNormLinear(32, 48)
    x = torch.randn(4, 32)
    res = mt.import_module(m, [x])
    calls = []
    segs = list(res.program.segments.values())
    _fake_kernels(segs, calls)
    res.program.set_mode("kernels")
    for _ in range(2):
        np.testing.assert_allclose(res.program(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    w_t = [t for t in calls[0] if tuple(t.shape) == (32, 48)]
    assert len(w_t) == 1 and torch.equal(w_t[0], m.w.weight.detach().t())
    assert calls[1][2] is calls[0][2]  # cached: transposed once, not per call
    with torch.no_grad():
        m.w.weight.mul_(-2)  # in place: the cached transform is recomputed
    np.testing.assert_allclose(res.program(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert calls[2][2] is not calls[0][2] and torch.equal(calls[2][2], m.w.weight.detach().t())


def test_save_load_keeps_folded_bindings(tmp_path):
    import json
    import os

    torch.manual_seed(9)
    m = RMSNormLinear(32, 48)
    x = torch.randn(4, 32)
    opt = mt.superoptimize(m, [x], search=False)
    d = opt.save(str(tmp_path / "m"), weights=False)
    man = json.load(open(os.path.join(d, "manifest.json")))
    assert man["bindings"]["main"] == ["input:x", "parameter:g.reshape(1,32)", "parameter:w.weight.transpose(1,0)"]
    # a fresh module with other weights, bound by name at load time: the transforms apply to its weights
    torch.manual_seed(10)
    m2 = RMSNormLinear(32, 48)
    ld = mt.load(d, module=m2, weights=False)
    calls = []
    _fake_kernels(ld.program.segments().values(), calls)
    ld.program.set_mode("kernels")
    np.testing.assert_allclose(ld.program(x).detach().numpy(), m2(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert torch.equal(calls[0][2], m2.w.weight.detach().t().contiguous())
    ld.program.set_mode("interpreter")  # the reference kn graph with the folded bindings
    np.testing.assert_allclose(ld.program(x).detach().numpy(), m2(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_save_load_keeps_cut_weights(tmp_path):
    torch.manual_seed(14)
    m = FusedGateUp()
    x = torch.randn(8, 32)
    d = mt.superoptimize(m, [x], search=False).save(str(tmp_path / "m"), weights=False)
    torch.manual_seed(15)
    m2 = FusedGateUp()  # other weights, bound by name at load time: the cuts apply to them
    ld = mt.load(d, module=m2, weights=False)
    calls = []
    _fake_kernels(ld.program.segments().values(), calls)
    ld.program.set_mode("kernels")
    np.testing.assert_allclose(ld.program(x).detach().numpy(), m2(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    gate = m2.gate_up.weight.detach().t()[:, :64]
    assert any(torch.equal(t, gate) for t in calls[0])


class HalfQKVNorm(nn.Module):
    """A pre-norm fused projection at fp16 (GPT-2's ln_1 and c_attn): on the CPU, torch
    exports the half LayerNorm as f32 ops whose weight multiplies by type promotion, and
    the half `addmm` as an f32 matmul between casts."""

    def __init__(self, d=32):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=-1)
        return q * k + v


def test_half_norm_and_split_projection_import_whole():
    torch.manual_seed(12)
    m = HalfQKVNorm().half().eval()
    with torch.no_grad():  # weights away from 1 and 0: a dropped gain or bias shows
        m.ln.weight.uniform_(0.5, 1.5)
        m.ln.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 8, 32).half()
    res = mt.import_module(m, [x], allow_fp32_upcast_elision=True)
    assert res.fully_converted, res.report()
    assert {b.kind for b in res.bindings} == {"input", "parameter"}, res.report()  # no selection matrix
    assert sum(op.kind == "matmul" for op in res.graph.ops) == 3
    (got,) = res.graph.evaluate(res.graph_inputs(x))  # the same real function as the module
    want = copy.deepcopy(m).double()(x.double()).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


class GeluMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_erf_gelu_imports_as_gelu(dtype):
    # torch-mlir writes F.gelu as x * 0.5 * (1 + erf(x * 1/sqrt 2)); at fp16 the constant is
    # 0.70703125 (BERT's and ViT's MLPs stayed in PyTorch, the erf poisoning their partition)
    torch.manual_seed(15)
    m = GeluMLP().to(dtype)
    x = torch.randn(4, 16).to(dtype)
    res = mt.import_module(m, [x], allow_fp32_upcast_elision=dtype == torch.float16)  # the Linears' casts
    assert res.fully_converted, res.report()
    assert [op.kind for op in res.graph.ops].count("gelu") == 1
    (got,) = res.graph.evaluate(res.graph_inputs(x))
    want = copy.deepcopy(m).double()(x.double()).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_fp32_upcast_elision_is_opt_in():
    torch.manual_seed(11)
    m = GatedMLP(32, 64).half()
    x = torch.randn(4, 32).half()
    exact = mt.import_module(m, [x])  # default: the casts around SiLU stay in PyTorch
    assert len(exact.graphs) == 3 and not exact.elided
    casts = [o for o in exact.offloaded if "convert_element_type" in o.op]
    assert len(casts) == 2 and all("allow_fp32_upcast_elision=True" in o.reason for o in casts)
    res = mt.import_module(m, [x], allow_fp32_upcast_elision=True)
    assert res.fully_converted, res.report()
    assert [op.kind for op in res.graph.ops] == ["matmul", "silu", "matmul", "mul"]
    assert all(t.dtype.mlir == "f16" for t in res.graph.inputs)
    assert res.elided and "not exact" in res.report()
    (got,) = res.graph.evaluate(res.graph_inputs(x))  # same real function as the module
    want = copy.deepcopy(m).double()(x.double()).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    # the ATen fallback of the rewritten program computes SiLU at fp16: close to the module
    y = res.program(x)
    assert y.dtype == torch.float16
    np.testing.assert_allclose(y.detach().float().numpy(), m(x).detach().float().numpy(), rtol=2e-2, atol=2e-2)


def test_a_pick_the_lowering_rejects_falls_back_to_one_it_takes(monkeypatch):
    # the search's pick failed to lower (shared memory): the segment took its next candidate
    # that compiles, not PyTorch for all of its ops
    import mirage.lower as lower

    torch.manual_seed(16)
    m = GatedMLP(32, 64)
    res = mt.import_module(m, [torch.randn(8, 32)])
    compiled, seen = [], []
    real = lower.compile

    def compile_(g, target):
        seen.append(g)
        if len(seen) == 1:
            raise RuntimeError("[smem] the pick's tiles do not fit")
        compiled.append(g)
        return real(g, target)

    monkeypatch.setattr(lower, "compile", compile_)
    notes = mt._attach_kernels(res, dict(time_limit=10, workers=1, progress=False))
    (seg,) = res.program.segments.values()
    assert seg.bundle is not None and seg.optimized is compiled[0] is not seen[0]
    assert any("code generation failed for the search's pick" in n for n in notes), notes


class MaskedSDPA(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sdpa_with_a_mask_imports_whole(dtype):
    # torch's safe softmax (`where(all(x == -inf), 0, softmax(x))`) is written with clamps:
    # no boolean op cuts the attention, and a fully masked row is still 0
    torch.manual_seed(17)
    q, k, v = (torch.randn(1, 2, 8, 16).to(dtype) for _ in range(3))
    mask = torch.zeros(1, 1, 8, 8)
    mask[..., 3, :] = float("-inf")  # row 3 fully masked
    mask[..., 5, 6:] = float("-inf")
    mask[..., 6, :] = torch.finfo(torch.float32).min  # additive finfo.min: a uniform row in torch
    mask = mask.to(dtype)
    res = mt.import_module(MaskedSDPA(), [q, k, v, mask], allow_fp32_upcast_elision=dtype == torch.float16)
    assert res.fully_converted, res.report()
    assert [op.kind for op in res.graph.ops].count("clamp") == 2
    (got,) = res.graph.evaluate(res.graph_inputs(q, k, v, mask))
    want = MaskedSDPA()(*(t.double() for t in (q, k, v, mask))).numpy()
    assert np.all(got[0, :, 3] == 0) and np.all(want[0, :, 3] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_deployed_program_moves_captured_tensor_constants_with_the_inputs():
    """A tensor that FX tracing captured (a buffer of the graph module, which the program
    passes no state for) follows the inputs' device on the first call. Built on the CPU, GPT-2's, Phi-3's and Mistral's blocks kept one on the host
    and failed on CUDA inputs (benchmarks/results/models_import.md, 2026-12-07); the
    "meta" device stands in for CUDA here."""
    import torch.fx
    import torch.utils._pytree as pytree
    from mirage.frontend.deploy import DeployedProgram

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.tensor([2.0, 3.0])  # traced into a buffer, as `_tensor_constant0`

        def forward(self, x):
            return (x * self.c,)

    gm = torch.fx.symbolic_trace(Scale())
    prog = DeployedProgram(gm, [], {}, pytree.treespec_dumps(pytree.tree_flatten(torch.zeros(1))[1]))
    x = torch.randn(4, 2)
    assert torch.equal(prog(x), x * torch.tensor([2.0, 3.0]))
    y = prog(torch.ones(4, 2, device="meta"))
    assert y.device.type == "meta" and gm.c.device.type == "meta" and y.shape == (4, 2)


class PositionMaskedScores(nn.Module):
    """Scores with an additive causal mask built from positions, as GPT-2 builds its own
    (arange, le, where): integer and boolean ops kn does not have, but constants of the
    exported shapes."""

    def forward(self, x):
        t = x.shape[1]
        i = torch.arange(t)
        bias = torch.where(i[None, :] <= i[:, None], torch.zeros(()), torch.full((), -1e4))
        return torch.softmax(x @ x.transpose(-1, -2) * 0.25 + bias, dim=-1)


def test_constant_mask_is_computed_at_import(tmp_path):
    """The mask's ops read no input: computed once at import (`fold_constants`), the program
    is one kn graph with nothing left to PyTorch, equal to the module (float64 interpreter
    and the exported graph, fresh inputs), also saved and loaded."""
    m = PositionMaskedScores()
    res = mt.import_module(m, [torch.randn(2, 8, 16)])
    assert res.fully_converted and not res.offloaded, res.report()
    assert "computed at import" in res.report()
    x = torch.randn(2, 8, 16)
    want = m(x)
    assert [str(b) for b in res.bindings] == ["input:x", "value:_folded_where"]
    _close(res.evaluate(x)[0], want)  # the kn graph alone, the mask read from the graph module
    for mode in ("interpreter", "torch"):
        res.program.set_mode(mode)
        _close(res.program(x).detach().numpy(), want)
    opt = mt.superoptimize(m, [x], search=False)
    ld = mt.load(opt.save(str(tmp_path / "masked")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU inputs: the exported graph
        _close(ld(x).detach().numpy(), want)


class RotaryLinear(nn.Module):
    """A linear layer rotated by cos and sin tables of an `inv_freq` buffer times the
    positions (a rotary embedding's tables, as Phi-3's and Mistral's models build them):
    cos and sin have no kn equivalent, and they read module state alone."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d), persistent=False)
        self.w = nn.Linear(d, d, bias=False)

    def forward(self, x):
        f = torch.arange(x.shape[1]).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        return self.w(x) * emb.cos() + x * emb.sin()


def test_state_only_values_run_once_per_state_version(tmp_path):
    """The rotary tables read a module buffer alone (`hoist_state_values`): computed on the
    first call and again only when the buffer changes, outside the kn program, which is one
    graph with nothing left to PyTorch per call; equal to the float64 module on fresh
    inputs before and after the buffer changes in place, also saved and loaded."""
    torch.manual_seed(16)
    m = RotaryLinear()
    res = mt.import_module(m, [torch.randn(2, 8, 16)])
    assert res.fully_converted and not res.offloaded, res.report()
    assert "read module buffers alone (cat, cos, mul, sin, unsqueeze)" in res.report()
    sv = res.program.gm.get_submodule("_state_values")
    runs = []
    hook = sv.prelude.register_forward_pre_hook(lambda mod, args: runs.append(1))
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        _close(res.evaluate(x)[0], copy.deepcopy(m).double()(x.double()))  # the kn graph alone
    for mode in ("interpreter", "torch", "interpreter"):
        res.program.set_mode(mode)
        with torch.no_grad():
            _close(res.program(x).numpy(), copy.deepcopy(m).double()(x.double()))
    assert len(runs) == 1  # once for `evaluate` and the program's three calls
    with torch.no_grad():
        m.inv_freq.mul_(0.5)  # in place: the tables are computed again
        _close(res.program(x).numpy(), copy.deepcopy(m).double()(x.double()))
    assert len(runs) == 2
    hook.remove()
    torch.manual_seed(17)
    m2 = RotaryLinear()  # other weights and tables, bound by name at load time
    with torch.no_grad():
        m2.inv_freq.mul_(2.0)
    ld = mt.load(mt.superoptimize(m, [x], search=False).save(str(tmp_path / "rot"), weights=False), module=m2,
                 weights=False)
    ld.program.set_mode("interpreter")
    with torch.no_grad():
        _close(ld.program(x).numpy(), copy.deepcopy(m2).double()(x.double()))


class HalfMaskedAttention(nn.Module):
    """Half attention computed at float32 between casts, with an additive causal mask of 0
    and -inf built from positions (GPT-2's SDPA path in fp16)."""

    def forward(self, q, k, v):
        t = q.shape[1]
        i = torch.arange(t)
        bias = torch.where(i[None, :] <= i[:, None], torch.zeros(()), torch.full((), float("-inf")))
        s = q.float() @ k.float().transpose(-1, -2) * 0.25 + bias
        return (torch.softmax(s, dim=-1) @ v.float()).half()


def test_half_attention_with_a_folded_mask_imports_whole():
    """The mask, computed at import (float32: 0 and -inf), is an operand of the upcast
    region; the half type holds its values exactly, so the region is elided with the mask
    read at half: one kn graph, nothing left to PyTorch (GPT-2's attention stayed in three
    segments around its casts); equal to the module in float64 (interpreter)."""
    torch.manual_seed(16)
    m = HalfMaskedAttention()
    q, k, v = (torch.randn(2, 8, 16).half() for _ in range(3))
    res = mt.import_module(m, [q, k, v], allow_fp32_upcast_elision=True)
    assert res.fully_converted and not res.offloaded, res.report()
    assert "elided" in res.report() and "computed at import" in res.report()
    res.program.set_mode("interpreter")
    got = res.program(q, k, v).detach().double().numpy()
    s = q.double() @ k.double().transpose(-1, -2) * 0.25
    s = s.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
    want = (torch.softmax(s, dim=-1) @ v.double()).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
