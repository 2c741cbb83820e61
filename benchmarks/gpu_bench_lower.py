"""GPU timing of compiled bundles against PyTorch (GPU machine).

    python benchmarks/gpu_bench_lower.py BUNDLE_DIR [--variants fused fused-s8] [--md OUT.md]
        [--no-compile]

For each benchmark and batch size in the index: our bundle launched by mirage.runtime
(plain launches, and replayed from a CUDA graph), torch eager, torch.compile
(default mode) and torch.compile captured in a CUDA graph. Times are medians of
`triton.testing.do_bench` (which flushes L2 between runs), in µs. Also: bytes that must
move (inputs + outputs once), the measured device copy bandwidth, and our fraction of
that floor. Writes a markdown table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def torch_fns():
    import torch

    def rms(x, dim=-1):
        return torch.sqrt((x.float() * x.float()).mean(dim, keepdim=True))

    def rmsnorm_linear(x, g, w):
        return ((x.float() / rms(x)).half() * g) @ w

    def gated_mlp(x, w1, w2):
        return torch.nn.functional.silu(x @ w1) * (x @ w2)

    def lora(x, w, a, b):
        return x @ w + (x @ a) @ b

    def attention(q, k, v):
        e = torch.exp(q @ k)
        return (e @ v) / e.sum(-1, keepdim=True)

    def qknorm(q, k, v):
        qn = ((q.float() / rms(q)) / 8.0).half()
        kn = (k.float() / rms(k, 1)).half()
        return attention(qn, kn, v)

    def ntrans(h, x, a):
        y = x + a * ((h.float() / rms(h)).half() - x)
        return (y.float() / rms(y)).half()

    return {"rmsnorm_linear": rmsnorm_linear, "gated_mlp": gated_mlp, "lora": lora, "gqa": attention,
            "qknorm_attention": qknorm, "ntrans": ntrans}


def main(argv=None):
    import torch
    import triton
    from triton.testing import do_bench

    from benchmarks import BENCHMARKS
    from mirage import runtime

    ap = argparse.ArgumentParser()
    ap.add_argument("bundles")
    ap.add_argument("--variants", nargs="+", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args(argv)
    index = json.load(open(os.path.join(a.bundles, "index.json")))
    fns = torch_fns()
    rng = np.random.default_rng(0)

    def bench(fn):
        return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3

    def graphed(fn):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g.replay

    # copy bandwidth (bytes read + written)
    buf = torch.empty(2 * 1024**3 // 2, dtype=torch.float16, device="cuda")
    dst = torch.empty_like(buf)
    t_copy = do_bench(lambda: dst.copy_(buf), return_mode="median") * 1e-3
    bw = 2 * buf.numel() * 2 / t_copy
    del buf, dst
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)

    rows = []
    by_key: dict = {}
    for ent in index:
        if ent.get("dir") and (a.variants is None or ent["variant"] in a.variants):
            if a.only and ent["bench"] not in a.only:
                continue
            by_key.setdefault((ent["bench"], ent["bs"]), []).append(ent)
    for (name, bs), ents in by_key.items():
        if name not in BENCHMARKS:  # diagnostic bundles: time ours only
            from mirage.runtime import load_bundle
            for ent in ents:
                path = os.path.join(a.bundles, ent["dir"])
                m = load_bundle(path).manifest
                xs = [torch.randn(t.shape, device="cuda", dtype=torch.float16) / 64 for t in m.inputs]
                k = runtime.load(path)
                out = [torch.empty(t.shape, device="cuda", dtype=torch.float16) for t in m.outputs]
                run = lambda: k(*xs, out=out)  # noqa: E731
                run()
                t = bench(graphed(run))
                print(f"DIAG {name} {ent['variant']}: {t:.1f} us, {sum(x.numel() * 2 for x in xs) / t / 1e6:.2f} TB/s",
                      flush=True)
            continue
        b = BENCHMARKS[name]
        xs = [torch.from_numpy(x.astype(np.float16)).cuda() for x in b.random_inputs(bs, rng)]
        fn = fns[name]
        ref_out = fn(*xs)
        nbytes = sum(x.numel() * 2 for x in xs) + ref_out.numel() * 2
        r = {"bench": name, "bs": bs, "shapes": [list(x.shape) for x in xs], "bytes": nbytes}
        for ent in ents:
            k = runtime.load(os.path.join(a.bundles, ent["dir"]))
            out = [torch.empty_like(ref_out)]
            run = lambda: k(*xs, out=out)  # noqa: E731
            run()
            torch.cuda.synchronize()
            err = float(((out[0].double() - ref_out.double()).norm() / ref_out.double().norm()).item())
            r[f"ours[{ent['variant']}]"] = bench(run)
            r[f"ours[{ent['variant']}]+graph"] = bench(graphed(run))
            r[f"err[{ent['variant']}]"] = err
        r["eager"] = bench(lambda: fn(*xs))
        if not a.no_compile:
            try:
                cf = torch.compile(fn)
                cf(*xs)
                r["compile"] = bench(lambda: cf(*xs))
                r["compile+graph"] = bench(graphed(lambda: cf(*xs)))
            except Exception as e:
                print(f"torch.compile failed for {name}: {e!r}"[:300])
        ours = {kk: v for kk, v in r.items() if kk.startswith("ours[") and kk.endswith("+graph")}
        r["best_ours_graph"] = min(ours.values()) if ours else None
        r["best_variant"] = min(ours, key=ours.get)[5:-7] if ours else None
        r["floor_us"] = nbytes / bw * 1e6
        rows.append(r)
        print(json.dumps({k2: (round(v, 2) if isinstance(v, float) else v) for k2, v in r.items()}), flush=True)

    dev = torch.cuda.get_device_name()
    meta = (f"device: {dev}; date: {datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None).isoformat(timespec='seconds')}Z; "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, triton {triton.__version__}, "
            f"Python {platform.python_version()}; copy bandwidth {bw / 1e12:.2f} TB/s; "
            f"times: do_bench medians (µs), L2 flushed between runs")
    lines = [f"<!-- {meta} -->", "", meta, "",
             "| benchmark | bs | ours (launch) | ours (CUDA graph) | eager | torch.compile | compile+graph | "
             "speedup vs best torch | memory floor | floor / ours | rel. err | variant |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        launch = min((v for kk, v in r.items() if kk.startswith("ours[") and not kk.endswith("+graph")), default=None)
        og = r["best_ours_graph"]
        best_t = min(v for v in (r.get("eager"), r.get("compile"), r.get("compile+graph")) if v)
        errs = [v for kk, v in r.items() if kk.startswith("err[")]
        f = lambda v: f"{v:.1f}" if isinstance(v, float) else "–"  # noqa: E731
        lines.append(f"| {r['bench']} | {r['bs']} | {f(launch)} | {f(og)} | {f(r.get('eager'))} | "
                     f"{f(r.get('compile'))} | {f(r.get('compile+graph'))} | "
                     f"{best_t / og:.2f}× | {r['floor_us']:.1f} | {r['floor_us'] / og:.2f} | "
                     f"{max(errs):.1e} | {r['best_variant']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.md:
        open(a.md, "w").write(text)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
