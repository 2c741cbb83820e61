"""The lowering of MCFuser's chains (search/mbci.py) with the first GEMM's result kept in the
mma fragments: matmul -> matmul (a GEMM chain) and matmul -> thread graph of unary ops ->
matmul (exp(s * Q @ K) of attention), where each warp owns 16 whole rows of C; the chain
search's warp-resident seeds, and its block count after the lowering's loop split.
The kernels' numbers are checked on the GPU (benchmarks/mbci.py --run: every bundle
against fp32 PyTorch); here the plan and the emitted IR."""
import math
import os
import sys

import numpy as np
import pytest

import mirage as mi
from mirage.core.graph import GraphError
from mirage.lower import LoweringError, Options, convert_to_gpu, to_ptx
from mirage.lower.convert import plan_graph
from mirage.lower.emitter import fmt_f32
from mirage.lower.kernel_plan import CLUSTER_MAX, _unary_chain, choose_split
from mirage.search.build import build
from mirage.search.config import SearchConfig
from mirage.search.mbci import RESIDENT, RESIDENT_TILE, SEEDS, Tiling, blocks, find_chain, launched_blocks, \
    plan_of, resident_key, space, warp_resident, with_resident


def chain(b, M, N, K, H, attn=False):
    g = mi.new_kernel_graph("chain")
    A, B, D = g.new_input((b, M, K)), g.new_input((b, K, N)), g.new_input((b, N, H))
    if attn:
        e = g.exp(g.mul_scalar(g.matmul(A, B), 0.125))
        g.mark_output(g.div(g.matmul(e, D), g.reduction(e, 2)))
    else:
        g.mark_output(g.matmul(g.matmul(A, B), D))
    return g


def tiled(g, tm, tl, th, kc=0):
    c = find_chain(g)
    return build(g, plan_of(c, Tiling("n", tm, tl, th, kc), SearchConfig()))


def kernel(g, **kw):
    (k,) = plan_graph(g, Options(split=1, **kw)).kernels
    return k.plan


@pytest.mark.parametrize("attn", [False, True])
def test_resident_chain_keeps_c_in_registers(attn):
    g = tiled(chain(2, 128, 256, 64, 64, attn), 64, 64, 64)
    on, off = kernel(g), kernel(g, frag_fusion=False)
    assert on.notes["frag_fused"] == 1 and "fragments fused" in on.describe()
    mm0 = g.ops[0].body.ops[0]
    assert mm0.kind == "matmul" and id(mm0.outputs[0]) in on.reg_tiles and id(mm0.outputs[0]) not in on.tiles
    assert id(mm0.outputs[0]) in off.tiles and on.smem < off.smem
    if attn:  # exp(s x) on the fragments, its row sums by quad shuffles: no warp-row reduction
        assert on.notes["warp_reductions"] == 0
        th = g.ops[0].body.ops[1]
        assert th.kind == "thread_graph" and _unary_chain(th) and id(th) in on.fused_unary


def test_resident_chain_ir():
    """64 x 64 x 64 tiles, 4 warps: C's fragments rounded to f16 are the second mma's A
    operand (from_elements, no ldmatrix of C, no barrier between the GEMMs)."""
    low = convert_to_gpu(tiled(chain(1, 64, 128, 64, 64), 64, 64, 64), Options(split=1, wgmma=False))
    loop = low.module.split("iter_args", 1)[1]
    first, second = loop.split("vector.from_elements", 1)
    assert "nvgpu.mma.sync" in first and "gpu.barrier" not in first.split("nvgpu.mma.sync", 1)[1]
    assert "vector<4x2xf16>" in second.split("\n", 1)[0] and "gpu.barrier" not in second.split("scf.yield")[0]
    assert low.kernels[0]["notes"]["mma"] == 2 and low.kernels[0]["notes"]["frag_fused"] == 1
    low_a = convert_to_gpu(tiled(chain(1, 64, 128, 64, 64, True), 64, 64, 64), Options(split=1))
    # 64 x 64 scores over 4 warps: 32 values a thread, exp applied once each, unrolled, as
    # 2^(x (0.125 log2 e)): the thread graph's scale folded into exp's one product
    assert low_a.module.count("ex2.approx.ftz.f32") == 32
    assert fmt_f32(0.125 * math.log2(math.e)) in low_a.module


@pytest.mark.parametrize("tl,th", [(64, 64), (128, 128), (128, 16)])
def test_resident_chain_runs_warpgroup_matmuls(tl, th):
    """On sm_90 both GEMMs of a 64-row warp-resident chain are wgmma: the first's A by
    ldmatrix (K = 128 < A_DESC_MIN_K), the second's A the first's fragments (no ldmatrix of
    C), B tiles of 128-byte rows and of 256-byte rows stored as two swizzle atoms
    (`Tile.atom`), read through descriptors whose leading offset is the distance between
    the atoms."""
    g = tiled(chain(1, 64 * 64, 256, 128, th), 64, tl, th)  # 64 blocks: not widened (`block_threads`)
    p = kernel(g)
    assert p.notes["wgmma"] == 2 and p.notes["frag_fused"] == 1
    b = p.tiles[id(g.ops[0].body.inputs[1].stensor)]  # B's ring tile [128, tl]
    assert b.swizzle == 128 and b.atom == (64 if tl == 128 else 0)
    low = convert_to_gpu(g, Options(split=1))
    before, loop = low.module.split("iter_args", 1)
    loop = loop.split("scf.yield", 1)[0]
    first, second = loop.split("wgmma.commit_group", 1)
    assert first.count("wgmma.mma_async.sync.aligned.m64n%dk16" % tl) == 128 // 16
    assert second.count("wgmma.mma_async.sync.aligned.m64n%dk16" % th) == tl // 16
    assert "nvgpu.ldmatrix" not in second.split("llvm.inline_asm", 1)[0]
    if not low.kernels[0]["notes"].get("rotated"):
        assert tl == 128  # two 64 x 128 fragment sets and A's: over ROTATE_FRAG_REGS
        assert "nvgpu.ldmatrix" in first
        # C is read right after its matmul; E's group stays in flight to the body's end
        assert "wgmma.wait_group" in second.split("wgmma.mma_async", 1)[0]
        assert "wgmma.wait_group" not in second.split("wgmma.commit_group", 1)[1].split('"', 1)[0]
        return
    # rotated (`BlockLowering._rotated_loop`): the next iteration's C = A @ B, then this
    # one's E += C @ D, both in flight; the wait for all but the last group (C), C's
    # rounding while E runs, then the wait for E. A's fragments are loaded before the loop.
    assert "nvgpu.ldmatrix" in before and "nvgpu.ldmatrix" not in loop
    asm = [x.split('"', 1)[0] for x in loop.split("llvm.inline_asm has_side_effects \"")[1:] if "wgmma" in x]
    # E's first k-step accumulates except in the loop's first iteration (an i32 operand)
    kinds = ["E" if "setp.ne.b32 z, $" in x else "C" if "wgmma.mma_async" in x else x for x in asm]
    assert kinds == ["C", "E", "wgmma.wait_group.sync.aligned 1;", "wgmma.wait_group.sync.aligned 0;"], kinds
    # a fresh C: the first k-step ignores the accumulators (scale-d z false)
    assert "setp.eq.b32 z, one, 0;" in asm[0] and "z, 1, 1, 1;" in asm[0]


def test_chain_not_fused_where_warps_share_rows():
    """32 rows for 4 warps: no warp owns whole rows of C, which goes through shared memory."""
    on = kernel(tiled(chain(1, 128, 256, 64, 64), 32, 64, 64))
    assert not on.notes.get("frag_fused")


def test_unary_chain_only_chains_unary_ops():
    body = tiled(chain(1, 64, 128, 64, 64, True), 64, 64, 64).ops[0].body
    tgs = [op for op in body.ops if op.kind == "thread_graph"]
    assert [_unary_chain(op) for op in tgs] == [True, False]  # exp(s x); the division (two inputs)
    assert not any(_unary_chain(op) for op in body.ops if op.kind != "thread_graph")


@pytest.mark.parametrize("shape", [(1, 1024, 1024, 128, 128), (12, 512, 512, 64, 64), (1, 512, 256, 64, 64)])
def test_launched_blocks_is_the_lowerings_split(shape):
    g = chain(*shape, attn=shape[0] == 12)
    c = find_chain(g)
    cfg = SearchConfig()
    for t in space(c, cfg, {}, split_aware=True)[:40]:
        try:
            body = build(g, plan_of(c, t, cfg)).ops[0].body
        except GraphError:  # eq. (1) admits up to 1.2x the shared memory; the builder checks it
            continue
        nb = int(np.prod(body.grid_dim))
        assert launched_blocks(c, t, cfg.sms) == nb * choose_split(body, Options(sms=cfg.sms)), t


def test_seeds_add_warp_resident_tilings():
    g = chain(8, 1024, 1024, 128, 128)
    c = find_chain(g)
    cfg = SearchConfig()
    cands = space(c, cfg, {}, split_aware=True)
    explored = [t for t in cands if not warp_resident(c, t, 4)][:SEEDS]
    seeds = with_resident(c, cands, explored, cfg)
    # (the widest E tile is the first resident one here; 8 x 16 row blocks of 64 fill the
    # SMs: no seed of two warpgroups)
    assert seeds[:SEEDS] == explored and len(seeds) == SEEDS + RESIDENT
    extra = seeds[SEEDS:]
    assert all(warp_resident(c, t, 4) and t.tl <= RESIDENT_TILE and t.th <= RESIDENT_TILE for t in extra)
    # one block an SM (8 x 16 = 128 blocks), the largest loop tile: the fastest on the H100
    assert extra[0] == Tiling("n", 64, 128, 128)
    assert all(resident_key(c, extra[0], cfg.sms) < resident_key(c, t, cfg.sms) for t in extra[1:])
    # already among the explored: not added twice
    assert with_resident(c, cands, extra + explored[:2], cfg)[:4] == extra + explored[:2]


def test_split_chain_combines_in_a_cluster():
    # G4's 64 x 128 x 128 tiling: 8 x 2 blocks, 4 iterations over n; the lowering splits the
    # loop 4 ways (64 blocks, half the SMs), the 4 blocks of a split group are one cluster
    g = tiled(chain(1, 512, 512, 256, 256), 64, 128, 128)
    low, ptx = to_ptx(g, disk_cache=False)
    (k,) = low.kernels
    assert k["grid"] == [1, 8, 2 * 4] and k["block"] == [128, 1, 1]
    assert k["notes"]["split"] == k["notes"]["cluster"] == 4 and k["notes"]["wgmma"] == 2
    assert ".reqnctapercluster 1, 1, 4" in ptx and "barrier.cluster.arrive;" in ptx and "barrier.cluster.wait;" in ptx
    # no arrival counter and no last-block combine: each block sums 16 of E's 64 rows, read
    # from the 4 blocks' shared memory (no workspace), then waits until the others have read its own
    assert "atom.global" not in ptx and "fence.acq_rel.gpu" not in ptx and low.buffers == []
    before, combine = ptx.split("barrier.cluster.wait;", 1)
    assert "st.global" not in before.rsplit("wgmma.wait_group", 1)[1]  # the partials stay on chip
    assert before.count("st.shared.v2.b32") >= 64 * 128 // 128 // 2
    assert combine.count("mapa.shared::cluster.u64") == 4 and combine.count("ld.shared::cluster.v4.f32") == 4
    assert "ld.global" not in combine and "st.global.v2.b32" in combine
    last_read = combine.rsplit("ld.shared::cluster.v4.f32", 1)[1]
    assert "barrier.cluster.arrive.relaxed.aligned;" in last_read and "barrier.cluster.wait;" in last_read
    # K = 256: C = A @ B reads A [64, 256] through a descriptor (K-major, four 128-byte
    # swizzled column blocks of 64 x 128 bytes: 32 bytes a k-step, then the next block)
    first = ptx.split("wgmma.commit_group", 1)[0]
    # (the first k-step's scale-d predicate false: the accumulators need no zeros)
    assert "ldmatrix" not in ptx and first.count(", 1, 1, 0, 1;") == 256 // 16 and first.count("z, 1, 1, 0, 1;") == 1 \
        and "setp.eq.b32 z, one, 0;" in first
    steps = [int(x.split(";", 1)[0]) for x in first.split("add.s64 da, da, ")[1:]]
    assert steps == ([2, 2, 2, 64 * 128 // 16 - 6] * 4)[:-1]  # 16-byte units
    # without clusters (or a group over CLUSTER_MAX blocks): the last block combines
    (f,) = convert_to_gpu(g, Options(clusters=False, split=4)).kernels
    assert "cluster" not in f["notes"] and f["notes"]["split"] == 4
    (w,) = convert_to_gpu(tiled(chain(1, 512, 1024, 256, 64), 64, 16, 64), Options(split=16)).kernels
    assert w["notes"]["split"] == 16 > CLUSTER_MAX and "cluster" not in w["notes"]


def test_attention_split_combines_in_a_cluster_whose_first_block_divides():
    # E / (row sums) runs after the loop on whole rows: the 8 blocks of a cluster sum their
    # shares of the rows of E and of the row sums over the partials in their shared memory
    # and store them into the first block's tiles of E and the row sums (distributed shared
    # memory); after a second cluster barrier the first block divides and saves (on the GPU:
    # benchmarks/results/mbci.md, S7-S9's 64-row tilings)
    g = tiled(chain(1, 64, 1024, 64, 64, True), 64, 64, 64)
    low, ptx = to_ptx(g, disk_cache=False)
    (k,) = low.kernels
    assert k["grid"] == [1, 1, 8] and k["notes"]["split"] == k["notes"]["cluster"] == 8 and low.buffers == []
    p = plan_graph(g, Options()).kernels[0].plan
    assert p.cluster_post
    ends = [t.offset + t.bytes for _, t in p.buffers() if t not in p.parts.values()]
    reg_part = next(t for t in p.parts.values() if t not in p.scratch.values())
    assert reg_part.offset >= max(ends)  # not over the tiles the first block's epilogue reads
    _, combine = ptx.split("barrier.cluster.wait;", 1)
    shares, after = combine.split("barrier.cluster.wait;", 1)
    # E's rows four f32 at a time, the row sums one at a time, from each of the 8 blocks
    assert shares.count("ld.shared::cluster.v4.f32") == 8 and shares.count("ld.shared::cluster.f32") == 8
    assert shares.count("st.shared::cluster.b16") == 4 + 1 and "st.global" not in shares
    assert "shared::cluster" not in after and "st.global" in after
    # without clusters the last block combines through a workspace in device memory
    (f,) = convert_to_gpu(g, Options(clusters=False)).kernels
    assert "cluster" not in f["notes"] and f["notes"]["split"] == 4


def test_the_accumulating_matmul_runs_on_into_the_next_iteration():
    # G12's pick (a ring of 3 stages, one warpgroup): E += C @ D is left in flight at the end
    # of an iteration; the next iteration's first matmul (C = A @ B, its wait inside) waits
    # for it, and the ring refills the slot of two iterations back (one copy in flight, so
    # the top of the loop waits for all of them). A ring of 2 keeps the wait at the body's end
    g = tiled(chain(8, 1024, 1024, 128, 128), 64, 128, 128)
    (k,) = plan_graph(g, Options()).kernels
    assert (k.plan.S, k.plan.nthreads) == (3, 128)

    def loop_and_after(opts):
        text = str(convert_to_gpu(g, opts).module)
        start = text.index("iter_args")
        end = text.index("scf.yield", start)
        return text[start:end], text[end:]

    body, after = loop_and_after(Options())
    assert body.count("wgmma.mma_async") == 16 and body.count("wgmma.wait_group.sync.aligned 0") == 1
    assert body.count("nvvm.cp.async.wait.group") == 1 and "nvvm.cp.async.wait.group 0" in body
    assert after.index('"wgmma.wait_group.sync.aligned 0;", ""') < after.index("gpu.barrier")  # before E is read
    body2, _ = loop_and_after(Options(stages=2))
    assert body2.count("wgmma.wait_group.sync.aligned 0") == 2


def test_seeds_add_the_widest_e_tile():
    # G4: the resident seeds recompute C for 16 or 8 E tiles; the widest E tile (128) in 16
    # blocks is split 4 ways in clusters
    c = find_chain(chain(1, 512, 512, 256, 256))
    cfg = SearchConfig()
    seeds = with_resident(c, space(c, cfg, {}, split_aware=True), [], cfg)
    assert seeds[-1] == Tiling("n", 64, 128, 128) and len(seeds) == RESIDENT + 1
    assert blocks(c, seeds[-1]) == 16 and launched_blocks(c, seeds[-1], cfg.sms) == 64


def test_eight_warps_run_two_warpgroups_of_wgmma():
    # G10's 128 x 128 x 64 tiling lowered with 256 threads: 16 rows a warp, both matmuls
    # run as warpgroup matmuls, one per warpgroup, with C kept in the fragments; 8 x 2
    # blocks of 8 loop steps split 4 ways in clusters
    g = tiled(chain(1, 1024, 1024, 128, 128), 128, 128, 64)
    (k,) = plan_graph(g, Options(threads=256)).kernels
    assert k.plan.block == (256, 1, 1) and len(k.plan.wgmma) == 2 and k.plan.notes["frag_fused"] == 1
    assert (k.plan.split, k.plan.cluster) == (4, 4)
    _, ptx = to_ptx(g, options=Options(threads=256), disk_cache=False)
    assert ".maxntid 256, 1, 1" in ptx and ptx.count("wgmma.mma_async") >= 2


def test_cost_counts_the_cluster_split_of_warp_resident_tilings():
    # G4: 64 x 128 x 128 (16 blocks, 16 rows a warp) launches 64 blocks split 4: costed as
    # 64 blocks of one iteration, plus its partials; 32 x 128 x 128 (8 rows a warp) as before
    from mirage.search.cost import cluster_split_of, cost

    g = chain(1, 512, 512, 256, 256)
    c, cfg = find_chain(g), SearchConfig()
    wide = build(g, plan_of(c, Tiling("n", 64, 128, 128), cfg))
    thin = build(g, plan_of(c, Tiling("n", 32, 128, 128), cfg))
    assert cluster_split_of(wide.ops[0].body) == 4 and cluster_split_of(thin.ops[0].body) == 1
    (k,) = cost(wide).kernels
    assert k.blocks == 64 and k.time < cost(thin).time
    assert choose_split(wide.ops[0].body, Options(clusters=False)) == 1  # no cluster: not split at all


@pytest.mark.parametrize("shape,first", [((1, 1024, 1024, 128, 128), (64, 128, 16)),   # G10: 16 x 8 blocks
                                         ((4, 1024, 1024, 128, 128), (64, 128, 64)),   # G11: 64 x 2
                                         ((1, 2048, 512, 128, 128), (64, 128, 32))])   # G9: 32 x 4
def test_resident_seed_fills_one_wave(shape, first):
    """E's tile is the smallest that fills the SMs once without a loop split (hand-counted:
    128 blocks on 132 SMs)."""
    c = find_chain(chain(*shape))
    cfg = SearchConfig()
    t = with_resident(c, space(c, cfg, {}, split_aware=True), [], cfg)[0]
    assert (t.tm, t.tl, t.th) == first and blocks(c, t) == 128 and launched_blocks(c, t, cfg.sms) == 128


def test_cluster_parts_stay_clear_of_scratch_accumulators():
    # a split loop with a register accumulator (X @ W) and a shared-memory one (X's chunks
    # summed): each block's partials wait in its shared memory, the register one's padded
    # f32 copy laid over the loop's tiles but not over the scratch accumulator, which is its
    # own partial (on the GPU: benchmarks/cluster_combine_check.py)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    from cluster_combine_check import graph

    g = graph()
    tb = g.ops[0].body
    (k,) = plan_graph(g, Options(split=4)).kernels
    p = k.plan
    assert (p.split, p.cluster, p.ws_size) == (4, 4, 0)
    mm_acc, x_acc = (op for op in tb.ops if op.kind == "forloop_accum")
    assert id(mm_acc) in p.reg_acc and p.parts[id(x_acc)] is p.scratch[id(x_acc)]
    reg, scr = p.parts[id(mm_acc)], p.scratch[id(x_acc)]
    assert reg.ld == 64 + 8 and (reg.offset + reg.bytes <= scr.offset or scr.offset + scr.bytes <= reg.offset)
    assert max(reg.offset + reg.bytes, scr.offset + scr.bytes) <= p.smem
    low, ptx = to_ptx(g, options=Options(split=4), disk_cache=False)
    assert low.buffers == [] and ptx.count("ld.shared::cluster.v4.f32") == 2 * 4


def _staged_loop(module: str) -> str:
    """The outer for-loop's body of a lowered chain up to its yield, nested loops included."""
    body = module.split("iter_args", 1)[1]
    depth, out = 0, []
    for line in body.splitlines()[1:]:
        s = line.strip()
        if s == "}" and depth == 0:
            break
        depth += s.endswith("{") - (s == "}" or s.startswith("} "))
        out.append(s)
    return "\n".join(out)


def test_staged_first_gemm_streams_chunks_of_k():
    """A and B staged in chunks of 64 of K ([stage]): the chain's first GEMM reads A [64, 256]
    and B [256, 64] through a ring inside the loop over n (`KStage`, `mma_staged`): the
    tiles are rings of swizzled chunks, the matmul an inner loop of cp.async copies and a
    warpgroup matmul (wgmma, B through its descriptor) on each chunk (mma.sync steps on padded
    chunks without wgmma), C still the second GEMM's fragments; the kernel assembles without
    spills. On wgmma a chunk's matmul runs on while the next chunk is waited for and copied
    (`wgmma.wait_group 1`, A through its descriptor too), so the copies run 2 chunks ahead
    of 4 slots, not 3. With one iteration a block (split 2), E's copies land behind the
    chunks' first wait."""
    from mirage.lower import ptxas

    whole, g = tiled(chain(1, 64, 128, 256, 64), 64, 64, 64), tiled(chain(1, 64, 128, 256, 64), 64, 64, 64, kc=64)
    assert "{k_chunk = 64 : i64}" in g.to_mlir() and g.ops[0].body.smem_bytes() < whole.ops[0].body.smem_bytes()
    whole, staged = kernel(whole, threads=128), kernel(g, threads=128)
    mm0 = g.ops[0].body.ops[0]
    assert not whole.kstage and list(staged.kstage) == [id(mm0)]
    ks = staged.kstage[id(mm0)]
    assert ks.kc == 64 and ks.stages == 4 and id(mm0) not in staged.wgmma and staged.notes["k_staged"] == "64x4"
    assert id(ks.sub) in staged.wgmma and "staged in chunks of 64 x 4, wgmma" in staged.describe()
    ta, tb_ = staged.tiles[id(mm0.inputs[0])], staged.tiles[id(mm0.inputs[1])]
    assert ta.shape == (1, 64, 64) == tb_.shape and ta.stages == 4 == tb_.stages and ta.swizzle == 128 == tb_.swizzle
    assert staged.notes["frag_fused"] == 1 and staged.smem < whole.smem
    for wg in (True, False):
        low = convert_to_gpu(g, Options(split=1, threads=128, wgmma=wg))
        loop = _staged_loop(low.module)
        before, inner = loop.split("scf.for", 1)  # the chunks' loop: a wait, copies, 4 k-steps of 8 tiles
        ahead = 2 if wg else 3  # chunks issued before the chunks' loop
        assert before.rsplit("gpu.barrier", 1)[1].count("cp.async.commit.group") == ahead
        chunk = inner.split("scf.yield", 1)[0]
        assert f"nvvm.cp.async.wait.group {ahead - 1}" in chunk
        assert (chunk.count("wgmma.mma_async"), chunk.count("nvgpu.mma.sync")) == ((4, 0) if wg else (0, 32))
        assert (chunk.count("wgmma.wait_group.sync.aligned 1"), chunk.count("wait_group.sync.aligned 0")) == \
            ((1, 0) if wg else (0, 0))
        assert not wg or "nvgpu.ldmatrix" not in chunk  # A's chunk through a descriptor
        after = inner.split("scf.yield", 1)[1]  # then C's fragments are E's A operand: no ldmatrix of C
        assert ("wgmma.mma_async" if wg else "nvgpu.mma.sync") in after
        assert not wg or "nvgpu.ldmatrix" not in after.split("wgmma.mma_async", 1)[0]
        assert not wg or after.index("wgmma.wait_group.sync.aligned 0") < after.index("wgmma.mma_async")
    assert kernel(g, threads=128, wgmma=False).tiles[id(mm0.inputs[0])].ld == 64 + 8  # padded rows for ldmatrix
    before = _staged_loop(convert_to_gpu(g, Options(split=2, threads=128)).module).split("scf.for", 1)[0]
    assert "cp.async.wait.group" not in before and before.count("cp.async.commit.group") == 3  # E's, chunks 0-1
    use = ptxas.usage(to_ptx(g, "sm_90", Options(split=1, threads=128))[1])
    if use is not None:  # no spills, and the chunks' matmuls do overlap
        assert all(u["spill_stores"] == 0 and u["wgmma_serialized"] is None for u in use.values()), use
    with pytest.raises(LoweringError, match=r"\[stage\].*tensor cores"):  # the μGraph's staging is not optional
        kernel(g, threads=128, tensor_cores=False)


def test_matmul_staged_where_whole_tiles_do_not_fit():
    """MCFuser's G6 rows (K = 1024) in 64 x 64 x 64 tiles, a μGraph for a target of more
    shared memory (kn.smem_capacity 512 KB: A [64, 1024] and B [1024, 64] are 256 KB),
    planned for the H100 (227 KB): the plan stages the first GEMM in chunks of K_CHUNK on
    its own, and the kernel fits."""
    from mirage.core.graph import KNGraph
    from mirage.lower.kernel_plan import K_CHUNK
    from mirage.search.build import build_ops

    ref = chain(1, 64, 128, 1024, 64)
    g = KNGraph("big")
    g.smem_capacity = 512 * 1024
    ins = [g.new_input(t.shape, dtype=t.dtype) for t in ref.inputs]
    ops, outs = plan_of(find_chain(ref), Tiling("n", 64, 64, 64), SearchConfig(smem_capacity=512 * 1024))
    build_ops(g, ins, ops)
    for k in outs:
        g.mark_output(ins[k])
    tb = g.ops[0].body
    assert tb.smem_bytes() > Options().smem_capacity
    p = kernel(g, threads=128)
    mm0 = tb.ops[0]
    assert list(p.kstage) == [id(mm0)] and p.kstage[id(mm0)].kc == K_CHUNK and p.smem <= p.opts.smem_capacity
    assert p.notes["frag_fused"] == 1 and p.notes["k_staged"] == "64x6"  # Options.kstages
