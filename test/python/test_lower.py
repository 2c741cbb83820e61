"""convert-mirage-to-gpu and the PTX it leads to, checked on the CPU (no GPU needed).

What runs on the GPU (correctness against numpy float64, timings) is in
benchmarks/gpu_check_lower.py / gpu_bench_lower.py; the results are in
benchmarks/results/. Here: every benchmark lowers to PTX; the instructions we meant
are there (tensor-core mma.sync + ldmatrix for block matmuls, cp.async for the input
rings, shuffles for reductions); barrier counts; split for-loops; bundles; errors.
"""
from __future__ import annotations

import json
import os
import re
import sys

import pytest

pytest.importorskip("mlir.ir")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import mirage as mi  # noqa: E402
from mirage.lower import LoweringError, Options, compile, convert_to_gpu, to_ptx  # noqa: E402

from benchmarks import BENCHMARKS  # noqa: E402

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


def entries(ptx: str) -> list[str]:
    return re.findall(r"\.visible \.entry (\w+)\(", ptx)


def entry_body(ptx: str, name: str) -> str:
    i = ptx.index(f".entry {name}(")
    j = ptx.find(".entry ", i + 1)
    return ptx[i:j if j > 0 else len(ptx)]


@pytest.mark.parametrize("name", list(BENCHMARKS))
@pytest.mark.parametrize("which", ["fused", "reference"])
def test_every_benchmark_lowers_to_ptx(name, which):
    g = getattr(BENCHMARKS[name], which)(1)
    low, ptx = to_ptx(g)
    assert ptx.startswith("//") and ".target sm_90" in ptx and ".version 8.0" in ptx
    assert entries(ptx) == [k["name"] for k in low.kernels]
    # the bare-pointer convention: one .param per tensor argument
    for k in low.kernels:
        params = re.findall(r"\.param \.u64 \.ptr", entry_body(ptx, k["name"]).split(")")[0])
        assert len(params) == len(k["args"])
    # no register arrays spilled to local memory
    assert "ld.local" not in ptx and "st.local" not in ptx
    if any(k["smem_bytes"] for k in low.kernels):
        assert ".extern .shared .align 16 .b8 __dynamic_shmem__0[];" in ptx
        assert "demoted" not in ptx


def test_block_matmul_runs_on_tensor_cores():
    low, ptx = to_ptx(BENCHMARKS["gated_mlp"].fused(1))
    assert ptx.count(MMA) >= 2
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
    assert low.kernels[0]["notes"]["mma"] == 2
    # the generic lowering of the same μGraph: no tensor cores, no async copies
    _, generic = to_ptx(BENCHMARKS["gated_mlp"].fused(1), options=Options(tensor_cores=False, async_copy=False))
    assert "mma.sync" not in generic and "cp.async" not in generic and "fma.rn.f32" in generic


def bf16_graph():
    g = mi.new_kernel_graph("bf16mm")
    X = g.new_input((16, 256), dtype=mi.bfloat16)
    W = g.new_input((256, 128), dtype=mi.bfloat16)
    tb = mi.new_threadblock_graph((4, 1, 1), (128, 1, 1), 4)
    tX = tb.new_input(X, (-1, -1, -1), 1)
    tW = tb.new_input(W, (1, -1, -1), 0)
    tb.new_output(tb.forloop_accum(tb.matmul(tX, tW)), (1, -1, -1))
    g.mark_output(g.customized([X, W], tb)[0])
    return g


def test_bf16_matmul_runs_on_tensor_cores():
    # upstream nvgpu.mma.sync cannot lower bf16 operands (MLIR 22): inline-PTX mma.sync
    # on the nvgpu.ldmatrix fragments
    low, ptx = to_ptx(bf16_graph())
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx and "cp.async" in ptx
    assert low.kernels[0]["notes"]["mma"] == 1
    _, generic = to_ptx(bf16_graph(), options=Options(tensor_cores=False))
    assert "mma.sync" not in generic and "fma.rn.f32" in generic


def test_exp_of_a_16_bit_result_is_the_hardware_approximation():
    """exp rounded to f16 or bf16 is 2^(x log2 e) by ex2.approx (`Emitter.exp`: its
    relative error, about 2^-22, is far below the result's 2^-11); an f32 result keeps
    math.exp's accurate expansion. sigmoid (silu) takes the same exp."""
    def graph(dtype):
        g = mi.new_kernel_graph("e")
        X = g.new_input((64, 256), dtype=dtype)
        g.mark_output(g.silu(g.exp(X)))
        return g

    for dtype, fast in ((mi.float16, True), (mi.bfloat16, True), (mi.float32, False)):
        text = convert_to_gpu(graph(dtype)).module
        assert ("ex2.approx.ftz.f32" in text) == fast and ("math.exp" in text) == (not fast), dtype


def test_pipelined_iterator_uses_cp_async_ring():
    g = BENCHMARKS["rmsnorm_linear"].fused(1)
    low, ptx = to_ptx(g, options=Options(stages=4, split=1))
    assert low.kernels[0]["notes"]["stages"] == 4
    assert "cp.async.cg.shared.global" in ptx and ", 16;" in ptx  # 16-byte copies, L1 bypassed
    # the schedule's ring: wait for this iteration's group (2 younger ones may stay in
    # flight), one barrier, then issue iteration i + 3: 3 in flight while one is computed
    assert "cp.async.wait_group \t2;" in ptx
    _, ptx0 = to_ptx(g, options=Options(stages=4, split=1, schedule=False))
    assert "cp.async.wait_group \t3;" in ptx0  # the older order: issue, then wait
    _, ptx1 = to_ptx(g, options=Options(stages=1, split=1))
    assert "cp.async.wait_group \t0;" in ptx1 and "cp.async.wait_group \t3;" not in ptx1


def _exp_graph(forloop: int):
    g = mi.new_kernel_graph("expk")
    X = g.new_input((64, 256))
    tb = mi.new_threadblock_graph((4, 1, 1), (128, 1, 1), forloop)
    tX = tb.new_input(X, (0, -1, -1), 1 if forloop > 1 else -1)
    tb.new_output(tb.exp(tX), (0, -1, -1), 1 if forloop > 1 else -1)
    g.mark_output(g.customized([X], tb)[0])
    return g


def test_barrier_count():
    # the optimizer's schedule (default): one barrier after the iteration's loads (copied
    # by all threads), one before the output saver (the exp's tile, read by other threads
    # than wrote it) = 2, what the SchedulePlan counts
    # (with the rows in shared memory: in registers, see test_row_registers, none is needed)
    low, ptx = to_ptx(_exp_graph(1), options=Options(row_registers=False))
    assert low.kernels[0]["notes"]["barriers_plan"] == 2
    assert low.module.count("gpu.barrier") == 2 and ptx.count("bar.sync") == 2
    # schedule off (a barrier after every op): after the (empty) prologue, after the loads,
    # after the op, at the end of the iteration, after the loop = 5; LLVM merges the two
    # back-to-back ones: 4 bar.sync
    low, ptx = to_ptx(_exp_graph(1), options=Options(schedule=False, row_registers=False))
    assert low.module.count("gpu.barrier") == 5 and ptx.count("bar.sync") == 4
    # saved every iteration (the output maps the loop dim), 4-stage ring: per iteration one
    # barrier after the ring's wait (which also frees the slot of the previous iteration)
    # and one before the save: 2 in the loop body (8 where LLVM unrolls the 4 iterations;
    # since the element loop moves 16-byte chunks it no longer does)
    low, ptx = to_ptx(_exp_graph(4))
    assert low.module.count("gpu.barrier") == 2 and ptx.count("bar.sync") in (2, 4 * 2)
    # schedule off: 1 + 3 in the loop body + 1 (unrolled: 1 + 4 x 3 + 1)
    low, ptx = to_ptx(_exp_graph(4), options=Options(schedule=False))
    assert low.module.count("gpu.barrier") == 6 and ptx.count("bar.sync") in (1 + 3 + 1, 1 + 4 * 3 + 1)


def test_reductions_use_warp_shuffles():
    low, ptx = to_ptx(BENCHMARKS["ntrans"].fused(1))
    assert low.kernels[0]["notes"]["warp_reductions"] == 2  # the two rms_norms
    assert ptx.count("shfl.sync.bfly.b32") >= 10  # 5 butterfly steps each


def test_split_for_loop_one_kernel_with_last_block_combine():
    low, ptx = to_ptx(BENCHMARKS["rmsnorm_linear"].fused(1))  # 96 blocks < 3/4 of 132 SMs
    assert [k["name"] for k in low.kernels] == ["rmsnorm_linear_k0_split"]
    (k,) = low.kernels
    assert k["grid"] == [96, 1, 4]
    ws = low.buffers[-1]  # partials, then one arrival counter per block of the μGraph's grid
    assert ws["dtype"] == "f32" and ws["shape"] == [4 * 96 * (2 * 64 + 2 * 1) + 96]
    assert k["args"][-2:] == [{"kind": "buffer", "index": 0}, {"kind": "output", "index": 0}]
    body = entry_body(ptx, "rmsnorm_linear_k0_split")
    assert body.count("fence.acq_rel.gpu") == 2 and "atom.global.add.f32" in body
    assert "mma.sync.aligned.m16n8k16" in body


def test_split_for_loop_two_kernels_and_workspace():
    low = convert_to_gpu(BENCHMARKS["rmsnorm_linear"].fused(1), Options(fold_combine=False))
    assert [k["name"] for k in low.kernels] == ["rmsnorm_linear_k0_partial", "rmsnorm_linear_k0_combine"]
    part, comb = low.kernels
    assert part["grid"] == [96, 1, 4] and comb["grid"] == [96, 1, 1]
    ws = low.buffers[-1]
    assert ws["dtype"] == "f32" and ws["shape"] == [4 * 96 * (2 * 64 + 2 * 1)]
    assert part["args"][-1] == {"kind": "buffer", "index": 0}
    assert comb["args"][-1] == {"kind": "output", "index": 0}
    one = convert_to_gpu(BENCHMARKS["rmsnorm_linear"].fused(1), Options(split=1))
    assert len(one.kernels) == 1 and one.buffers == []
    # gated MLP's 128 blocks already fill the chip: not split
    assert len(convert_to_gpu(BENCHMARKS["gated_mlp"].fused(1)).kernels) == 1


def test_evict_first_only_on_inputs_read_once():
    # W is partitioned by the grid (each element read by one block): evict_first; X and G
    # are replicated over the 96 blocks: plain cp.async
    _, ptx = to_ptx(BENCHMARKS["rmsnorm_linear"].fused(1), options=Options(split=1))
    assert ptx.count("createpolicy.fractional.L2::evict_first") >= 1
    assert ptx.count("cp.async.cg.shared.global.L2::cache_hint") >= 1
    assert "cp.async.cg.shared.global [" in ptx  # X, G
    _, ptx0 = to_ptx(BENCHMARKS["rmsnorm_linear"].fused(1), options=Options(split=1, evict_first=False))
    assert "cache_hint" not in ptx0


def test_gpu_dialect_text():
    low = convert_to_gpu(BENCHMARKS["lora"].fused(1), Options(split=1))
    m = low.module
    assert "gpu.container_module" in m and "gpu.module @lora_kernels" in m
    assert "gpu.dynamic_shared_memory" in m and "nvgpu.device_async_copy" in m
    assert "nvgpu.ldmatrix" in m and "nvgpu.mma.sync" in m
    assert "known_block_size = array<i32: 128, 1, 1>" in m


def test_bundle_round_trip(tmp_path):
    from mirage.runtime import load_bundle

    g = BENCHMARKS["gqa"].fused(1)
    cg = g.compile("sm_90", out_dir=str(tmp_path / "b"))
    b = load_bundle(cg.path)
    m = b.manifest
    assert m.target == "sm_90" and m.format == "mirage-bundle" and m.version == 1
    assert [list(t.shape) for t in m.inputs] == [list(t.shape) for t in g.inputs]
    assert [list(t.shape) for t in m.outputs] == [[2, 256, 64]]
    ptx = b.ptx[m.kernels[0].ptx]
    assert entries(ptx) == [k.name for k in m.kernels]
    assert m.buffers  # the flash-decoding partials between the two graph-defined kernels
    cg.write(str(tmp_path / "copy"))
    assert load_bundle(str(tmp_path / "copy")).manifest.graph_hash == m.graph_hash


def test_sm80_target():
    _, ptx = to_ptx(BENCHMARKS["gated_mlp"].fused(1), "sm_80")
    assert ".target sm_80" in ptx and MMA in ptx
    assert "griddepcontrol" not in ptx  # sm_90's: Options.pdl is off for sm_80


def test_wgmma_for_64_row_tiles_of_a_warpgroup():
    """GatedMLP at batch 8 (64 rows, one 4-warp block per 32 columns of each weight): both
    matmuls run as wgmma m64n32k16 (sm_90a), A from its 128-byte swizzled column blocks and
    B from its 64-byte swizzled tile, both through descriptors (A: 128B mode, 1024-byte
    stride of 8-row groups; B: 64B mode, 512-byte stride), one instruction per 16 rows of
    the 256-row K step, fenced for the async proxy after the copies land; no ldmatrix and
    mma.sync nowhere. Options(wgmma=False), the 1-row batch and sm_80 keep
    mma.sync on sm_90 / sm_80."""
    g = BENCHMARKS["gated_mlp"].fused(8)
    low, ptx = to_ptx(g, "sm_90", disk_cache=False)
    assert ".target sm_90a" in ptx and low.kernels[0]["notes"]["wgmma"] == 2
    body = entry_body(ptx, low.kernels[0]["name"])
    assert body.count("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16") == 2 * 16
    # both matmuls in flight together (one wait, at the loop body's end), X read by both
    # from shared memory
    assert MMA not in body and body.count("wgmma.wait_group.sync.aligned 0") == 1
    assert "ldmatrix" not in body and len(re.findall(r", da, d, [pz], 1, 1, 0, 1;", body)) == 2 * 16
    assert str((1 << 16) | (1024 // 16 << 32) | (1 << 62)) in low.module
    assert "fence.proxy.async.shared::cta" in body.split("bar.sync")[0]  # before the first barrier
    # the descriptor's fixed bits: both offsets 512 / 16 = 32, swizzle mode 2 (64 bytes)
    bits = (32 << 16) | (32 << 32) | (2 << 62)
    assert str(bits - (1 << 64)) in low.module
    _, off = to_ptx(g, "sm_90", Options(wgmma=False), disk_cache=False)
    assert ".target sm_90\n" in off and "wgmma" not in off and MMA in off
    _, one = to_ptx(BENCHMARKS["gated_mlp"].fused(1), "sm_90", disk_cache=False)
    assert "wgmma" not in one and ".target sm_90\n" in one
    _, a100 = to_ptx(g, "sm_80", disk_cache=False)
    assert "wgmma" not in a100 and MMA in a100


def test_ring_copies_unrolled_per_thread():
    """The copies of a ring stage are unrolled per thread where every thread has the same
    number (`thread_chunks`): GatedMLP at batch 8 (128 threads; X's 64x256 tile is 16
    chunks a thread, each weight's 256x32 tile 8) issues 32 cp.async a stage, straight-line,
    at each of its 3 issue sites (2 prologue stages, the loop), no loop over chunks."""
    _, ptx = to_ptx(BENCHMARKS["gated_mlp"].fused(8), "sm_90", disk_cache=False)
    assert ptx.count("cp.async.cg.shared.global") == 3 * 32


def test_programmatic_dependent_launch(tmp_path):
    """Each kernel waits on griddepcontrol before its first global access and lets the next
    launch after its last store, and its manifest entry says so (the runtime launches it
    with programmatic stream serialization); not a kernel whose block takes more than half
    an SM's shared memory (measured slower), nor with Options(pdl=False)."""
    from mirage.runtime import load_bundle

    cg = compile(BENCHMARKS["gqa"].fused(1), "sm_90", out_dir=str(tmp_path / "gqa"))
    m = load_bundle(cg.path).manifest
    assert len(m.kernels) == 2 and all(k.pdl for k in m.kernels)
    for k in m.kernels:
        body = entry_body(cg.ptx, k.name)
        wait, trigger = body.index("griddepcontrol.wait"), body.index("griddepcontrol.launch_dependents")
        assert all(wait < i < trigger for i in (m_.start() for m_ in re.finditer(r"(ld|st|cp\.async)[.\w]*\.global", body)))
        assert body.count("griddepcontrol.wait") == 1 and body[trigger:].split("\n")[1].strip() == "ret;"
    _, ptx = to_ptx(BENCHMARKS["gqa"].fused(1), "sm_90", Options(pdl=False), disk_cache=False)
    assert "griddepcontrol" not in ptx
    low = convert_to_gpu(BENCHMARKS["gated_mlp"].fused(8))
    (k,) = low.kernels
    assert k["smem_bytes"] * 2 > Options().smem_per_sm and not k["pdl"]
    assert "griddepcontrol" not in low.module


def _column_major_relu(rows: int, cols: int, ld: int):
    g = mi.new_kernel_graph("strided")
    X = g.new_input((rows, cols), strides=(1, ld))  # column-major, `ld` between columns
    tb = mi.new_threadblock_graph((2, 1, 1), (128, 1, 1), 1)
    tX = tb.new_input(X, (0, -1, -1), -1)
    tb.new_output(tb.relu(tX), (0, -1, -1))
    g.mark_output(g.customized([X], tb)[0])
    return to_ptx(g)


def test_strided_input_copied_along_its_contiguous_dim():
    # the tile keeps the global's contiguous dim (rows) innermost: 16-byte cp.async chunks
    low, ptx = _column_major_relu(64, 64, 64)
    assert "cp.async.cg.shared.global" in ptx and low.kernels[0]["notes"]["cp_async_inputs"] == 1
    assert low.inputs[0]["strides"] == [1, 64]


def test_strided_input_falls_back_to_element_copies():
    # columns 66 elements apart: a chunk of 8 would not be 16-byte aligned
    low, ptx = _column_major_relu(64, 64, 66)
    assert "cp.async" not in ptx and low.kernels[0]["notes"]["cp_async_inputs"] == 0


def test_call_without_gpu_raises_clear_error(monkeypatch):
    import mirage.lower as L

    monkeypatch.setattr(L, "_gpu_available", lambda: False)
    g = BENCHMARKS["ntrans"].fused(1)
    with pytest.raises(RuntimeError, match=r"g\.evaluate"):
        g(inputs=[None, None, None])


def test_too_much_shared_memory_is_a_clear_error():
    g = BENCHMARKS["gated_mlp"].fused(1)
    with pytest.raises(LoweringError, match=r"\[smem\]"):
        convert_to_gpu(g, Options(smem_capacity=16 * 1024))


def test_convert_pass_on_mlir_module():
    from mirage.mlir.importer import _context
    from mirage.mlir.passes.convert_mirage_to_gpu import ConvertMirageToGPU
    import mlir.ir as ir

    text = BENCHMARKS["gated_mlp"].fused(1).to_mlir()
    with _context() as ctx:
        m = ir.Module.parse(text, ctx)
        ConvertMirageToGPU().run(m.operation, **ConvertMirageToGPU.parse_options({}))
        out = str(m)
    assert "gpu.func @gated_mlp_k0" in out and "nvgpu.mma.sync" in out and "kn." not in out
    plan = json.loads(re.search(r'mirage.launch = "(.*?)"\}?', out).group(1).replace("\\22", '"'))
    assert plan["kernels"][0]["grid"] == [128, 1, 1]


def test_tile_offsets_are_the_optimizers_layout_offsets():
    # the lowering's address arithmetic (constant-folded on int coordinates) is
    # TileLayout.offset: copies, ldmatrix and element loops agree with the plan
    import itertools

    from mirage.lower.kernel_plan import Tile
    from mirage.lower.emitter import Emitter
    from mirage.optimize import TileLayout

    for shape, elt, item, inner, sw in [((16, 64), "f16", 2, 1, 128), ((64, 32), "f16", 2, 1, 64),
                                        ((8, 16), "f16", 2, 1, 32), ((4, 8, 64), "f16", 2, 2, 128),
                                        ((4, 8, 64), "f16", 2, 1, 0), ((2, 16, 64), "f32", 4, 1, 64),
                                        ((32, 64), "bf16", 2, 0, 128), ((16, 80), "f16", 2, 1, 32),
                                        ((2, 8, 96), "f16", 2, 2, 64), ((16, 80), "f16", 2, 0, 32)]:
        lay = TileLayout("t", shape, elt, inner, sw)
        tile = Tile(shape, elt, item, inner=inner, swizzle=sw)
        e = Emitter()
        for idx in itertools.product(*(range(n) for n in shape)):
            assert tile.offset_of(e, list(idx)) == lay.offset(idx), (shape, inner, sw, idx)
        assert not e.body  # all folded


def test_wide_swizzled_rows_are_stored_as_swizzle_atoms():
    # rows of 256 bytes under the 128-byte swizzle: two column blocks [rows, 64], each
    # row-major with 128-byte rows (what a wgmma descriptor reads); every element has its
    # own slot, in the bank TileLayout.offset puts it in
    import itertools

    from mirage.lower.kernel_plan import Tile
    from mirage.lower.emitter import Emitter
    from mirage.optimize import TileLayout

    shape = (16, 128)
    tile, lay = Tile(shape, "f16", 2, swizzle=128), TileLayout("t", shape, "f16", 1, 128)
    assert tile.atom == 64 and tile.mtype2d.startswith("memref<32x64xf16")
    assert Tile(shape, "f16", 2, swizzle=64).atom == 0 and Tile((16, 64), "f16", 2, swizzle=128).atom == 0
    e = Emitter()
    offs = {}
    for r, c in itertools.product(range(16), range(128)):
        o = tile.offset_rc(e, r, c)
        offs[o] = (r, c)
        assert o // (16 * 64) == c // 64 and (o % (16 * 64)) // 64 == r  # block c // 64, row r in it
        assert (o - lay.offset((r, c))) * 2 % 128 == 0
    assert sorted(offs) == list(range(16 * 128)) and not e.body


def _mn_major_address(k: int, n: int, swizzle: int, lead: int, stride: int) -> int:
    """The byte a wgmma reads for element (k, n) of an MN-major 16-bit B operand under a
    swizzle of `swizzle` bytes, descriptor offsets `lead` and `stride` (PTX ISA, "Shared
    Memory Matrix Layout": ((8, S/16, m), (8, k)) : ((1, 8, LBO), (S/2, SBO)) in elements,
    then Swizzle<log2(S/16), 4, 3> on the byte address)."""
    per = swizzle // 2  # elements of one swizzle row
    b = 2 * (n % per) + (n // per) * lead + (k % 8) * swizzle + (k // 8) * stride
    bits = (swizzle // 16).bit_length() - 1
    return b ^ (((b >> 7) & ((1 << bits) - 1)) << 4)


@pytest.mark.parametrize("rows,cols,swizzle", [(64, 80, 32), (16, 80, 32), (64, 96, 64), (64, 96, 32),
                                               (64, 256, 128), (64, 128, 128), (64, 64, 128), (32, 16, 32),
                                               (64, 32, 64)])
def test_b_tiles_are_where_the_wgmma_descriptor_reads(rows, cols, swizzle):
    # the lowering's offsets of a [K, N] tile (copies write there) against the hardware's
    # reading of the descriptor it builds for it: every element where wgmma looks for it,
    # for rows stored whole (one swizzle row) or as column blocks (`Tile.atom`: 80 = 5 x 16
    # under the 32-byte swizzle, 96 = 3 x 32 under the 64-byte one, 256 = 2 x 128)
    from mirage.lower.emitter import Emitter
    from mirage.lower.kernel_plan import Tile

    tile = Tile((rows, cols), "f16", 2, swizzle=swizzle)
    assert bool(tile.atom) == (cols * 2 > swizzle)
    pitch, lead, stride = tile.mn_major_offsets()
    e = Emitter()
    for k in range(rows):
        for n in range(cols):
            assert 2 * tile.offset_rc(e, k, n) == _mn_major_address(k, n, swizzle, lead, stride), (k, n)
            if n % 8 == 0:  # ldmatrix's row addresses in the 2-d view agree
                r, c = tile.ldm_index(e, k, n)
                assert r * (tile.atom or tile.ld) + c == tile.offset_rc(e, k, n), (k, n)
    assert not e.body


def test_attention_of_head_dim_80_runs_both_matmuls_on_warpgroups():
    # MCFuser's S6 (head dim 80: V's rows of 160 bytes) in 64-row tiles: V in 32-byte
    # swizzle atoms, so that P @ V runs as wgmma m64n80k16 too (it ran on mma.sync)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import attention_tilings

    lo = convert_to_gpu(attention_tilings.graph("S6", 64, 64))
    assert "m64n64k16" in lo.module and "m64n80k16" in lo.module and "nvgpu.mma.sync" not in lo.module


def test_optimizer_plan_is_consumed():
    g = BENCHMARKS["gated_mlp"].fused(1)
    on = convert_to_gpu(g).kernels[0]
    off = convert_to_gpu(g, Options(layout=False, schedule=False, smem_plan=False)).kernels[0]
    # smem plan: dead tiles' space reused; layout: swizzled operands instead of padded rows
    assert on["smem_bytes"] < off["smem_bytes"]
    assert on["notes"]["swizzled"] >= 3 and off["notes"]["swizzled"] == 0
    nt = BENCHMARKS["ntrans"].fused(1)
    a = convert_to_gpu(nt, Options(row_registers=False)).kernels[0]["smem_bytes"]
    b = convert_to_gpu(nt, Options(smem_plan=False, row_registers=False)).kernels[0]["smem_bytes"]
    assert a < b
    # schedule: fewer barriers than one after every op
    lo_on = convert_to_gpu(g).module.count("gpu.barrier")
    lo_off = convert_to_gpu(g, Options(schedule=False)).module.count("gpu.barrier")
    assert lo_on < lo_off


# GatedMLP search candidate c3 (benchmarks/results/profile_select.md): X tile 8x16 (32-byte
# rows, swizzle 32 with the layout plan), W tiles 16x64, for-loop 256 split 8 ways
C3_GATED_MLP = """
module {
  func.func @gated_mlp(%arg0: tensor<8x4096xf16>, %arg1: tensor<4096x4096xf16>, %arg2: tensor<4096x4096xf16>) -> tensor<8x4096xf16> {
    %0 = kn.graph_def (%arg0, %arg1, %arg2) grid [64, 1, 1] block [128, 1, 1] forloop 256 dimx 64 : (tensor<8x4096xf16>, tensor<4096x4096xf16>, tensor<4096x4096xf16>) -> tensor<8x4096xf16> {
    ^bb0(%a0: tensor<8x4096xf16>, %a1: tensor<4096x4096xf16>, %a2: tensor<4096x4096xf16>):
      %b0 = tb.input %a0 map <i -> 1> : tensor<8x4096xf16> -> tensor<8x16xf16>
      %b1 = tb.input %a1 map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<16x64xf16>
      %b2 = tb.input %a2 map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<16x64xf16>
      %b3 = tb.matmul %b0, %b1 : (tensor<8x16xf16>, tensor<16x64xf16>) -> tensor<8x64xf16>
      %b4 = tb.matmul %b0, %b2 : (tensor<8x16xf16>, tensor<16x64xf16>) -> tensor<8x64xf16>
      %b5 = tb.forloop_accum none %b3 : tensor<8x64xf16> -> tensor<8x64xf16>
      %b6 = tb.forloop_accum none %b4 : tensor<8x64xf16> -> tensor<8x64xf16>
      %b7 = tb.thread_graph (%b5, %b6) : (tensor<8x64xf16>, tensor<8x64xf16>) -> tensor<8x64xf16> {
      ^bb0(%s0: f16, %s1: f16):
        %t0 = th.silu %s0 : f16
        %t1 = th.mul %s1, %t0 : f16
        th.yield %t1 : f16
      }
      tb.output %b7 map <x -> 1> : tensor<8x64xf16>
    }
    return %0 : tensor<8x4096xf16>
  }
}
"""


def _c3_graph():
    from mirage.mlir.importer import parse_mlir

    return parse_mlir(C3_GATED_MLP)[0]


def test_swizzled_chunks_stay_16_byte_aligned_for_every_ilp_layout():
    # every layout the ILP can pick (optimize.layout.candidates) for tile shapes down to
    # 8x16 fp16 (32-byte rows): each 16-byte chunk (cp.async destination, ldmatrix row
    # address) starts 16-byte aligned, stays in its row, and the map is a bijection
    import itertools
    from math import prod

    from mirage.lower.kernel_plan import Tile
    from mirage.lower.emitter import Emitter
    from mirage.optimize import TileLayout
    from mirage.optimize.layout import candidates

    class T:  # the two attributes candidates() reads
        def __init__(self, shape, item):
            self.shape = shape
            self.dtype = type("D", (), {"itemsize": item})()

    seen = set()
    for shape in [(8, 16), (16, 16), (16, 32), (8, 64), (16, 64), (32, 64), (64, 16), (4, 8, 16), (2, 16, 64)]:
        for elt, item in [("f16", 2), ("bf16", 2), ("f32", 4)]:
            for inner, sw in candidates(T(shape, item)):
                seen.add((shape, sw))
                lay = TileLayout("t", shape, elt, inner, sw)
                tile = Tile(shape, elt, item, inner=inner, swizzle=sw)
                n, vec = shape[inner], 16 // item
                offs = set()
                for idx in itertools.product(*(range(d) for d in shape)):
                    o = lay.offset(idx)
                    offs.add(o)
                    if idx[inner] % vec == 0 and n % vec == 0:
                        assert o * item % 16 == 0, (shape, elt, inner, sw, idx)
                        lin = sum(i * s for i, s in zip(idx, lay.strides))
                        assert o // n == lin // n  # the chunk stays in its row
                        if inner == len(shape) - 1:  # ldmatrix / cp.async addresses
                            row = lin // n
                            r, c = tile.ldm_index(Emitter(), row, idx[inner])
                            at = r * (tile.atom or tile.ld) + c  # in the 2-d view
                            assert at * item % 16 == 0 and at == tile.offset_rc(Emitter(), row, idx[inner])
                            # column blocks (`Tile.atom`) move chunks, not banks
                            assert (at - o) * item % 128 == 0
                assert offs == set(range(prod(shape)))
    assert ((8, 16), 32) in seen  # c3's X tile: 32-byte rows, swizzle 32 is a candidate


def test_evict_first_copies_keep_the_ptxas_workaround():
    # ptxas 13.0 miscompiles `cp.async...L2::cache_hint` whose shared address is a
    # register plus a uniform register (LDGSTS [Ra+URb], desc[URb+1] encoded as UR0:UR1
    # when the pair is UR16 or above): "illegal instruction" on c3's split kernel. Every
    # hinted copy must take its shared address from the per-thread register (the address
    # scaled by popc(%lanemask_eq)), never a plain 64-bit operand
    for opts in [Options(), Options(fold_combine=False), Options(split=1)]:
        _, ptx = to_ptx(_c3_graph(), options=opts)
        hinted = re.findall(r"cp\.async\.cg\.shared\.global\.L2::cache_hint \[([^\]]+)\]", ptx)
        assert hinted and all(a == "sa" for a in hinted), hinted[:3]
        assert ptx.count("popc.b32 one, lm") == len(hinted)


def _sass(ptx: str, tmp_path) -> str | None:
    import shutil
    import subprocess

    ptxas = shutil.which("ptxas")
    dis = shutil.which("nvdisasm")
    if not ptxas or not dis:
        return None
    src, cub = tmp_path / "k.ptx", tmp_path / "k.cubin"
    src.write_text(ptx)
    subprocess.run([ptxas, "-arch=sm_90", str(src), "-o", str(cub)], check=True, capture_output=True)
    return subprocess.run([dis, "-c", str(cub)], check=True, capture_output=True, text=True).stdout


def test_c3_sass_reads_only_written_uniform_registers(tmp_path):
    # with ptxas and nvdisasm on PATH: in the machine code of c3's kernels, every
    # LDGSTS that takes a uniform register (shared offset / cache policy pair) reads one
    # the kernel writes (the ptxas bug above reads UR0:UR1, never written)
    _, ptx = to_ptx(_c3_graph())
    sass = _sass(ptx, tmp_path)
    if sass is None:
        pytest.skip("ptxas or nvdisasm not on PATH")
    written = set(re.findall(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?U\w+(?:\.\S+)*\s+(UR\d+)", sass, re.M))
    uses = re.findall(r"LDGSTS[^;]*\[R\d+\+(UR\d+)[^\]]*\], desc\[(UR\d+)\]", sass)
    assert all(a in written and b in written for a, b in uses), uses[:3]
    assert "LDGSTS" in sass


def test_attention_frag_fusion():
    """FlashDecoding's exp(Q@K) stays in the mma fragments: E feeds E@V's A operand and the
    `sum` accumulator from registers (no exp element loop, no warp-row reduction, no S/E
    tiles in shared memory); off, the old lowering."""
    from benchmarks import gqa_fused

    on = convert_to_gpu(gqa_fused(1))
    off = convert_to_gpu(gqa_fused(1), Options(frag_fusion=False))
    k_on, k_off = on.kernels[0], off.kernels[0]
    assert k_on["notes"]["frag_fused"] == 1 and k_on["notes"]["warp_reductions"] == 0
    assert k_on["smem_bytes"] == k_off["smem_bytes"] - 2 * 64 * 64 * 2
    body = on.module.split("gpu.func @gqa_k1")[0]
    # 8 fragments x 4 values per thread, unrolled; the rotated loop runs them for its first
    # iteration before the loop and for the next ones in it
    assert k_on["notes"]["rotated"] and body.count("ex2.approx.ftz.f32") == 2 * 32
    assert body.count("nvgpu.ldmatrix") < off.module.split("gpu.func @gqa_k1")[0].count("nvgpu.ldmatrix")
    assert to_ptx(gqa_fused(1))


def test_variant_bundle_with_split_choices(tmp_path):
    """A variant bundle of a fused μGraph and its reference, the fused one also compiled
    with the other split factors of its for-loop (the runtime times them all on the GPU)."""
    from mirage.lower import compile_variants, tuning_choices
    from mirage.runtime.select import load_variants

    g, ref = BENCHMARKS["rmsnorm_linear"].fused(1), BENCHMARKS["rmsnorm_linear"].reference(1)
    names = [s for s, _ in tuning_choices(g)]
    assert names[:4] == ["", "-split1", "-split2", "-split8"]  # the default splits by 4
    assert "-t512" in names and "-split2-t512" in names  # 96 x 4 blocks of 4 warps: larger blocks too
    nt = BENCHMARKS["ntrans"].fused(1)  # 8 blocks, no loop: larger blocks are worth a try
    assert [s for s, _ in tuning_choices(nt)] == ["", "-t512"]
    idx, bundles = load_variants(compile_variants([("c0", g), ("reference", ref)], str(tmp_path / "v"),
                                                  "reference", tune=True))
    grids = {n: [k.grid for k in b.manifest.kernels] for n, b in bundles}
    assert set(grids) == {"c0" + s for s in names} | {"reference"} and idx["reference"] == "reference"
    assert grids["c0"] == [[96, 1, 4]] and grids["c0-split2"] == [[96, 1, 2]] and grids["c0-split8"] == [[96, 1, 8]]
    assert grids["c0-split1"] == [[96, 1, 1]]
    blocks = {n: [k.block for k in b.manifest.kernels] for n, b in bundles}
    assert blocks["c0-split2-t512"] == [[512, 1, 1]] and blocks["c0"] == [[128, 1, 1]]


def test_row_registers():
    """Row-wise kernels without a for-loop (KernelPlan.rows): 16-byte loads of device
    memory straight into registers, all before any compute; no shared-memory tiles; one
    barrier per reduction whose row spans warps, none otherwise."""
    low, ptx = to_ptx(BENCHMARKS["ntrans"].fused(1))  # one 4096-element row a block, 256 threads
    k = low.kernels[0]
    assert "row_registers" in k["notes"] and k["block"] == [256, 1, 1]
    assert "cp.async" not in ptx and "st.shared.v4" not in ptx
    assert ptx.count("ld.global.v4.b32") == 3 * 2 and ptx.count("st.global.v4.b32") == 2  # 2 chunks a thread
    assert ptx.count("bar.sync") == 2 and k["smem_bytes"] == 2 * 8 * 4  # 2 norms, 8 warps a row
    assert ptx.count("shfl.sync.bfly.b32") == 2 * 5
    first_math = min(ptx.index(x) for x in ("mul.rn.f32", "add.rn.f32", "sub.rn.f32", "div.rn.f32") if x in ptx)
    assert ptx.rindex("ld.global.v4.b32") < first_math  # the loads are all in flight first
    # an element-wise chain on 256-element rows: one warp a block, no barrier, no shared memory
    g = mi.new_kernel_graph()
    X, G = g.new_input((8, 4096)), g.new_input((4096,))
    tb = mi.new_threadblock_graph((8, 16, 1), (128, 1, 1), 1)
    x = tb.new_input(X, (0, 1, -1), -1)
    w = tb.new_input(G, (-1, 0, -1), -1)
    tb.new_output(tb.mul(tb.exp(x), w), (0, 1, -1), -1)
    g.mark_output(g.customized([X, G], tb)[0])
    low, ptx = to_ptx(g)
    assert low.kernels[0]["block"] == [32, 1, 1] and low.kernels[0]["smem_bytes"] == 0
    assert "bar.sync" not in ptx and "shared" not in ptx.split(".entry")[1]
    assert ptx.count("ld.global.v4.b32") == 2 and ptx.count("st.global.v4.b32") == 1
