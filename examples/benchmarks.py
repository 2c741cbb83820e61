"""The six benchmarks of the Mirage paper as μGraphs: each with its reference program
(pre-defined kernel ops only), a hand-written fused μGraph (graph-defined kernels, in
the spirit of the paper's figures and the reference implementation's
`demo/reference_mugraphs/`), and an independent numpy float64 definition.

Shapes follow DESIGN.md (`bs` = batch size). Used by the examples, the tests, the
verifier and the GPU benchmarks; `python examples/benchmarks.py --write` regenerates
the `.mlir` files beside it.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

import mirage as mi


@dataclass(frozen=True)
class Benchmark:
    name: str
    input_shapes: Callable[[int], list]  # bs -> shapes
    reference: Callable[[int], mi.KNGraph]
    fused: Callable[[int], mi.KNGraph]
    numpy: Callable[..., np.ndarray]  # float64 definition on the inputs
    scales: tuple = ()  # per-input scale of realistic random inputs (default 1)

    def random_inputs(self, bs: int, rng: np.random.Generator) -> list[np.ndarray]:
        scales = self.scales or (1.0,) * len(self.input_shapes(bs))
        return [rng.standard_normal(s) * c for s, c in zip(self.input_shapes(bs), scales)]


def _rms(x, axis=-1):
    return np.sqrt((x * x).mean(axis=axis, keepdims=True))


# -- RMSNorm + Linear ---------------------------------------------------------------------

def _rmsnorm_shapes(bs):
    return [(2 * bs, 4096), (4096,), (4096, 6144)]


def rmsnorm_reference(bs=1):
    g = mi.new_kernel_graph("rmsnorm_linear")
    X, G, W = (g.new_input(s) for s in _rmsnorm_shapes(bs))
    g.mark_output(g.matmul(g.mul(g.rms_norm(X, (4096,)), G), W))
    return g


def rmsnorm_fused(bs=1, cols=64, threads=128, krows=64):
    """One kernel: X and G replicated, W split by columns over 6144/cols blocks (96), a
    loop over the hidden dim in krows-row steps (64 steps); the matmul sums across
    iterations, rms(X) accumulates beside it, and the division runs once after the loop
    (paper §3, Figure 3)."""
    g = mi.new_kernel_graph("rmsnorm_linear")
    X, G, W = (g.new_input(s) for s in _rmsnorm_shapes(bs))
    tb = mi.new_threadblock_graph(grid_dim=(6144 // cols, 1, 1), block_dim=(threads, 1, 1),
                                  forloop_range=4096 // krows, reduction_dimx=64)
    tX = tb.new_input(X, input_map=(-1, -1, -1), forloop_dim=1)
    tG = tb.new_input(G, input_map=(-1, -1, -1), forloop_dim=0)
    tW = tb.new_input(W, input_map=(1, -1, -1), forloop_dim=0)
    tM = tb.matmul(tb.mul(tX, tG), tW)
    tR = tb.forloop_accum(tX, "rms")
    tS = tb.forloop_accum(tM)
    tb.new_output(tb.div(tS, tR), output_map=(1, -1, -1))
    g.mark_output(g.customized([X, G, W], tb)[0])
    return g


def rmsnorm_numpy(x, gamma, w):
    return (x / _rms(x) * gamma) @ w


# -- Gated MLP ----------------------------------------------------------------------------

def _mlp_shapes(bs):
    return [(8 * bs, 4096), (4096, 4096), (4096, 4096)]


def gated_mlp_reference(bs=1):
    g = mi.new_kernel_graph("gated_mlp")
    X, W1, W2 = (g.new_input(s) for s in _mlp_shapes(bs))
    g.mark_output(g.mul(g.silu(g.matmul(X, W1)), g.matmul(X, W2)))
    return g


def gated_mlp_fused(bs=1):
    g = mi.new_kernel_graph("gated_mlp")
    X, W1, W2 = (g.new_input(s) for s in _mlp_shapes(bs))
    tb = mi.new_threadblock_graph(grid_dim=(128, 1, 1), block_dim=(128, 1, 1), forloop_range=16,
                                  reduction_dimx=64)
    tX = tb.new_input(X, input_map=(-1, -1, -1), forloop_dim=1)
    tW1 = tb.new_input(W1, input_map=(1, -1, -1), forloop_dim=0)
    tW2 = tb.new_input(W2, input_map=(1, -1, -1), forloop_dim=0)
    a1 = tb.forloop_accum(tb.matmul(tX, tW1))
    a2 = tb.forloop_accum(tb.matmul(tX, tW2))
    tb.new_output(tb.mul(tb.silu(a1), a2), output_map=(1, -1, -1))
    g.mark_output(g.customized([X, W1, W2], tb)[0])
    return g


def gated_mlp_numpy(x, w1, w2):
    d = x @ w1
    return d / (1.0 + np.exp(-d)) * (x @ w2)


# -- LoRA ---------------------------------------------------------------------------------

def _lora_shapes(bs):
    return [(16 * bs, 256), (256, 4096), (256, 16), (16, 4096)]


def lora_reference(bs=1):
    g = mi.new_kernel_graph("lora")
    X, W, A, B = (g.new_input(s) for s in _lora_shapes(bs))
    g.mark_output(g.add(g.matmul(X, W), g.matmul(g.matmul(X, A), B)))
    return g


def lora_fused(bs=1):
    """One kernel: X·W and X·A accumulate over a loop on the 256-wide dim; after the
    loop the small (X·A)·B product and the sum run in the same block."""
    g = mi.new_kernel_graph("lora")
    X, W, A, B = (g.new_input(s) for s in _lora_shapes(bs))
    tb = mi.new_threadblock_graph(grid_dim=(64, 1, 1), block_dim=(128, 1, 1), forloop_range=4,
                                  reduction_dimx=64)
    tX = tb.new_input(X, input_map=(-1, -1, -1), forloop_dim=1)
    tW = tb.new_input(W, input_map=(1, -1, -1), forloop_dim=0)
    tA = tb.new_input(A, input_map=(-1, -1, -1), forloop_dim=0)
    tB = tb.new_input(B, input_map=(1, -1, -1), forloop_dim=-1)
    xw = tb.forloop_accum(tb.matmul(tX, tW))
    xa = tb.forloop_accum(tb.matmul(tX, tA))
    tb.new_output(tb.add(xw, tb.matmul(xa, tB)), output_map=(1, -1, -1))
    g.mark_output(g.customized([X, W, A, B], tb)[0])
    return g


def lora_numpy(x, w, a, b):
    return x @ w + (x @ a) @ b


# -- GQA (exp-normalized attention, as the reference μGraph) -------------------------------

def _gqa_shapes(bs):
    return [(2 * bs, 256, 64), (2 * bs, 64, 4096), (2 * bs, 4096, 64)]


def _attention_reference(g, Q, K, V):
    E = g.exp(g.matmul(Q, K))
    return g.div(g.matmul(E, V), g.reduction(E, 2))


def gqa_reference(bs=1):
    g = mi.new_kernel_graph("gqa")
    Q, K, V = (g.new_input(s) for s in _gqa_shapes(bs))
    g.mark_output(_attention_reference(g, Q, K, V))
    return g


def _flash_decoding(g, Q, K, V, bs, qk_norm=False):
    """FlashDecoding: kernel 1 splits the key/value sequence over 16 blocks (grid y) and
    loops within each split; kernel 2 reduces the 16 partial results."""
    b = 2 * bs
    tb = mi.new_threadblock_graph(grid_dim=(b, 16, 4), block_dim=(128, 1, 1), forloop_range=4,
                                  reduction_dimx=64)
    bQ = tb.new_input(Q, input_map=(0, -1, 1), forloop_dim=-1)
    bK = tb.new_input(K, input_map=(0, 2, -1), forloop_dim=2)
    bV = tb.new_input(V, input_map=(0, 1, -1), forloop_dim=1)
    if qk_norm:
        bQ = tb.mul(tb.rms_norm(bQ), tb.constant(0.125, (1, 1, 1)))
        c = tb.constant(64.0, (1, 1, 1))
        bK = tb.div(bK, tb.sqrt(tb.div(tb.reduction(tb.square(bK), 1), c)))
    bE = tb.exp(tb.matmul(bQ, bK))
    o1 = tb.forloop_accum(tb.matmul(bE, bV))
    o2 = tb.forloop_accum(bE, "sum")
    tb.new_output(o1, output_map=(0, 2, 1))
    tb.new_output(o2, output_map=(0, 2, 1))
    P = g.customized([Q, K, V], tb)
    tb2 = mi.new_threadblock_graph(grid_dim=(b, 16, 1), block_dim=(128, 1, 1), forloop_range=1,
                                   reduction_dimx=64)
    pA = tb2.new_input(P[0], input_map=(0, 1, -1), forloop_dim=-1)
    pB = tb2.new_input(P[1], input_map=(0, 1, -1), forloop_dim=-1)
    sA = tb2.forloop_accum(pA, "sum_todimx")
    sB = tb2.forloop_accum(pB, "sum")
    tb2.new_output(tb2.div(sA, sB), output_map=(0, 1, -1))
    return g.customized(P, tb2)[0]


def gqa_fused(bs=1):
    g = mi.new_kernel_graph("gqa")
    Q, K, V = (g.new_input(s) for s in _gqa_shapes(bs))
    g.mark_output(_flash_decoding(g, Q, K, V, bs))
    return g


def attention_numpy(q, k, v):
    e = np.exp(q @ k)
    return (e @ v) / e.sum(-1, keepdims=True)


# -- QKNorm + attention -------------------------------------------------------------------

def qknorm_reference(bs=1):
    g = mi.new_kernel_graph("qknorm_attention")
    Q, K, V = (g.new_input(s) for s in _gqa_shapes(bs))
    Qn = g.mul(g.rms_norm(Q, (64,)), g.constant(0.125, (1, 1, 1)))  # 1/sqrt(head dim)
    # K is stored transposed (head dim 64 is dim 1): normalize along dim 1.
    ms = g.div(g.reduction(g.square(K), 1), g.constant(64.0, (1, 1, 1)))
    Kn = g.div(K, g.sqrt(ms))
    g.mark_output(_attention_reference(g, Qn, Kn, V))
    return g


def qknorm_fused(bs=1):
    g = mi.new_kernel_graph("qknorm_attention")
    Q, K, V = (g.new_input(s) for s in _gqa_shapes(bs))
    g.mark_output(_flash_decoding(g, Q, K, V, bs, qk_norm=True))
    return g


def qknorm_numpy(q, k, v):
    return attention_numpy(q / _rms(q, -1) / 8.0, k / _rms(k, 1), v)


# -- nTrans (normalized transformer update) -----------------------------------------------

def _ntrans_shapes(bs):
    return [(8 * bs, 4096)] * 3


def ntrans_reference(bs=1):
    g = mi.new_kernel_graph("ntrans")
    H, X, A = (g.new_input(s) for s in _ntrans_shapes(bs))
    hn = g.rms_norm(H, (4096,))
    g.mark_output(g.rms_norm(g.add(X, g.mul(A, g.sub(hn, X))), (4096,)))
    return g


def ntrans_fused(bs=1):
    """One kernel, one block per row: both norms need the whole row, which fits."""
    g = mi.new_kernel_graph("ntrans")
    H, X, A = (g.new_input(s) for s in _ntrans_shapes(bs))
    tb = mi.new_threadblock_graph(grid_dim=(8 * bs, 1, 1), block_dim=(256, 1, 1), forloop_range=1,
                                  reduction_dimx=64)
    tH, tX, tA = (tb.new_input(t, input_map=(0, -1, -1), forloop_dim=-1) for t in (H, X, A))
    y = tb.add(tX, tb.mul(tA, tb.sub(tb.rms_norm(tH), tX)))
    tb.new_output(tb.rms_norm(y), output_map=(0, -1, -1))
    g.mark_output(g.customized([H, X, A], tb)[0])
    return g


def ntrans_numpy(h, x, a):
    y = x + a * (h / _rms(h) - x)
    return y / _rms(y)


BENCHMARKS = {
    b.name: b
    for b in [
        Benchmark("rmsnorm_linear", _rmsnorm_shapes, rmsnorm_reference, rmsnorm_fused, rmsnorm_numpy),
        Benchmark("gated_mlp", _mlp_shapes, gated_mlp_reference, gated_mlp_fused, gated_mlp_numpy,
                  (1.0, 1 / 64, 1 / 64)),
        Benchmark("lora", _lora_shapes, lora_reference, lora_fused, lora_numpy, (1.0, 1 / 16, 1 / 16, 0.25)),
        Benchmark("gqa", _gqa_shapes, gqa_reference, gqa_fused, attention_numpy, (0.3, 0.3, 1.0)),
        Benchmark("qknorm_attention", _gqa_shapes, qknorm_reference, qknorm_fused, qknorm_numpy,
                  (1.0, 1.0, 1.0)),
        Benchmark("ntrans", _ntrans_shapes, ntrans_reference, ntrans_fused, ntrans_numpy, (1.0, 1.0, 0.1)),
    ]
}


def write_mlir(directory: str) -> list[str]:
    """Write `<name>.mlir` (reference) and `<name>_fused.mlir` for every benchmark (bs=1)."""
    paths = []
    for b in BENCHMARKS.values():
        for suffix, build in (("", b.reference), ("_fused", b.fused)):
            path = os.path.join(directory, f"{b.name}{suffix}.mlir")
            with open(path, "w") as f:
                f.write(f"// {b.name}{' (fused μGraph)' if suffix else ' (reference program)'}, bs=1. "
                        f"Generated by examples/benchmarks.py --write.\n")
                f.write(build(1).to_mlir())
            paths.append(path)
    return paths


if __name__ == "__main__":
    if "--write" in sys.argv:
        for p in write_mlir(os.path.dirname(os.path.abspath(__file__))):
            print(p)
