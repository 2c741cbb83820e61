#!/usr/bin/env python3
"""Per-layer decode latency of `transformers` decoder layers through `mirage.torch`.

    # CPU machine (MLIR, torch-mlir, transformers): import, search, compile to PTX bundles
    PYTHONPATH=python:examples python benchmarks/models.py --build OUT [--time-limit 120]
    # GPU machine (torch, triton, cuda-bindings, transformers; no MLIR)
    PYTHONPATH=python:examples python benchmarks/models.py --run OUT [--md results.md]

Layers (examples/transformers_layers.py, random weights from a numpy seed, fp16, eval):
the LLaMA-3-8B-shaped decoder layer (hidden 4096, 32 heads, 8 KV heads, head dim 128,
intermediate 14336) and a Qwen2-7B-shaped one (hidden 3584, 28 heads, 4 KV heads, head
dim 128, intermediate 18944, q/k/v biases), at a decode step: one new token per sequence,
batch 1 and 8, a KV cache of 4096 positions (the step appends the new key and value and
returns the cache, as transformers' DynamicCache does).

`--build` imports each layer with `mirage.torch.superoptimize` (allow_fp32_upcast_elision:
kn has no cast), searches every kn segment (`--time-limit`), compiles the result to sm_90
PTX bundles and saves it with `MirageModule.save(OUT/<case>, weights=False)`. The caches
(search results, PTX) are under OUT/cache (MIRAGE_CACHE_DIR), so a fresh OUT measures a
first compile. It records the times (import, search, PTX compile, total: wall and CPU
seconds of the process and its workers) of this first compile and of a second one in a
new process (`--again`: search and PTX from the caches), with the load average, in
OUT/build.json.

`--run` rebuilds each layer from the same seed on the GPU, binds its weights to the saved
kernels (`mirage.torch.load(OUT/<case>, module=layer)`, which never imports MLIR), checks
the outputs (layer output and the updated K/V cache) against the float64 layer (relative
Frobenius error; the fp16 eager layer's error beside it) and times ours, eager and
torch.compile(mode="reduce-overhead") (CUDA graphs) with `triton.testing.do_bench`
(median, µs); ours also captured in a CUDA graph (checked again, then its replays timed:
without the host's per-launch cost, as torch.compile's graphs). `--profile [N]` lists ours'
N costliest kernels by GPU time; `--only llama_bs1 ...` runs some layers of OUT.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "examples")]

import torch  # noqa: E402

import transformers_layers as TL  # noqa: E402
from _cuda_graph import capture_graphs  # noqa: E402

FAMILIES = {"llama": TL.LLAMA3_8B, "qwen2": TL.QWEN2_7B}
CONTEXT = 4096


def cases(families, batches):
    return [(f, b) for f in families for b in batches]


def case_name(family: str, batch: int) -> str:
    return f"{family}_bs{batch}"


def make(family: str, batch: int, context: int, device="cpu", small: bool = False):
    step, ins = TL.decode_step(family, TL.SMALL if small else FAMILIES[family], batch, context, torch.float16)
    return step.to(device), [x.to(device) for x in ins]


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the search's workers)."""
    import resource

    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def _compile(step, ins, opts):
    """superoptimize with the phases timed: (module, {phase: seconds, "cpu": CPU seconds})."""
    import mirage.torch as mt

    c0, t0 = _cpu(), time.monotonic()
    res = mt.import_module(step, ins, allow_fp32_upcast_elision=True)
    t1 = time.monotonic()
    notes = mt._attach_kernels(res, opts)
    t2 = time.monotonic()
    opt = mt.MirageModule(step, res, notes, ins)
    searched = [float(n.split(" in ")[1].split(" s")[0]) for n in notes if ": superoptimized in " in n]
    compiled = [float(n.split(" in ")[1].split(" s")[0]) for n in notes if ": compiled for " in n]
    return opt, {"import": t1 - t0, "search": sum(searched), "ptx": sum(compiled), "total": t2 - t0,
                 "cpu": _cpu() - c0, "from_cache": sum("from the search cache" in n for n in notes)}


def _options(out: str, time_limit: float) -> dict:
    os.environ["MIRAGE_CACHE_DIR"] = os.path.join(out, "cache")  # search results, PTX, HMAC key
    return dict(time_limit=time_limit, cache_dir=os.path.join(out, "cache", "search"), target="sm_90",
                progress=False)


def again(out: str, family: str, batch: int, context: int, time_limit: float, small: bool) -> int:
    """The second compile, in this new process: prints its times as JSON."""
    step, ins = make(family, batch, context, small=small)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, times = _compile(step, ins, _options(out, time_limit))
    print(json.dumps(times))
    return 0


def build(out: str, families, batches, context: int, time_limit: float, small: bool = False) -> int:
    import subprocess

    os.makedirs(out, exist_ok=True)
    opts = _options(out, time_limit)
    index = {"date": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "host": platform.node(),
             "cpus": os.cpu_count(), "time_limit": time_limit, "context": context, "small": small, "cases": {}}
    for family, batch in cases(families, batches):
        name = case_name(family, batch)
        step, ins = make(family, batch, context, small=small)
        load0 = open("/proc/loadavg").read().split()[:3]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt, first = _compile(step, ins, opts)
        cmd = [sys.executable, os.path.abspath(__file__), "--again", out, "--families", family, "--batches",
               str(batch), "--context", str(context), "--time-limit", str(time_limit)] + (["--small"] if small else [])
        second = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        load1 = open("/proc/loadavg").read().split()[:3]
        d = opt.save(os.path.join(out, name), weights=False)
        segs = list(opt.result.program.segments.values())
        kernels = sum(len(s.bundle.lowered.kernels) for s in segs if s.bundle is not None)
        entry = {"first": first, "cached": second, "loadavg_before": load0, "loadavg_after": load1,
                 "kn_segments": len(segs), "kernels": kernels, "left_to_pytorch": len(opt.result.offloaded),
                 "kn_ops": sum(len(s.graph.ops) for s in segs), "dir": d, "report": opt.report}
        index["cases"][name] = entry
        print(f"== {name}: first {first['total']:.1f} s, CPU {first['cpu']:.1f} s (import {first['import']:.1f}, "
              f"search {first['search']:.1f}, PTX {first['ptx']:.1f}), second process {second['total']:.1f} s, CPU "
              f"{second['cpu']:.1f} s (import {second['import']:.1f}, search {second['search']:.1f}, PTX "
              f"{second['ptx']:.1f}; {second['from_cache']} search(es) from the cache); loadavg {' '.join(load0)} -> "
              f"{' '.join(load1)}; {kernels} kernel(s)\n{opt.report}\n", flush=True)
        with open(os.path.join(out, "build.json"), "w") as f:
            json.dump(index, f, indent=1)
    return 0


def write_table(lines: list, md: str | None) -> None:
    """Print a results table, and write it to `md` when given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if md:
        with open(md, "w") as f:
            f.write(text)


def time_beside_torch(name: str, opt, module, ins) -> tuple:
    """Medians (µs, `triton.testing.do_bench`) of ours, the eager module, ours replayed
    from a CUDA graph (no per-launch host cost, as torch.compile's graphs) and
    torch.compile(mode="reduce-overhead"), and the graph's outputs after one replay (None,
    and NaN times, where capturing or compiling failed: reported, the run goes on)."""
    from triton.testing import do_bench

    def bench(fn):
        return do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3

    t_ours, t_eager = bench(lambda: opt(*ins)), bench(lambda: module(*ins))
    t_graph, outs, t_compiled = float("nan"), None, float("nan")
    try:  # as a caller of torch.compile's graphs would: warm-up on a side stream, then capture
        g, outs = capture_graphs([lambda: opt(*ins)])[0]
        g.replay()
        torch.cuda.synchronize()
        t_graph = bench(g.replay)
    except Exception as e:
        outs = None
        print(f"{name}: capturing ours in a CUDA graph failed: {type(e).__name__}: {e}", flush=True)
    try:
        torch._dynamo.reset()
        c = torch.compile(module, mode="reduce-overhead")
        for _ in range(3):
            c(*ins)
        t_compiled = bench(lambda: c(*ins))
    except Exception as e:
        print(f"{name}: torch.compile(mode='reduce-overhead') failed: {type(e).__name__}: {e}", flush=True)
    return t_ours, t_eager, t_graph, outs, t_compiled



def heavy_modules() -> list:
    """The MLIR, torch-mlir and z3 modules imported so far: loading saved kernels needs none."""
    return sorted(k for k in sys.modules if k.split(".")[0] in ("mlir", "torch_mlir", "z3"))

def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def kernel_profile(fn, top: int = 8) -> str:
    """The kernels one call of `fn` launches on the GPU, by total time (torch.profiler's
    CUPTI trace sees driver-API launches too): where a layer's time goes."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=top)


def run(src: str, md: str | None, profile_kernels: int = 0, only=None) -> int:
    import mirage.torch as mt

    with open(os.path.join(src, "build.json")) as f:
        index = json.load(f)
    dev = torch.device("cuda")
    rows, ok = [], True
    for name, entry in index["cases"].items():
        if only and name not in only:
            continue
        family, batch = name.rsplit("_bs", 1)
        step, ins = make(family, int(batch), index["context"], dev, index.get("small", False))
        opt = mt.load(os.path.join(src, name), module=step, weights=False)
        heavy = heavy_modules()
        with warnings.catch_warnings(record=True) as w, torch.no_grad():
            warnings.simplefilter("always")
            ours = opt(*ins)
            eager = step(*ins)
            torch.cuda.synchronize()
        fallbacks = sorted({str(x.message) for x in w if "mirage" in str(x.message)})
        with torch.no_grad():
            ref = TL.DecodeStep(step.layer.double(), step.cfg)(*[x.double() for x in ins])
            step.layer.half()
        errs = [rel(o, r) for o, r in zip(ours, ref)]
        errs_eager = [rel(e, r) for e, r in zip(eager, ref)]
        with torch.no_grad():
            t_ours, t_eager, t_ours_graph, outs, t_graph = time_beside_torch(name, opt, step, ins)
            errs_graph = [rel(o, r) for o, r in zip(outs, ref)] if outs is not None else [float("nan")]
        if profile_kernels:
            with torch.no_grad():
                print(f"{name}: kernels of ours, 5 calls\n{kernel_profile(lambda: opt(*ins), profile_kernels)}", flush=True)
        passed = not fallbacks and not heavy and max(errs) < 1e-2 and max(errs_graph) < 1e-2
        ok &= passed
        rows.append((name, entry, errs, errs_eager, t_ours, t_ours_graph, t_eager, t_graph, passed))
        print(f"{name}: rel.err ours {['%.1e' % e for e in errs]} (CUDA graph {['%.1e' % e for e in errs_graph]}) "
              f"eager {['%.1e' % e for e in errs_eager]}; {t_ours:.1f} us (CUDA graph {t_ours_graph:.1f} us) vs "
              f"eager {t_eager:.1f} us, torch.compile+CUDA graphs {t_graph:.1f} us; "
              f"fallback warnings {fallbacks}; heavy modules {heavy}; {'PASS' if passed else 'FAIL'}", flush=True)
    lines = [f"device: {torch.cuda.get_device_name()}, {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; "
             f"torch {torch.__version__}, CUDA {torch.version.cuda}; built {index['date']} "
             f"(search time limit {index['time_limit']} s), context {index['context']}",
             "",
             "| layer | kn segments | kernels | rel. err ours (out, K, V) | rel. err eager fp16 | ours (µs) "
             "| ours in a CUDA graph (µs) | eager (µs) | torch.compile + CUDA graphs (µs) | ours (graph) vs compile "
             "| check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, e, errs, ee, to, tog, te, tg, p in rows:
        lines.append(f"| {name} | {e['kn_segments']} | {e['kernels']} | {', '.join('%.1e' % x for x in errs)} "
                     f"| {', '.join('%.1e' % x for x in ee)} | {to:.1f} | {tog:.1f} | {te:.1f} | {tg:.1f} "
                     f"| {tg / tog:.2f}× "
                     f"| {'pass' if p else 'FAIL'} |")
    write_table(lines, md)
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--build", metavar="OUT", help="CPU machine: import, search, compile, save under OUT")
    g.add_argument("--run", metavar="OUT", help="GPU machine: check and time what --build saved in OUT")
    g.add_argument("--again", metavar="OUT", help=argparse.SUPPRESS)  # --build's second compile, a new process
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--context", type=int, default=CONTEXT)
    ap.add_argument("--time-limit", type=float, default=120.0, help="search time limit per segment (s)")
    ap.add_argument("--md", help="--run: also write the table to this file")
    ap.add_argument("--profile", type=int, nargs="?", const=8, default=0, metavar="N",
                    help="--run: also list the N (8) costliest kernels of ours by GPU time")
    ap.add_argument("--only", nargs="+", help="--run: these layers only (e.g. llama_bs1)")
    ap.add_argument("--small", action="store_true", help="--build: the small test config (hidden 64), to try the path")
    a = ap.parse_args(argv)
    if a.build:
        return build(a.build, a.families, a.batches, a.context, a.time_limit, a.small)
    if a.again:
        return again(a.again, a.families[0], a.batches[0], a.context, a.time_limit, a.small)
    return run(a.run, a.md, a.profile, a.only)


if __name__ == "__main__":
    sys.exit(main())
