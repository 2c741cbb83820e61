"""`mirage.torch.superoptimize` end to end: build here, run the saved modules on a GPU.

    PYTHONPATH=python python benchmarks/torch_dropin.py build DIR [--search]   # CPU machine (MLIR, torch-mlir)
    PYTHONPATH=python python3 benchmarks/torch_dropin.py run DIR [--md OUT.md]  # GPU machine (torch + mirage.runtime)

`build` superoptimizes three fp16 PyTorch modules at benchmark-like shapes and saves
each with `MirageModule.save(DIR/<name>, weights=False)` (the weights are rebuilt from
the seed on the GPU side and bound by name with `load(..., module=m)`, so the directory
stays small): RMSNorm+Linear (X 16x4096, W 4096->6144, the paper's RMSNorm benchmark at
bs 8), GatedMLP (X 8x4096, two 4096x4096 projections, bs 8) and a module with abs/log
between two projections, which stay in PyTorch while the rest goes to kn. Bundles are
compiled for sm_90 ahead of time (no GPU needed). `--search` runs the superoptimizer on
each segment first (time-capped); without it the imported graphs are compiled as they are.

`run` loads each directory with `mirage.torch.load` (checking that MLIR, torch-mlir and
z3 were never imported), runs it on fresh CUDA fp16 inputs, checks that the kernel path
ran (no fallback warning), compares with the original module run by torch in fp16 and
with a float64 reference (relative Frobenius error), and times both (median of
`triton.testing.do_bench`, L2 flushed between runs, µs).
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
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import torch  # noqa: E402
from torch_modules import GatedMLP, RMSNormLinear, WithUnsupported  # noqa: E402


CASES = {  # name: (module, example input shape), at benchmark sizes of DESIGN.md
    "rmsnorm_linear": (lambda: RMSNormLinear(4096, 6144), (16, 4096)),
    "gated_mlp": (lambda: GatedMLP(4096, 4096), (8, 4096)),
    "unsupported_op": (lambda: WithUnsupported(1024), (16, 1024)),
}


def make(name: str, device="cpu"):
    cls, shape = CASES[name]
    torch.manual_seed(0)
    m = cls()
    return m.half().to(device).eval(), shape


def build(out: str, search: bool, search_time: float, elide: bool = False) -> None:
    import mirage.torch as mt

    os.makedirs(out, exist_ok=True)
    index = {}
    for name in CASES:
        m, shape = make(name)
        x = torch.randn(*shape).half()
        t = time.time()
        opts = dict(search=True, config="auto", time_limit=search_time) if search else dict(search=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt = mt.superoptimize(m, [x], target="sm_90", allow_fp32_upcast_elision=elide, **opts)
        secs = time.time() - t
        d = opt.save(os.path.join(out, name), weights=(name == "unsupported_op"))
        print(f"== {name}: {secs:.1f} s -> {d}\n{opt.report}\n", flush=True)
        index[name] = {"shape": list(shape), "seconds": round(secs, 2), "report": opt.report,
                       "allow_fp32_upcast_elision": elide,
                       "weights_saved": name == "unsupported_op"}
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def run(src: str, md: str | None, compiled: bool = True) -> int:
    import mirage.torch as mt
    from triton.testing import do_bench

    dev = torch.device("cuda")
    rows, ok = [], True
    for name in CASES:
        d = os.path.join(src, name)
        m, shape = make(name, dev)
        with open(os.path.join(d, "manifest.json")) as f:
            man = json.load(f)
        opt = mt.load(d, module=None if man["weights"] else m)
        if man["weights"]:  # compare with the module holding the saved weights
            state = torch.load(os.path.join(d, "weights.pt"))
            m.load_state_dict({k: v for k, v in state.items()}, strict=False)
        heavy = sorted(k for k in sys.modules if k.split(".")[0] in ("mlir", "torch_mlir", "z3"))
        nk = sum(s.get("kernels", 0) for s in man["segments"])
        nseg = len(man["segments"])
        errs_ours, errs_torch = [], []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for seed in (1, 2, 3):
                torch.manual_seed(seed)
                x = torch.randn(*shape, device=dev).half()
                with torch.no_grad():
                    y = opt(x)
                    y_t = m(x)
                    ref = m.double()(x.double())
                    m.half()
                torch.cuda.synchronize()
                bad = not torch.isfinite(y).all()
                errs_ours.append(float("nan") if bad else rel(y, ref))
                errs_torch.append(rel(y_t, ref))
        fallbacks = [str(x.message) for x in w if "mirage" in str(x.message)]
        torch.manual_seed(7)
        x = torch.randn(*shape, device=dev).half()
        with torch.no_grad():
            t_ours = do_bench(lambda: opt(x), warmup=100, rep=400, return_mode="median") * 1e3
            t_torch = do_bench(lambda: m(x), warmup=100, rep=400, return_mode="median") * 1e3
            y, y_t = opt(x), m(x)
        t_comp = t_graph = float("nan")
        if compiled:  # torch.compile (inductor), and with CUDA graphs (mode="reduce-overhead")
            for mode in ("default", "reduce-overhead"):
                try:
                    torch._dynamo.reset()
                    c = torch.compile(m, mode=mode)
                    with torch.no_grad():
                        for _ in range(3):
                            c(x)
                        t = do_bench(lambda: c(x), warmup=100, rep=400, return_mode="median") * 1e3
                except Exception as e:  # report, do not fail the run
                    print(f"{name}: torch.compile mode={mode} failed: {type(e).__name__}: {e}", flush=True)
                    t = float("nan")
                if mode == "default":
                    t_comp = t
                else:
                    t_graph = t
        e_ours, e_torch = max(errs_ours), max(errs_torch)
        e_vs = rel(y, y_t)
        passed = not fallbacks and not heavy and e_ours == e_ours and e_ours < 1e-2
        ok &= passed
        rows.append((name, shape, nseg, nk, e_ours, e_torch, e_vs, t_ours, t_torch, t_comp, t_graph, passed,
                     fallbacks))
        print(f"{name}: segments {nseg}, kernels {nk}, rel.err ours {e_ours:.2e} torch-fp16 {e_torch:.2e} "
              f"ours-vs-torch {e_vs:.2e}; {t_ours:.1f} us vs torch {t_torch:.1f} us, torch.compile {t_comp:.1f} us, "
              f"+CUDA graphs {t_graph:.1f} us; "
              f"fallback warnings {fallbacks}; heavy modules imported {heavy}; {'PASS' if passed else 'FAIL'}",
              flush=True)
    lines = [
        f"device: {torch.cuda.get_device_name()}, {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}",
        "",
        "| module | input | kn segments | kernels | rel. err ours vs fp64 | rel. err torch fp16 vs fp64 "
        "| ours vs torch fp16 | ours (µs) | torch eager (µs) | torch.compile (µs) | compile + CUDA graphs (µs) "
        "| ours vs eager | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, shape, nseg, nk, eo, et, ev, to, tt, tc, tg, p, _ in rows:
        lines.append(f"| {name} | {'x'.join(map(str, shape))} fp16 | {nseg} | {nk} | {eo:.2e} | {et:.2e} | {ev:.2e} "
                     f"| {to:.1f} | {tt:.1f} | {tc:.1f} | {tg:.1f} | {tt / to:.2f}× | {'pass' if p else 'FAIL'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if md:
        with open(md, "w") as f:
            f.write(text)
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["build", "run"])
    ap.add_argument("dir")
    ap.add_argument("--search", action="store_true", help="build: run the superoptimizer first")
    ap.add_argument("--search-time", type=float, default=120.0)
    ap.add_argument("--md", default=None)
    ap.add_argument("--allow-fp32-upcast-elision", action="store_true",
                    help="build: import fp16->fp32->silu->fp16 at fp16 (one GatedMLP segment; changes rounding)")
    ap.add_argument("--no-compile", action="store_true", help="run: skip the torch.compile columns")
    a = ap.parse_args(argv)
    if a.cmd == "build":
        build(a.dir, a.search, a.search_time, a.allow_fp32_upcast_elision)
        return 0
    return run(a.dir, a.md, not a.no_compile)


if __name__ == "__main__":
    sys.exit(main())
