#!/usr/bin/env python3
"""What a user gets from `mirage.torch` on one block of common `transformers` models (CPU).

    PYTHONPATH=python:examples python benchmarks/models_import.py [--families gpt2 bert ...]
        [--hidden 256] [--tokens 32] [--time-limit 60] [--out benchmarks/results/models_import.md]

Each block (random weights from a torch seed, float32, eval, small hidden size) is imported
with `mt.import_module`; the table says how many kn segments it became, how many ATen ops
stayed in PyTorch (and which kinds), the kn program's agreement with the float64 module on
fresh inputs (relative Frobenius error; the interpreter runs the kn graphs in float64, the
module's float32 constants aside), and per segment the default search's pick
(`superoptimize(g)`, no preset): kernels and cost-model time against the reference's. No GPU:
the times are the cost model's (H100 constants), not measurements.

GPU mode, as benchmarks/models.py (whose helpers it uses):

    # CPU machine (MLIR): import each block at a realistic size in fp16, search, compile to
    # sm_90 PTX bundles, save with MirageModule.save(OUT/<family>, weights=False)
    PYTHONPATH=python:examples:benchmarks python benchmarks/models_import.py --build OUT
        [--families ...] [--hidden 768] [--tokens 128] [--heads HIDDEN/64] [--time-limit 60]
    # GPU machine (torch, triton, transformers, cuda-bindings; no MLIR, no z3)
    PYTHONPATH=python:examples:benchmarks python benchmarks/models_import.py --run OUT [--md FILE]

`--build` makes each block (as above: the same torch seed, then fp16; `--heads` heads, head
dim 64 by default, Mistral with heads/4 KV heads, intermediate 4 x hidden) and compiles it
as models.py's `_compile` does (`allow_fp32_upcast_elision=True`, search per kn segment up
to `--time-limit` s, target sm_90; caches under OUT/cache); OUT/build.json has the times,
the load average, kn segments, kernels, ops left to PyTorch and the report per block.
`--run` rebuilds each block on the GPU from the same seed, binds its parameters to the saved
kernels (`mirage.torch.load(OUT/<family>, module=block, weights=False)`, no MLIR), checks the
first output against the float64 block on fresh inputs (relative Frobenius error; the fp16
eager block's beside it; pass: ours < 1e-2, no mirage fallback warning, no MLIR/z3 module
imported) and times ours, ours replayed in a CUDA graph, eager and
torch.compile(mode="reduce-overhead") with `triton.testing.do_bench` (median, µs). A block
that fails is reported and the others still run; the exit status is then 1.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), HERE]

import torch  # noqa: E402


def block(family: str, d: int, heads: int = 4, kv_heads: int = 2):
    """The module of one block of `family` at hidden size d (`heads` heads; Mistral with
    `kv_heads` KV heads; intermediate size 4d), and whether it takes token ids (a one-layer
    base model: Phi-3's and Mistral's decoder layers take the rotary embedding from it)
    rather than hidden states."""
    import transformers as T

    small = dict(hidden_size=d, intermediate_size=4 * d, num_attention_heads=heads, num_hidden_layers=1,
                 vocab_size=128)
    if family == "gpt2":
        return T.GPT2Model(T.GPT2Config(n_embd=d, n_head=heads, n_layer=1, vocab_size=128, n_positions=128)).h[0], False
    if family == "bert":
        return T.BertModel(T.BertConfig(**small)).encoder.layer[0], False
    if family == "vit":
        m = T.ViTModel(T.ViTConfig(**{k: v for k, v in small.items() if k != "vocab_size"}, image_size=32,
                                   patch_size=8))
        return (m.encoder.layer if hasattr(m, "encoder") else m.layers)[0], False
    if family == "phi3":  # fused qkv_proj and gate_up_proj
        return T.Phi3Model(T.Phi3Config(**small, pad_token_id=0, use_cache=False)), True
    if family == "mistral":
        return T.MistralModel(T.MistralConfig(**small, num_key_value_heads=kv_heads, use_cache=False)), True
    raise ValueError(f"unknown family {family!r}")


def _first(o):
    o = o.last_hidden_state if hasattr(o, "last_hidden_state") else o
    return o[0] if isinstance(o, (tuple, list)) else o


def run_block(family: str, d: int, tokens: int, time_limit: float) -> dict:
    import mirage.torch as mt
    from mirage.search import superoptimize

    torch.manual_seed(0)
    m, ids = block(family, d)
    m = m.eval()

    def example(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, 128, (1, tokens), generator=g) if ids else torch.randn(1, tokens, d, generator=g)

    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = mt.import_module(m, [example(0)])
    t_import = time.monotonic() - t0
    res.program.set_mode("interpreter")
    x = example(1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _first(res.program(x))
        want = _first(copy.deepcopy(m).double()(x if ids else x.double()))
    err = float((got.double() - want).norm() / want.norm())
    segs = []
    for g in res.graphs:
        t1 = time.monotonic()
        r = superoptimize(g, measure=False, time_limit=time_limit)
        best = r.candidates[0]
        segs.append({"ops": len(g.ops), "ref_kernels": sum(op.kind != "constant" for op in g.ops),
                     "kernels": sum(op.kind != "constant" for op in best.graph.ops),
                     "ref_us": r.reference_cost.time * 1e6, "us": best.cost.time * 1e6,
                     "seconds": time.monotonic() - t1, "verification": best.verification})
    return {"family": family, "segments": len(res.graphs), "offloaded": len(res.offloaded),
            "offloaded_kinds": sorted({o.op.split(".")[1] if o.op.startswith("aten.") else o.op
                                       for o in res.offloaded}),
            "rel_err": err, "import_s": t_import, "segs": segs}


def table(a, argv) -> int:
    """The CPU table (no --build / --run): import, agreement, the default search's pick."""
    import transformers

    load = os.getloadavg()
    rows = [run_block(f, a.hidden, a.tokens, a.time_limit) for f in a.families]
    lines = [f"## {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {platform.node()} ({os.cpu_count()} CPUs, "
             f"load {load[0]:.2f} before)", "",
             "    PYTHONPATH=python:examples python benchmarks/models_import.py " + " ".join(argv or sys.argv[1:]), "",
             f"torch {torch.__version__}, transformers {transformers.__version__}; hidden {a.hidden}, "
             f"{a.tokens} tokens, float32; times are the cost model's (no GPU)", "",
             "| block | kn segments | ops left to PyTorch | kn vs float64 module | per segment: ops, "
             "kernels reference -> search, cost model µs, search s |", "|---|---|---|---|---|"]
    for r in rows:
        per = "; ".join(f"{s['ops']} ops, {s['ref_kernels']} -> {s['kernels']} kernels, {s['ref_us']:.1f} -> "
                        f"{s['us']:.1f} µs, {s['seconds']:.1f} s" for s in r["segs"])
        lines.append(f"| {r['family']} | {r['segments']} | {r['offloaded']} ({', '.join(r['offloaded_kinds'])}) | "
                     f"{r['rel_err']:.1e} | {per} |")
    text = "\n".join(lines) + "\n"
    print(text)
    old = open(a.out).read() if os.path.exists(a.out) else \
        "# Common transformers blocks through mirage.torch (CPU: import, agreement, the default search's pick)\n\n"
    head, _, rest = old.partition("\n## ")
    with open(a.out, "w") as f:
        f.write(head.rstrip("\n") + "\n\n" + text + ("\n## " + rest if rest else ""))
    return 0


# -- GPU mode: --build (CPU machine) and --run (GPU machine), as benchmarks/models.py ---------

def gpu_block(family: str, d: int, heads: int, tokens: int, device="cpu"):
    """The block of `family` for the GPU mode (torch seed 0, fp16, eval, on `device`; Mistral
    with heads/4 KV heads), whether it takes token ids, and its inputs for seed s:
    `(module, ids, inputs(s))`; inputs are drawn on the CPU, then moved (the same on every
    machine)."""
    torch.manual_seed(0)
    m, ids = block(family, d, heads, max(1, heads // 4))
    m = m.eval().half().to(device)

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 128, (1, tokens), generator=g) if ids else \
            torch.randn(1, tokens, d, generator=g).half()
        return [x.to(device)]

    return m, ids, inputs


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def build(out: str, families, d: int, tokens: int, heads: int, time_limit: float) -> int:
    from models import _compile, _options

    os.makedirs(out, exist_ok=True)
    opts = _options(out, time_limit)
    index = {"date": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "host": platform.node(),
             "cpus": os.cpu_count(), "time_limit": time_limit, "hidden": d, "tokens": tokens, "heads": heads,
             "dtype": "float16", "target": opts["target"], "torch": torch.__version__, "cases": {}}
    ok = True
    for family in families:
        load0 = open("/proc/loadavg").read().split()[:3]
        t0 = time.monotonic()
        try:
            m, ids, inputs = gpu_block(family, d, heads, tokens)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                opt, times = _compile(m, inputs(0), opts)
            path = opt.save(os.path.join(out, family), weights=False)
        except Exception as e:  # report, go on with the other blocks
            import traceback

            ok = False
            tb = traceback.format_exc()
            print(f"== {family}: FAILED after {time.monotonic() - t0:.1f} s: {type(e).__name__}: {e}\n{tb}", flush=True)
            index["cases"][family] = {"error": f"{type(e).__name__}: {e}", "traceback": tb, "loadavg_before": load0,
                                      "loadavg_after": open("/proc/loadavg").read().split()[:3]}
            with open(os.path.join(out, "build.json"), "w") as f:
                json.dump(index, f, indent=1)
            continue
        load1 = open("/proc/loadavg").read().split()[:3]
        res = opt.result
        segs = list(res.program.segments.values())
        kernels = sum(len(s.bundle.lowered.kernels) for s in segs if s.bundle is not None)
        entry = {"ids": ids, "times": times, "loadavg_before": load0, "loadavg_after": load1,
                 "saved_bytes": _du(path),
                 "kn_segments": len(segs), "compiled_segments": sum(s.bundle is not None for s in segs),
                 "kernels": kernels, "kernels_per_segment": [len(s.bundle.lowered.kernels) if s.bundle is not None
                                                             else None for s in segs],
                 "kn_ops": sum(len(s.graph.ops) for s in segs), "left_to_pytorch": len(res.offloaded),
                 "left_kinds": sorted({o.op.split(".")[1] if o.op.startswith("aten.") else o.op
                                       for o in res.offloaded}),
                 "dir": path, "report": opt.report}
        index["cases"][family] = entry
        with open(os.path.join(out, "build.json"), "w") as f:
            json.dump(index, f, indent=1)
        # the report without its one line per op left to PyTorch (build.json has them all)
        report = "\n".join(ln for ln in opt.report.splitlines() if not ln.startswith("  offloaded "))
        print(f"== {family}: {times['total']:.1f} s, CPU {times['cpu']:.1f} s (import {times['import']:.1f}, search "
              f"{times['search']:.1f}, PTX {times['ptx']:.1f}); loadavg {' '.join(load0)} -> {' '.join(load1)}; "
              f"{len(segs)} kn segment(s), {entry['compiled_segments']} compiled, {kernels} kernel(s) "
              f"{entry['kernels_per_segment']}; {len(res.offloaded)} op(s) left to PyTorch; saved "
              f"{entry['saved_bytes'] / 2**20:.1f} MiB\n{report}\n", flush=True)
    return 0 if ok else 1


def run(src: str, md: str | None, families=None) -> int:
    from models import write_table

    with open(os.path.join(src, "build.json")) as f:
        index = json.load(f)
    dev = torch.device("cuda")
    d, tokens, heads = index["hidden"], index["tokens"], index["heads"]
    rows, ok = [], True
    nan = float("nan")
    for name, entry in index["cases"].items():
        if families and name not in families:
            continue
        def failed(note: str) -> dict:
            return dict(name=name, entry=entry, err=nan, err_graph=nan, err_eager=nan, ours=nan, graph=nan,
                        eager=nan, compiled=nan, passed=False, note=note)

        if "error" in entry:
            print(f"{name}: not built ({entry['error']}); FAIL", flush=True)
            rows.append(failed("not built"))
            ok = False
            continue
        try:
            row = _run_one(src, name, entry, d, tokens, heads, dev)
        except Exception as e:  # report, go on with the other blocks
            import traceback

            traceback.print_exc()
            print(f"{name}: FAILED: {type(e).__name__}: {e}", flush=True)
            row = failed(type(e).__name__)
        ok &= row["passed"]
        rows.append(row)
    lines = [f"device: {torch.cuda.get_device_name()}, {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; "
             f"torch {torch.__version__}, CUDA {torch.version.cuda}; built {index['date']} on {index['host']} "
             f"(search time limit {index['time_limit']} s); hidden {d}, {heads} heads, {tokens} tokens, fp16",
             "",
             "kn segments without kernels (code generation failed at --build: build.json's report says why) run "
             "their ATen ops in PyTorch.",
             "",
             "| block | kn segments (with kernels / all) | kernels | ops left to PyTorch | rel. err ours "
             "| rel. err ours in a CUDA graph | rel. err eager fp16 | ours (µs) | ours in a CUDA graph (µs) "
             "| eager (µs) | torch.compile + CUDA graphs (µs) | ours (graph) vs compile | check |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = r["entry"]
        lines.append(f"| {r['name']} | {e.get('compiled_segments', '-')} / {e.get('kn_segments', '-')} "
                     f"| {e.get('kernels', '-')} "
                     f"| {e.get('left_to_pytorch', '-')} | {r['err']:.1e} | {r['err_graph']:.1e} "
                     f"| {r['err_eager']:.1e} "
                     f"| {r['ours']:.1f} | {r['graph']:.1f} | {r['eager']:.1f} | {r['compiled']:.1f} "
                     f"| {r['compiled'] / r['graph']:.2f}× "
                     f"| {'pass' if r['passed'] else 'FAIL' + (' (' + r['note'] + ')' if r.get('note') else '')} |")
    write_table(lines, md)
    return 0 if ok else 1


def _run_one(src, name, entry, d, tokens, heads, dev) -> dict:
    import mirage.torch as mt

    from models import heavy_modules, rel, time_beside_torch

    m, ids, inputs = gpu_block(name, d, heads, tokens, dev)
    opt = mt.load(os.path.join(src, name), module=m, weights=False)
    heavy = heavy_modules()
    ins = inputs(1)
    with warnings.catch_warnings(record=True) as w, torch.no_grad():
        warnings.simplefilter("always")
        ours = _first(opt(*ins))
        eager = _first(m(*ins))
        torch.cuda.synchronize()
    fallbacks = sorted({str(x.message) for x in w if "mirage" in str(x.message)})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = _first(copy.deepcopy(m).double()(*[x if ids else x.double() for x in ins]))
    err, err_eager = rel(ours, ref), rel(eager, ref)
    with torch.no_grad():
        t_ours, t_eager, t_ours_graph, outs, t_compiled = time_beside_torch(name, opt, m, ins)
    err_graph = rel(_first(outs), ref) if outs is not None else float("nan")
    # a NaN error (capture failed) fails the check, as in models.py
    passed = not fallbacks and not heavy and err < 1e-2 and err_graph < 1e-2
    print(f"{name}: rel.err ours {err:.1e} (CUDA graph {err_graph:.1e}) eager {err_eager:.1e}; {t_ours:.1f} us "
          f"(CUDA graph {t_ours_graph:.1f} us) vs eager {t_eager:.1f} us, torch.compile+CUDA graphs "
          f"{t_compiled:.1f} us; fallback warnings {fallbacks}; heavy modules {heavy}; "
          f"{'PASS' if passed else 'FAIL'}", flush=True)
    note = "; ".join((["fallback"] if fallbacks else []) + (["MLIR imported"] if heavy else []))
    return dict(name=name, entry=entry, err=err, err_graph=err_graph, err_eager=err_eager, ours=t_ours,
                graph=t_ours_graph, eager=t_eager, compiled=t_compiled, passed=passed, note=note)


FAMILIES = ["gpt2", "bert", "vit", "phi3", "mistral"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--build", metavar="OUT", help="CPU machine: fp16 blocks, search, compile for sm_90, save under OUT")
    g.add_argument("--run", metavar="OUT", help="GPU machine: check and time what --build saved in OUT")
    ap.add_argument("--families", nargs="*", default=FAMILIES, choices=FAMILIES)
    ap.add_argument("--hidden", type=int, help="hidden size (256; --build: 768)")
    ap.add_argument("--tokens", type=int, help="tokens (32; --build: 128)")
    ap.add_argument("--heads", type=int, help="--build: attention heads (hidden / 64; the table: 4)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="search time limit per segment (s)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "models_import.md"), help="the table's file")
    ap.add_argument("--md", help="--run: also write the table to this file")
    a = ap.parse_args(argv)
    if a.run:
        return run(a.run, a.md, a.families)
    if a.build:
        d = a.hidden or 768
        heads = a.heads or max(1, d // 64)
        return build(a.build, a.families, d, a.tokens or 128, heads, a.time_limit)
    if a.heads not in (None, 4):
        ap.error("the table's blocks have 4 heads (--heads is for --build)")
    a.hidden, a.tokens = a.hidden or 256, a.tokens or 32
    return table(a, argv)


if __name__ == "__main__":
    sys.exit(main())
