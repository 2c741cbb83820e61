"""`transformers` modules as they are through the PyTorch front end (issue 15).

Modules: the RMSNorm, MLP and decoder layer of LLaMA and Qwen2 (Qwen2: biases on q/k/v),
with a small config (hidden 64, 4 heads, 2 KV heads, head dim 16), random weights, eval
mode; the decoder layer at a decode step (one new token, grouped-query attention over a KV
cache of 8 positions, rotary embeddings, residuals; `examples/transformers_layers.py`).

Checks:
- import: each module is one kn graph, nothing left to PyTorch; evaluated by the reference
  interpreter in float64 on fresh inputs, it matches the module run in float64 on the same
  values (rtol = atol = 1e-5 after scaling by the output's magnitude: what is left are
  TOSA's constants stored in the model's type, eps and 1/n, and the module's own float32
  casts). Half-precision modules are imported with `allow_fp32_upcast_elision=True` (kn
  has no cast), which changes rounding, not the real-number function: the same check holds.
- `torch.compile(backend="mirage")` captures each module as one graph and one kn segment;
  on CPU its outputs (and the updated KV cache) are eager PyTorch's, bit for bit.
- `mt.superoptimize`: the returned module runs the original on CPU, bit for bit; the
  search result of a segment is cached: a second call (new import, same program) takes it
  from the cache; identical segments in one model are searched once.
"""
import copy
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
pytest.importorskip("transformers")

import mirage.torch as mt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import transformers_layers as TL  # noqa: E402

TOL = 1e-5
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
HALF = {"f16", "bf16"}


def _modules(family, dt, seed=0):
    """name -> (module, inputs(seed) -> list of tensors)."""
    dtype = DTYPES[dt]
    norm, mlp = TL.norm_and_mlp(family, TL.SMALL, dtype, seed)
    step, _ = TL.decode_step(family, TL.SMALL, 2, 8, dtype, seed)

    def x(s):
        return [TL._randn(np.random.default_rng(s), (2, 1, TL.SMALL["hidden_size"])).to(dtype)]

    return {"rmsnorm": (norm, x), "mlp": (mlp, x),
            "decoder_layer": (step, lambda s: TL.decode_inputs(family, step.cfg, 2, 8, dtype, s))}


CASES = [(f, dt, m) for f in ("llama", "qwen2") for dt in ("f16", "bf16") for m in ("rmsnorm", "mlp", "decoder_layer")]
CASES += [("llama", "f32", "decoder_layer"), ("qwen2", "f32", "decoder_layer")]


@pytest.mark.parametrize("family,dt,name", CASES)
def test_module_imports_as_one_kn_graph_equal_to_the_module(family, dt, name):
    m, inputs = _modules(family, dt)[name]
    res = mt.import_module(m, inputs(1), allow_fp32_upcast_elision=dt in HALF)
    assert res.fully_converted and not res.offloaded, res.report()
    assert {b.name for b in res.bindings if b.kind == "parameter"} == {n for n, _ in m.named_parameters()}
    assert all(t.dtype.mlir == {"f32": "f32", "f16": "f16", "bf16": "bf16"}[dt] for t in res.graph.inputs)
    m64 = copy.deepcopy(m).double()
    for seed in (2, 3):  # fresh inputs, not the example ones
        xs = inputs(seed)
        want = m64(*[x.double() for x in xs])
        want = list(want) if isinstance(want, tuple) else [want]
        got = res.evaluate(*xs)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            w = w.detach().numpy()
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL * max(1.0, float(np.abs(w).max())))


def test_decoder_layer_is_taken_whole():
    """RoPE's slices and concatenations, the KV-cache concatenation, repeat_kv's views and
    the no-op metadata checks are in the one kn graph; nothing cuts the layer."""
    m, inputs = _modules("llama", "f16")["decoder_layer"]
    res = mt.import_module(m, inputs(1), allow_fp32_upcast_elision=True)
    rep = res.report()
    assert "_assert_tensor_metadata check(s) removed" in rep and "empty operand(s) of cat removed" in rep
    assert "slice -> matmul by a 0/1 selection matrix" in rep
    assert "concatenated slices of one tensor -> one matmul by a signed selection matrix" in rep
    assert "cast(half matmul accumulated at f32) -> half matmul" in rep
    kinds = [op.kind for op in res.graph.ops]
    assert kinds.count("concat") == 2  # the K and V cache updates (rotate_half is a product)
    assert {"silu", "exp", "reduce_max", "rsqrt"} <= set(kinds)
    # attention is matmul, scale, softmax, matmul with no reshape between (reshapes sunk)
    prod = {id(o): op for op in res.graph.ops for o in op.outputs}
    bmm = [op for op in res.graph.ops if op.kind == "matmul" and len(op.outputs[0].shape) > 2]
    assert len(bmm) == 2 and prod[id(bmm[1].inputs[0])].kind == "div"
    assert "reshape(s) moved past element-wise ops and cancelled" in rep
    # grouped-query attention reads each KV head once: repeat_kv's copies are not made
    assert "repeat" not in kinds and "grouped matmul" in rep
    # rotate_half (cat(-x2, x1) of the halves of the head dim) is one product by a constant input
    (rot,) = [np.asarray(b.value) for b in res.bindings if b.kind == "constant"]
    x = np.random.default_rng(0).standard_normal((5, 16))
    np.testing.assert_array_equal(x @ rot, np.concatenate([-x[:, 8:], x[:, :8]], axis=1))
    # without the opt-in, the float32 casts of RMSNorm, SiLU and softmax stay in PyTorch, with the reason
    exact = mt.import_module(m, inputs(1))
    casts = [o for o in exact.offloaded if "convert_element_type" in o.op]
    assert casts and all("allow_fp32_upcast_elision=True" in o.reason for o in casts)


@pytest.fixture
def backend_options(monkeypatch):
    import torch._dynamo

    monkeypatch.setitem(mt.BACKEND_OPTIONS, "search", False)
    monkeypatch.setitem(mt.BACKEND_OPTIONS, "compile", False)
    monkeypatch.setitem(mt.BACKEND_OPTIONS, "allow_fp32_upcast_elision", True)
    torch._dynamo.reset()
    mt.compile_reports(clear=True)
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("family,dt", [("llama", "f16"), ("qwen2", "bf16")])
def test_torch_compile_backend_on_transformers_modules(backend_options, family, dt):
    mods = _modules(family, dt)
    for name in ("rmsnorm", "mlp"):
        m, inputs = mods[name]
        c = torch.compile(m, backend="mirage")
        for seed in (1, 2):
            (x,) = inputs(seed)
            with torch.no_grad():
                assert torch.equal(c(x), m(x)), name
    # the decoder layer as a model calls it: position embeddings and a DynamicCache
    step, inputs = mods["decoder_layer"]
    layer, cfg = step.layer, step.cfg
    c = torch.compile(layer, backend="mirage")
    for seed in (1, 2):
        h, cos, sin, k, v = inputs(seed)
        caches = []
        for fn in (c, layer):
            cache = TL.new_cache(cfg, k.clone(), v.clone())
            with torch.no_grad():
                out = fn(h, position_embeddings=(cos, sin), use_cache=True, **{TL._CACHE_ARG: cache})
            caches.append((out,) + TL.cache_tensors(cache))
        (o1, k1, v1), (o2, k2, v2) = caches
        assert torch.equal(o1, o2) and torch.equal(k1, k2) and torch.equal(v1, v2)
        assert k1.shape[2] == 9  # the new token was appended
    reps = mt.compile_reports()
    # one captured graph per module (no graph break), each one kn segment, nothing left to PyTorch
    assert len(reps) == 3, [r.report() for r in reps]
    for r in reps:
        assert r.fully_converted, r.report()
    # Dynamo passes the parameters as graph inputs: their transposes are still folded (done once)
    assert "folded: input:" in reps[-1].report() and "transpose" not in {op.kind for op in reps[1].graph.ops}


def test_superoptimize_runs_the_module_on_cpu():
    step, inputs = _modules("qwen2", "f16")["decoder_layer"]
    opt = mt.superoptimize(step, inputs(1), search=False, compile=False, allow_fp32_upcast_elision=True,
                           progress=False)
    assert opt.result.fully_converted, opt.report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in (1, 2):
            xs = inputs(seed)
            for a, b in zip(opt(*xs), step(*xs)):
                assert torch.equal(a, b)


def test_second_compile_comes_from_the_search_cache(tmp_path, capsys):
    norm, inputs = _modules("llama", "f16")["rmsnorm"]
    opts = dict(allow_fp32_upcast_elision=True, cache_dir=str(tmp_path), time_limit=20, compile=False)
    first = mt.superoptimize(norm, inputs(1), **opts)
    assert any("superoptimized" in n and "from the search cache" not in n for n in first.notes), first.report
    assert "[mirage] segment 1/1" in capsys.readouterr().err  # progress on stderr
    again = mt.superoptimize(copy.deepcopy(norm), inputs(2), **opts)  # a new import of the same program
    assert any("from the search cache" in n for n in again.notes), again.report
    seg1, seg2 = (list(o.result.program.segments.values())[0] for o in (first, again))
    assert seg1.optimized.to_mlir() == seg2.optimized.to_mlir()


def test_identical_layers_are_searched_once(tmp_path):
    """Two MLP layers of a Sequential, other weights: cut into one segment per layer (the
    same program), searched and compiled once."""
    _, mlp_a = TL.norm_and_mlp("llama", TL.SMALL, torch.float32, seed=0)
    _, mlp_b = TL.norm_and_mlp("llama", TL.SMALL, torch.float32, seed=1)
    m = torch.nn.Sequential(mlp_a, mlp_b)
    x = torch.randn(2, 64)
    opt = mt.superoptimize(m, [x], cache_dir=str(tmp_path), time_limit=20, compile=False, progress=False)
    assert len(opt.result.graphs) == 2 and not opt.result.offloaded, opt.report
    searched = [n for n in opt.notes if "superoptimized" in n]
    reused = [n for n in opt.notes if "the same program as" in n]
    assert len(searched) == 1 and len(reused) == 1, opt.notes
    # PyTorch's own modules in a Sequential are not cut: a Linear-SiLU-Linear MLP stays one graph
    seq = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False), torch.nn.SiLU(), torch.nn.Linear(64, 64, bias=False))
    assert mt.import_module(seq, [x]).fully_converted
    opt.result.program.set_mode("interpreter")  # the two segments chained, float64
    np.testing.assert_allclose(opt.result.program(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_time_limited_layer_search_comes_from_the_cache_the_second_time(tmp_path):
    """The decoder layer's search stops at its time limit (its subprograms share it); what it
    verified is cached all the same, so the second compile (a new import) does not search."""
    step, inputs = _modules("llama", "f16")["decoder_layer"]
    opts = dict(allow_fp32_upcast_elision=True, cache_dir=str(tmp_path), time_limit=3, compile=False, progress=False)
    first = mt.superoptimize(step, inputs(1), **opts)
    (seg1,) = first.result.program.segments.values()
    assert seg1.optimized.search.stats.stopped == "time limit", seg1.optimized.search.report()
    again = mt.superoptimize(copy.deepcopy(step), inputs(2), **opts)
    (seg2,) = again.result.program.segments.values()
    assert any("from the search cache" in n for n in again.notes), again.report
    assert seg2.optimized.to_mlir() == seg1.optimized.to_mlir()
