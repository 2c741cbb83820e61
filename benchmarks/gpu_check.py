#!/usr/bin/env python3
"""Check compiled bundles of the six benchmarks against PyTorch on the GPU.

    PYTHONPATH=python:examples python benchmarks/gpu_check.py BUNDLE_DIR [--tol 5e-3]
        [--tol-bf16 2e-2] [--trials 3] [--only name,...] [--variants fused,bf16,...]

BUNDLE_DIR holds <benchmark>_<variant>_bs<bs>/ bundles (benchmarks/build_bundles.py).
For each: fresh random inputs (scales from BENCHMARKS[...].scales; the dtype the
bundle's manifest says: fp16, or bf16 for the `bf16` variants) per trial, the output
poisoned with NaN before the run, trial t launching the kernels t+1 times (split
for-loops reset their arrival counters), compared with a float32 PyTorch computation of
the same function on the same (rounded) inputs by ||out - ref|| / ||ref||.
Tolerance 5e-3 for fp16: fp16 output rounding alone gives ~3e-4, and the μGraphs keep
fp16 intermediates (METHOD.md: 16-bit operands land between 1e-3 and 1e-2); bf16 keeps
3 fewer mantissa bits (8x the rounding error): 2e-2. NaN never passes. Prints a table; exits 1 if any bundle fails. Imports only mirage.runtime,
the examples' numpy definitions, numpy and torch (no MLIR).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "examples")]


def torch_defs():
    """float32/fp16 PyTorch versions of the six benchmark functions (examples' numpy defs)."""
    import torch

    def rms(x, dim=-1):
        return torch.sqrt((x * x).mean(dim=dim, keepdim=True))

    def rmsnorm_linear(x, g, w):
        return (x / rms(x) * g) @ w

    def gated_mlp(x, w1, w2):
        return torch.nn.functional.silu(x @ w1) * (x @ w2)

    def lora(x, w, a, b):
        return x @ w + (x @ a) @ b

    def attention(q, k, v):
        # exp-normalized attention, as the benchmark defines it (no max subtraction)
        e = torch.exp(q @ k)
        return (e @ v) / e.sum(-1, keepdim=True)

    def qknorm(q, k, v):
        return attention(q / rms(q, -1) / 8.0, k / rms(k, 1), v)

    def ntrans(h, x, a):
        y = x + a * (h / rms(h) - x)
        return y / rms(y)

    return {"rmsnorm_linear": rmsnorm_linear, "gated_mlp": gated_mlp, "lora": lora,
            "gqa": attention, "qknorm_attention": qknorm, "ntrans": ntrans}


def torch_library_defs():
    """The same functions through PyTorch's fused library ops where they apply
    (F.rms_norm, scaled_dot_product_attention): what a user could write instead."""
    import torch.nn.functional as F

    def sdpa(q, k, v):  # exp-normalized attention = softmax(q k) v (scale 1); K is stored transposed
        return F.scaled_dot_product_attention(q, k.transpose(-1, -2), v, scale=1.0)

    return {"rmsnorm_linear": lambda x, g, w: F.rms_norm(x, (x.shape[-1],), g, eps=0.0) @ w,
            "gqa": sdpa,
            "qknorm_attention": lambda q, k, v: sdpa(F.rms_norm(q, (64,), eps=0.0) / 8.0,
                                                     F.rms_norm(k.transpose(-1, -2), (64,), eps=0.0).transpose(-1, -2), v),
            "ntrans": lambda h, x, a: F.rms_norm(x + a * (F.rms_norm(h, (h.shape[-1],), eps=0.0) - x),
                                                 (x.shape[-1],), eps=0.0)}


def find_bundles(root: str, only=()):
    """[(benchmark, variant, bs, path)] for the bundle directories under `root`."""
    from benchmarks import BENCHMARKS

    out = []
    for d in sorted(os.listdir(root)):
        p = os.path.join(root, d)
        if not any(os.path.isfile(os.path.join(p, f)) for f in ("manifest.json", "variants.json")):
            continue
        for name in BENCHMARKS:
            if d.startswith(name + "_"):
                rest = d[len(name) + 1:]
                variant, _, bs = rest.rpartition("_bs")
                if bs.isdigit() and (not only or name in only):
                    out.append((name, variant, int(bs), p))
    return out


DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def make_inputs(bench, bs, rng, device="cuda", dtype="f16"):
    import torch

    return [torch.from_numpy(a).to(device=device, dtype=getattr(torch, DTYPES[dtype]))
            for a in bench.random_inputs(bs, rng)]


def rel_err(out, ref) -> float:
    import torch

    out, ref = out.float(), ref.float()
    if not torch.isfinite(out).all():
        return float("nan")
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle_dir")
    ap.add_argument("--tol", type=float, default=5e-3)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--tol-bf16", type=float, default=2e-2)
    ap.add_argument("--only", default="")
    ap.add_argument("--variants", default="", help="check only these variants (default: all found)")
    ap.add_argument("--seed", type=int, default=None, help="default: fresh entropy each run")
    a = ap.parse_args(argv)
    import torch

    import mirage.runtime as rt
    from benchmarks import BENCHMARKS

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device", file=sys.stderr)
        return 2
    defs = torch_defs()
    rng = np.random.default_rng(a.seed)
    rows, failed = [], 0
    found = find_bundles(a.bundle_dir, tuple(x for x in a.only.split(",") if x))
    if not found:
        print(f"gpu_check: no bundles under {a.bundle_dir}", file=sys.stderr)
        return 2
    only_variants = {v for v in a.variants.split(",") if v}
    found = [f for f in found if not only_variants or f[1] in only_variants]
    for name, variant, bs, path in found:
        bench = BENCHMARKS[name]
        worst, status = 0.0, "ok"
        tol = a.tol
        try:
            k = rt.load(path)
            dt = k.manifest.inputs[0].dtype
            tol = a.tol_bf16 if dt == "bf16" else a.tol
            for trial in range(a.trials):
                xs = make_inputs(bench, bs, rng, dtype=dt)
                spec = k.manifest.outputs[0]
                out = torch.full(spec.shape, float("nan"), dtype=xs[0].dtype, device="cuda")
                for _ in range(1 + trial):
                    k(*xs, out=[out])
                torch.cuda.synchronize()
                ref = defs[name](*[x.float() for x in xs])
                e = rel_err(out, ref)
                worst = e if e != e else max(worst, e)
                if e != e:
                    status = "NaN (unwritten or overflow)"
                    break
                if e > tol:
                    status = "WRONG"
        except Exception as e:  # report and go on with the other bundles
            status, worst = f"ERROR {type(e).__name__}: {e}"[:120], float("nan")
        ok = status == "ok"
        failed += not ok
        rows.append((name, variant, bs, worst, status, tol))
        print(f"{name:18s} {variant:10s} bs={bs:<2d} rel_err={worst:.2e} {status}", flush=True)
    print()
    print(f"| benchmark | variant | bs | rel. error (worst of {a.trials}) | tolerance | result |")
    print("|---|---|---|---|---|---|")
    for name, variant, bs, e, st, tol in rows:
        print(f"| {name} | {variant} | {bs} | {e:.2e} | {tol:g} | {st} |")
    print(f"\n{len(rows) - failed}/{len(rows)} passed (tolerance {a.tol:g}, bf16 {a.tol_bf16:g}); device "
          f"{torch.cuda.get_device_name()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
