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
"""
from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python")]

import torch  # noqa: E402


def block(family: str, d: int):
    """The module of one block of `family` at hidden size d (4 heads), and whether it takes
    token ids (a one-layer base model: Phi-3's and Mistral's decoder layers take the rotary
    embedding from it) rather than hidden states."""
    import transformers as T

    small = dict(hidden_size=d, intermediate_size=4 * d, num_attention_heads=4, num_hidden_layers=1,
                 vocab_size=128)
    if family == "gpt2":
        return T.GPT2Model(T.GPT2Config(n_embd=d, n_head=4, n_layer=1, vocab_size=128, n_positions=128)).h[0], False
    if family == "bert":
        return T.BertModel(T.BertConfig(**small)).encoder.layer[0], False
    if family == "vit":
        m = T.ViTModel(T.ViTConfig(**{k: v for k, v in small.items() if k != "vocab_size"}, image_size=32,
                                   patch_size=8))
        return (m.encoder.layer if hasattr(m, "encoder") else m.layers)[0], False
    if family == "phi3":  # fused qkv_proj and gate_up_proj
        return T.Phi3Model(T.Phi3Config(**small, pad_token_id=0, use_cache=False)), True
    if family == "mistral":
        return T.MistralModel(T.MistralConfig(**small, num_key_value_heads=2, use_cache=False)), True
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="*", default=["gpt2", "bert", "vit", "phi3", "mistral"])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "models_import.md"))
    a = ap.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
