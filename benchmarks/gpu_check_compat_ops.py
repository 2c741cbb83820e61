#!/usr/bin/env python3
"""Check the lowering of Mirage's clamp / pow / mul_scalar / reduction_max (run once, and
as a running max across a for-loop) / forloop_accum_max / forloop_accum_rescale (the
online softmax, and Mirage's online-softmax GQA μGraph) on the GPU against numpy float64.

    PYTHONPATH=python python benchmarks/gpu_check_compat_ops.py build DIR   # here (needs MLIR)
    python3 benchmarks/gpu_check_compat_ops.py check DIR                     # on the GPU

`build` writes one bundle per μGraph below and its float64 reference on fixed random
inputs (rounded to fp16 first) into DIR; `check` launches each bundle's PTX with CuPy
(kernels in manifest order, one bare pointer per tensor, intermediates zeroed) and
compares: ||out - ref|| / ||ref|| <= 5e-3 (fp16 outputs round at ~5e-4 relative; pow
and the clamped differences round their fp16 operands again), NaN never passes, and
reduction_max's diff must be exactly 0 (one iteration). Needs only numpy and CuPy there.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

TOL = 5e-3


def graphs():
    import mirage as mi

    out = {}
    g = mi.new_kernel_graph("kn_ew")
    X, P = g.new_input((64, 256)), g.new_input((1, 256))
    g.mark_output(g.mul_scalar(g.pow(g.clamp(X, 0.25, 2.0), P), 0.125))
    out["kn_ew"] = (g, lambda x, p: [0.125 * np.power(np.clip(x, 0.25, 2.0), p)], [(64, 256), (1, 256)])

    g = mi.new_kernel_graph("tb_rowmax")
    X, Y = g.new_input((64, 256)), g.new_input((64, 256))
    tb = mi.new_threadblock_graph((4, 1, 1), (128, 1, 1), 1)
    tx, ty = tb.new_input(X, (0, -1, -1), -1), tb.new_input(Y, (0, -1, -1), -1)
    m, d = tb.reduction_max(tx, 1)
    th = mi.new_thread_graph([mi.float16, mi.float16])
    th.output(th.mul_scalar(th.pow(th.clamp(th.inputs[0], -3.0, -0.5), th.inputs[1]), -0.5))
    (z,) = tb.thread_graph([tb.sub(tx, m), ty], th)
    tb.new_output(z, (0, -1, -1))
    tb.new_output(d, (0, -1, -1))
    for o in g.customized([X, Y], tb):
        g.mark_output(o)

    def rowmax_ref(x, y):
        # negative base, integral exponents (y rounded below): pow's sign path
        return [-0.5 * np.power(np.clip(x - x.max(1, keepdims=True), -3.0, -0.5), y), np.zeros((64, 1))]
    out["tb_rowmax"] = (g, rowmax_ref, [(64, 256), (64, 256)])

    g = mi.new_kernel_graph("tb_loop_max")
    X = g.new_input((64, 1024))
    tb = mi.new_threadblock_graph((4, 1, 1), (128, 1, 1), 4)
    tx = tb.new_input(X, (0, -1, -1), 1)
    tb.new_output(tb.forloop_accum_max(tb.mul_scalar(tb.clamp(tx, -1.0, 1.5), 3.0)), (0, -1, -1))
    g.mark_output(g.customized([X], tb)[0])
    out["tb_loop_max"] = (g, lambda x: [3.0 * np.clip(x, -1.0, 1.5).reshape(64, 4, 256).max(1)], [(64, 1024)])

    # the online-softmax state across a for-loop of 4 iterations: the running max and its
    # change saved every iteration, both rescaling accumulators, the max accumulator
    g = mi.new_kernel_graph("tb_online")
    X = g.new_input((64, 256))
    tb = mi.new_threadblock_graph((4, 1, 1), (128, 1, 1), 4)
    t = tb.new_input(X, (0, -1, -1), 1)  # (16, 64) a block and iteration
    m, d = tb.reduction_max(t, 1)
    p, r = tb.exp(tb.sub(t, m)), tb.exp(d)
    tb.new_output(m, (0, -1, -1), 1)
    tb.new_output(d, (0, -1, -1), 1)
    tb.new_output(tb.forloop_accum_rescale(p, r), (0, -1, -1))
    tb.new_output(tb.forloop_accum_rescale(p, r, "sum"), (0, -1, -1))
    tb.new_output(tb.forloop_accum_max(m), (0, -1, -1))
    for o in g.customized([X], tb):
        g.mark_output(o)

    def online_ref(x):
        ms, ds, acc, den = [], [], np.zeros((64, 64)), np.zeros((64, 1))
        prev = None
        for i in range(4):
            xi = x[:, 64 * i:64 * (i + 1)]
            cur = xi.max(1, keepdims=True) if prev is None else np.maximum(prev, xi.max(1, keepdims=True))
            diff = np.zeros_like(cur) if prev is None else prev - cur
            pi = np.exp(xi - cur)
            acc = acc * np.exp(diff) + pi
            den = den * np.exp(diff) + pi.sum(1, keepdims=True)
            ms.append(cur)
            ds.append(diff)
            prev = cur
        return [np.concatenate(ms, 1), np.concatenate(ds, 1), acc, den, prev]
    out["tb_online"] = (g, online_ref, [(64, 256)])

    # Mirage's online-softmax group-query attention (demo style): split over key chunks,
    # merged by a second kernel with the same rescaling
    g = mi.new_kernel_graph("gqa_online")
    Q, K, V = g.new_input((2, 256, 64)), g.new_input((2, 64, 1024)), g.new_input((2, 1024, 64))
    tb = mi.new_threadblock_graph((2, 16, 4), (128, 1, 1), 4, 64)
    bq, bk, bv = tb.new_input(Q, (0, -1, 1), -1), tb.new_input(K, (0, 2, -1), 2), tb.new_input(V, (0, 1, -1), 1)
    s = tb.matmul(bq, bk)
    m, d = tb.reduction_max(s, 2)
    p, r = tb.exp(tb.sub(s, m)), tb.exp(d)
    outs = [tb.forloop_accum_rescale(tb.matmul(p, bv), r), tb.forloop_accum_rescale(p, r, "sum"), tb.forloop_accum_max(m)]
    for o in outs:
        tb.new_output(o, (0, 2, 1))
    P = g.customized([Q, K, V], tb)
    tb2 = mi.new_threadblock_graph((2, 1, 4), (128, 1, 1), 16, 64)
    n, dn, lm = (tb2.new_input(t, (0, -1, 1), 2) for t in P)
    gm, gd = tb2.reduction_max(lm, 2)
    to_g, sc = tb2.exp(tb2.sub(lm, gm)), tb2.exp(gd)
    num = tb2.forloop_accum_rescale(tb2.mul(n, to_g), sc)
    den = tb2.forloop_accum_rescale(tb2.mul(dn, to_g), sc, "sum")
    tb2.new_output(tb2.div(num, den), (0, -1, 1))
    g.mark_output(g.customized(P, tb2)[0])

    def softmax_attention(q, k, v):
        sc = q @ k
        e = np.exp(sc - sc.max(-1, keepdims=True))
        return [(e @ v) / e.sum(-1, keepdims=True)]
    out["gqa_online"] = (g, softmax_attention, [(2, 256, 64), (2, 64, 1024), (2, 1024, 64)])
    return out


def build(d: str) -> None:
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, (g, ref, shapes) in graphs().items():
        g.compile(out_dir=os.path.join(d, name))
        xs = [rng.standard_normal(s).astype(np.float16) for s in shapes]
        if name == "tb_rowmax":
            xs[1] = np.round(xs[1] * 2).astype(np.float16)  # integral exponents
        got = g.evaluate([x.astype(np.float64) for x in xs])  # the interpreter agrees with numpy first
        want = ref(*[x.astype(np.float64) for x in xs])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.savez(os.path.join(d, name, "io.npz"), *xs, *[w.astype(np.float64) for w in want])


def check(d: str) -> int:
    import cupy as cp

    dt = {"f16": np.float16, "bf16": None, "f32": np.float32}
    bad = 0
    for name in sorted(os.listdir(d)):
        man = json.load(open(os.path.join(d, name, "manifest.json")))
        io = np.load(os.path.join(d, name, "io.npz"))
        arrs = [io[f"arr_{k}"] for k in range(len(io.files))]
        ins, refs = arrs[:len(man["inputs"])], arrs[len(man["inputs"]):]
        dev = {"input": [cp.asarray(x) for x in ins],
               "output": [cp.full(o["shape"], cp.nan, dtype=dt[o["dtype"]]) for o in man["outputs"]],
               "buffer": [cp.zeros(b["shape"], dtype=dt[b["dtype"]]) for b in man["buffers"]]}
        mods = {}
        for k in man["kernels"]:
            mod = mods.setdefault(k["ptx"], cp.RawModule(path=os.path.join(d, name, k["ptx"])))
            f = mod.get_function(k["name"])
            if k["smem_bytes"] > 48 * 1024:
                f.max_dynamic_shared_size_bytes = k["smem_bytes"]
            f(tuple(k["grid"]), tuple(k["block"]), tuple(dev[a["kind"]][a["index"]] for a in k["args"]),
              shared_mem=k["smem_bytes"])
        cp.cuda.runtime.deviceSynchronize()
        for j, (o, r) in enumerate(zip(dev["output"], refs)):
            o = cp.asnumpy(o).astype(np.float64)
            if not np.isfinite(o).all():
                err = float("nan")
            elif not r.any():
                err = float(np.abs(o).max())  # must be exactly 0
            else:
                err = float(np.linalg.norm(o - r) / np.linalg.norm(r))
            ok = err == 0.0 if not r.any() else err <= TOL
            bad += not ok
            print(f"{name:12s} output {j}: {'ok  ' if ok else 'FAIL'} rel err {err:.2e}  kernels {len(man['kernels'])}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("build", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "build":
        build(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
