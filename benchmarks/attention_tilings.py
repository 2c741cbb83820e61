"""Hand-written tilings of MCFuser's attention rows (S1-S9 of benchmarks/mbci.py) beside the
search's picks, for `mbci.py --run-sweep`: Mirage's attention μGraph (exp(Q @ K * scale) @ V
divided by the row sums of exp) with 64 query rows a block, `tn` keys an iteration and the
whole head dim (no grid split of V's columns), lowered with the default split, with forced
splits (`-s<k>`, combined in a cluster), and without clusters (`-fold`: the last block
combines through device memory).

    PYTHONPATH=python:examples python benchmarks/attention_tilings.py OUT S7,S8,S9 --tn 32,64 [--picks DIR]
    PYTHONPATH=python:examples:benchmarks python3 benchmarks/mbci.py --run-sweep OUT    # GPU

`--picks DIR`: also the search's pick of each row, from `mbci.py --build DIR` (DIR/<row>.mlir).
Results: benchmarks/results/mbci.md (2026-11-25 14:20-14:37).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mbci  # noqa: E402
from mirage.lower import Options  # noqa: E402
from mirage.mlir.importer import load_mlir, parse_mlir  # noqa: E402

TEMPLATE = """module {{
  func.func @att(%q: tensor<{b}x{M}x{K}xf16>, %k: tensor<{b}x{K}x{N}xf16>, %v: tensor<{b}x{N}x{H}xf16>) -> tensor<{b}x{M}x{H}xf16> {{
    %0 = kn.graph_def (%q, %k, %v) grid [{b}, {gy}, 1] block [128, 1, 1] forloop {R} dimx 64 : (tensor<{b}x{M}x{K}xf16>, tensor<{b}x{K}x{N}xf16>, tensor<{b}x{N}x{H}xf16>) -> tensor<{b}x{M}x{H}xf16> {{
    ^bb0(%a0: tensor<{b}x{M}x{K}xf16>, %a1: tensor<{b}x{K}x{N}xf16>, %a2: tensor<{b}x{N}x{H}xf16>):
      %b0 = tb.input %a0 map <{x}y -> 1> : tensor<{b}x{M}x{K}xf16> -> tensor<1x{tm}x{K}xf16>
      %b1 = tb.input %a1 map <{x}i -> 2> : tensor<{b}x{K}x{N}xf16> -> tensor<1x{K}x{tn}xf16>
      %b2 = tb.input %a2 map <{x}i -> 1> : tensor<{b}x{N}x{H}xf16> -> tensor<1x{tn}x{H}xf16>
      %b3 = tb.matmul %b0, %b1 : (tensor<1x{tm}x{K}xf16>, tensor<1x{K}x{tn}xf16>) -> tensor<1x{tm}x{tn}xf16>
      %b4 = tb.thread_graph (%b3) : (tensor<1x{tm}x{tn}xf16>) -> tensor<1x{tm}x{tn}xf16> {{
      ^bb0(%s0: f16):
        %t0 = th.mul_scalar %s0, {scale} : f16
        %t1 = th.exp %t0 : f16
        th.yield %t1 : f16
      }}
      %b5 = tb.matmul %b4, %b2 : (tensor<1x{tm}x{tn}xf16>, tensor<1x{tn}x{H}xf16>) -> tensor<1x{tm}x{H}xf16>
      %b6 = tb.forloop_accum none %b5 : tensor<1x{tm}x{H}xf16> -> tensor<1x{tm}x{H}xf16>
      %b7 = tb.forloop_accum sum %b4 : tensor<1x{tm}x{tn}xf16> -> tensor<1x{tm}x1xf16>
      %b8 = tb.thread_graph (%b6, %b7) : (tensor<1x{tm}x{H}xf16>, tensor<1x{tm}x1xf16>) -> tensor<1x{tm}x{H}xf16> {{
      ^bb0(%s0: f16, %s1: f16):
        %t0 = th.div %s0, %s1 : f16
        th.yield %t0 : f16
      }}
      tb.output %b8 map <{x}y -> 1> : tensor<1x{tm}x{H}xf16>
    }}
    return %0 : tensor<{b}x{M}x{H}xf16>
  }}
}}
"""


def graph(row: str, tm: int, tn: int):
    """Row `row`'s attention in blocks of `tm` query rows, `tn` keys an iteration."""
    b, M, N, K, H = mbci.ROWS[row]
    return parse_mlir(TEMPLATE.format(b=b, M=M, N=N, K=K, H=H, tm=tm, tn=tn, gy=M // tm, R=N // tn,
                                      x="x -> 0, " if b > 1 else "", scale=repr(K ** -0.5)))[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("rows", help="comma-separated attention rows (S1-S9)")
    ap.add_argument("--tn", default="32,64", help="keys an iteration (comma-separated)")
    ap.add_argument("--splits", default="2,4,8", help="forced splits (comma-separated)")
    ap.add_argument("--picks", metavar="DIR", help="an `mbci.py --build` directory: add the search's picks")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    meta, failed = {}, 0

    def put(name, row, g, opts=None):
        nonlocal failed
        entry = mbci.sweep_bundle(a.out, name, row, "chain", g, opts)
        if entry is None:
            failed += 1
        else:
            meta[name] = entry

    for row in a.rows.split(","):
        if row not in mbci.ATTN:
            ap.error(f"{row}: not an attention row (S1-S9)")
        if a.picks:
            put(f"{row}__pick", row, load_mlir(os.path.join(a.picks, f"{row}.mlir"))[0])
        for tn in (int(x) for x in a.tn.split(",")):
            put(f"{row}__m64n{tn}", row, graph(row, 64, tn))
            put(f"{row}__m64n{tn}-fold", row, graph(row, 64, tn), Options(clusters=False))
            for s in (int(x) for x in a.splits.split(",")):
                if (mbci.ROWS[row][2] // tn) % s == 0:
                    put(f"{row}__m64n{tn}-s{s}", row, graph(row, 64, tn), Options(split=s))
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
