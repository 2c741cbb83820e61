#!/usr/bin/env python3
"""The decode layers of benchmarks/programs lowered by several commits, checked and timed
on the GPU: the whole layer and single kernels, version beside version.

    # CPU machine: DIR/<version>/<program>/main is the bundle of one commit's lowering
    # (python -m mirage.lower benchmarks/programs/<program>.mlir -o DIR/<version>/<program>;
    # benchmarks/results/arch_check.md says how the old commits' trees were run), then
    python benchmarks/arch_kernels.py --json DIR          # DIR/json/<program>.json (the kn program)
    # GPU machine (torch, triton, cuda-bindings; no MLIR)
    python benchmarks/arch_kernels.py --run DIR --versions cb ba head \\
        --kernels llama_small_decode_bs2_ctx64:main_k32,main_k39 qwen2_7b_decode_bs1_ctx4096:main_k45

Per program: fresh random fp16 inputs (2-D operands, the weights, scaled by 1/sqrt(rows)),
the outputs of the float64 interpreter (mirage.core.interpret on the program's JSON,
numpy) on the same values, then each version's bundle run twice on NaN-poisoned outputs:
relative Frobenius error of each output against float64, and the largest difference to
the first version's outputs. The whole layer is timed replayed from a CUDA graph.

Per named kernel (after the full run has filled the intermediate buffers): the buffers it
writes (its buffer/output arguments that no earlier kernel of the bundle names) are
NaN-poisoned and the kernel launched alone: it must rewrite every element with the bits
of the full run, and its result is compared with the first version's same-named kernel.
Then timed: `warm` = per launch in a CUDA graph of 20 back-to-back launches of it, `cold`
= a graph of one launch (triton's do_bench zeroes a 256 MB buffer, flushing L2, before
each replay; the graph launch is in the time). Versions are interleaved over 3 rounds;
the table gives the median of the rounds' do_bench medians and the rounds' spread.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]

from _cuda_graph import capture_graphs  # noqa: E402

PROGRAMS = os.path.join(HERE, "programs")
ROUNDS = 3
WARM_LAUNCHES = 20


def write_json(d: str) -> int:
    from mirage.core.serialize import to_json
    from mirage.mlir.importer import load_mlir

    os.makedirs(os.path.join(d, "json"), exist_ok=True)
    for f in sorted(os.listdir(PROGRAMS)):
        if f.endswith(".mlir"):
            (g,) = load_mlir(os.path.join(PROGRAMS, f))
            to_json(g, os.path.join(d, "json", f[:-5] + ".json"))
            print("json", f[:-5], flush=True)
    return 0


def _rel(out, ref: np.ndarray) -> float:
    o = out.double().cpu().numpy()
    if not np.isfinite(o).all():
        return float("nan")
    return float(np.linalg.norm(o - ref) / np.linalg.norm(ref))


def _median(xs):
    return float(np.median(xs))


class Version:
    """One version's bundle of a program, loaded, with its outputs and one-kernel launchers."""

    def __init__(self, path: str, xs):
        import torch

        import mirage.runtime as rt

        self.k = rt.Kernel(path)
        self.m = self.k.manifest
        self.xs = xs
        self.outs = [torch.empty_strided(o.shape, o.strides, dtype=torch.float16, device="cuda")
                     for o in self.m.outputs]

    def run_checked(self, refs) -> list:
        import torch

        for o in self.outs:
            o.fill_(float("nan"))
        self.k(*self.xs, out=self.outs)
        self.k(*self.xs, out=self.outs)
        torch.cuda.synchronize()
        return [_rel(o, r) for o, r in zip(self.outs, refs)]

    def index(self, name: str) -> int | None:
        names = [k.name for k in self.m.kernels]
        return names.index(name) if name in names else None

    def _tensor(self, kind: str, i: int):
        if kind == "input":
            return self.xs[i]
        if kind == "output":
            return self.outs[i]
        return self.k._buffers[self._dev()][i][1]

    def _dev(self) -> int:
        import torch

        return torch.cuda.current_device()

    def written(self, i: int) -> list:
        """The buffer/output arguments of kernel i that no earlier kernel names (what it makes)."""
        seen = {(a.kind, a.index) for k in self.m.kernels[:i] for a in k.args}
        return [(a.kind, a.index) for a in self.m.kernels[i].args
                if a.kind != "input" and (a.kind, a.index) not in seen]

    def launcher(self, i: int):
        """A function launching kernel i alone on torch's current stream (capturable)."""
        import torch

        k, spec, dev = self.k, self.m.kernels[i], self._dev()
        d, f, ctx = k.driver, k._funcs[dev][i], k._context(dev)
        vals = [ctypes.c_void_p(self._tensor(a.kind, a.index).data_ptr()) for a in spec.args]
        params = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])

        def go():
            s = k._cu_stream(torch.cuda.current_stream().cuda_stream)
            k._check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
            try:
                k._check(d.cuLaunchKernel(f, *spec.grid, *spec.block, spec.smem_bytes, s,
                                          ctypes.addressof(params), 0), f"cuLaunchKernel({spec.name})")
            finally:
                d.cuCtxPopCurrent()
        go.keep = (vals, params)  # params points into vals
        return go


def graph_of(fn, n: int):
    """A CUDA graph of `n` calls of `fn` (warmed up first)."""
    return capture_graphs([fn], calls=n)[0][0]


def bench(g, n: int = 1) -> float:
    from triton.testing import do_bench

    return 1000.0 * do_bench(g.replay, warmup=25, rep=100, return_mode="median") / n


def run(d: str, versions, kernels: dict, programs, out_json: str | None) -> int:
    import torch

    from mirage.core.interpret import evaluate
    from mirage.core.serialize import from_json

    rng = np.random.default_rng()
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}, torch {torch.__version__}", flush=True)
    results, bad = [], 0
    for p in programs:
        t0 = time.time()
        vers = [v for v in versions if os.path.isdir(os.path.join(d, v, p, "main"))]
        specs = None
        for v in vers:
            m = json.load(open(os.path.join(d, v, p, "main", "manifest.json")))
            s = [(tuple(x["shape"]), tuple(x["strides"]), x["dtype"]) for x in m["inputs"]]
            assert specs is None or s == specs, f"{p}: {v}'s inputs differ from {vers[0]}'s"
            specs = s
        arrs = [rng.standard_normal(sh) * (1.0 / np.sqrt(sh[0]) if len(sh) == 2 else 1.0) for sh, _, _ in specs]
        xs = [torch.from_numpy(a).to("cuda", torch.float16) for a in arrs]
        g = from_json(open(os.path.join(d, "json", p + ".json")).read())
        assert [tuple(t.shape) for t in g.inputs] == [sh for sh, _, _ in specs], f"{p}: the JSON's inputs are not the bundles'"
        refs = evaluate(g, [x.double().cpu().numpy() for x in xs])  # float64 of the fp16 inputs
        V = {v: Version(os.path.join(d, v, p, "main"), xs) for v in vers}
        r = {"program": p, "versions": {}, "kernels": {}}
        for v, ver in V.items():
            errs = ver.run_checked(refs)
            diff0 = [float((o.float() - o0.float()).abs().max()) for o, o0 in zip(ver.outs, V[vers[0]].outs)]
            r["versions"][v] = {"err": errs, "maxdiff_vs_" + vers[0]: diff0, "kernels": len(ver.m.kernels)}
            print(f"{p} {v}: {len(ver.m.kernels)} kernels, rel. err vs float64 "
                  + ", ".join(f"{e:.2e}" for e in errs) + f"; max |diff| vs {vers[0]} "
                  + ", ".join(f"{x:.3g}" for x in diff0), flush=True)
            bad += not all(np.isfinite(errs))
        layer_graphs = {v: graph_of(lambda ver=ver: ver.k(*ver.xs, out=ver.outs), 1) for v, ver in V.items()}
        # one-kernel launchers, checked before timing
        L = {}
        for name in kernels.get(p, ()):
            first = None
            for v, ver in V.items():
                i = ver.index(name)
                if i is None:
                    print(f"{p} {v} {name}: not in this bundle", flush=True)
                    continue
                w = [ver._tensor(kind, j) for kind, j in ver.written(i)]
                keep = [t.clone() for t in w]
                for t in w:
                    t.fill_(float("nan"))
                go = ver.launcher(i)
                go()
                torch.cuda.synchronize()
                same = all(torch.equal(t, c) for t, c in zip(w, keep))
                finite = all(bool(torch.isfinite(t).all()) for t in w)
                spec = ver.m.kernels[i]
                info = {"grid": spec.grid, "block": spec.block, "smem": spec.smem_bytes,
                        "writes": [f"{kind}{j} {list(t.shape)}" for (kind, j), t in zip(ver.written(i), w)],
                        "alone_equals_full_run": same, "finite": finite}
                if first is None:
                    first = (v, w)
                else:
                    info[f"maxdiff_vs_{first[0]}"] = [float((t.float() - t0.float()).abs().max())
                                                      if t.shape == t0.shape else None for t, t0 in zip(w, first[1])]
                bad += not (same and finite)
                r["kernels"].setdefault(name, {})[v] = info
                L[(name, v)] = (graph_of(go, WARM_LAUNCHES), graph_of(go, 1))
                print(f"{p} {v} {name}: grid {spec.grid} block {spec.block[0]} smem {spec.smem_bytes}, writes "
                      f"{info['writes']}, alone = full run: {same}, finite: {finite}"
                      + (f", max |diff| vs {first[0]}: {info.get('maxdiff_vs_' + first[0])}" if first[0] != v else ""),
                      flush=True)
        times = {}
        for _ in range(ROUNDS):
            for v in vers:
                times.setdefault(("layer", v), []).append(bench(layer_graphs[v]))
            for (name, v), (gw, gc) in L.items():
                times.setdefault((name, v, "warm"), []).append(bench(gw, WARM_LAUNCHES))
                times.setdefault((name, v, "cold"), []).append(bench(gc))
        for v in vers:
            t = times[("layer", v)]
            r["versions"][v]["layer_us"] = t
            print(f"{p} {v}: layer {_median(t):.1f} us (rounds {', '.join(f'{x:.1f}' for x in t)})", flush=True)
        for (name, v), _ in L.items():
            w, c = times[(name, v, "warm")], times[(name, v, "cold")]
            r["kernels"][name][v].update(warm_us=w, cold_us=c)
            print(f"{p} {name} {v}: warm {_median(w):.2f} us ({', '.join(f'{x:.2f}' for x in w)}), "
                  f"cold {_median(c):.2f} us ({', '.join(f'{x:.2f}' for x in c)})", flush=True)
        r["seconds"] = time.time() - t0
        results.append(r)
        del V, layer_graphs, L
        torch.cuda.empty_cache()
        if out_json:
            with open(out_json, "w") as f:
                json.dump({"device": props.name, "torch": torch.__version__, "results": results}, f, indent=1)
    print("\n| program | kernel | " + " | ".join(f"{v} warm / cold µs" for v in versions) + " |")
    for r in results:
        for name, per in r["kernels"].items():
            print(f"| {r['program']} | {name} | " + " | ".join(
                f"{_median(per[v]['warm_us']):.2f} / {_median(per[v]['cold_us']):.2f}" if v in per else "-"
                for v in versions) + " |")
        print(f"| {r['program']} | whole layer | " + " | ".join(
            f"{_median(r['versions'][v]['layer_us']):.1f}" if v in r["versions"] else "-" for v in versions) + " |")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write DIR/json/<program>.json for every program (CPU machine, MLIR)")
    ap.add_argument("--run", help="check and time the bundles under DIR/<version>/<program> (GPU machine)")
    ap.add_argument("--versions", nargs="+", default=["cb", "head"])
    ap.add_argument("--programs", nargs="+", default=None, help="default: every program with a JSON")
    ap.add_argument("--kernels", nargs="*", default=[], help="PROGRAM:NAME,NAME ... kernels to time alone")
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args(argv)
    if a.json:
        return write_json(a.json)
    if a.run:
        kernels = {p: n.split(",") for p, n in (k.split(":", 1) for k in a.kernels)}
        programs = a.programs or sorted(f[:-5] for f in os.listdir(os.path.join(a.run, "json")))
        return run(a.run, a.versions, kernels, programs, a.out)
    ap.error("give --json DIR or --run DIR")


if __name__ == "__main__":
    sys.exit(main())
