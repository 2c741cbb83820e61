"""A LLaMA-3-8B-shaped decoder layer at a decode step through `torch.compile(backend="mirage")`.

    python examples/llama_decode.py            # full size (hidden 4096, 32 heads, 8 KV heads,
                                               # head dim 128, intermediate 14336), batch 1, context 4096
    python examples/llama_decode.py --small    # hidden 64: the import/search/compile path in seconds

The layer is transformers' own `LlamaDecoderLayer` with random weights, fp16, eval mode,
called at a decode step (one new token; rotary embeddings; grouped-query attention over a
KV cache that the step extends; residuals; examples/transformers_layers.py). It is compiled
with our backend (options: `mirage.torch.BACKEND_OPTIONS`; here the fp32 casts of RMSNorm,
SiLU and softmax are imported at fp16, `allow_fp32_upcast_elision`, since kn has no cast),
and the script prints what went to kn, what was fused and what stays in PyTorch.

On a GPU (where the search and the PTX compiler are installed too) the compiled layer runs
our kernels: its outputs (the layer's output, the updated K and V) are checked against the
eager layer and against float64, and it is timed against eager and
`torch.compile(mode="reduce-overhead")`. On a CPU the compiled layer runs the captured
graph, so its outputs must equal eager's bit for bit, which is checked.
(benchmarks/models.py does the GPU part on a machine without MLIR: build here, run there.)
"""
import argparse
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformers_layers as TL  # noqa: E402


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="hidden 64, 4 heads, 2 KV heads, head dim 16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=None, help="cached positions (default 4096; 64 with --small)")
    ap.add_argument("--time-limit", type=float, default=120.0, help="search time limit per kn segment (s)")
    a = ap.parse_args(argv)
    import mirage.torch as mt

    cuda = torch.cuda.is_available()
    dims = TL.SMALL if a.small else TL.LLAMA3_8B
    context = a.context or (64 if a.small else 4096)
    step, ins = TL.decode_step("llama", dims, a.batch, context, torch.float16)
    if cuda:
        step, ins = step.cuda(), [x.cuda() for x in ins]
    mt.BACKEND_OPTIONS.update(allow_fp32_upcast_elision=True, time_limit=a.time_limit)
    compiled = torch.compile(step, backend="mirage")

    t0 = time.monotonic()
    with torch.no_grad():
        ours = compiled(*ins)  # the first call compiles: import, search, PTX
    print(f"first call (compile) {time.monotonic() - t0:.1f} s")
    for r in mt.compile_reports():
        print(r.report())
        print("\n".join("  " + n for n in getattr(r, "notes", [])))

    with torch.no_grad():
        eager = step(*ins)
    names = ("output", "keys", "values")
    if not cuda:
        same = all(torch.equal(o, e) for o, e in zip(ours, eager))
        print(f"CPU: the compiled layer runs the captured graph; equal to eager bit for bit: {same}")
        return 0 if same else 1

    from triton.testing import do_bench

    with torch.no_grad():
        ref = TL.DecodeStep(step.layer.double(), step.cfg)(*[x.double() for x in ins])
        step.layer.half()
    ok = True
    for n, o, e, r in zip(names, ours, eager, ref):
        err, err_eager = rel(o, r), rel(e, r)
        ok &= err < 1e-2
        print(f"{n}: rel. error vs float64 {err:.2e} (eager fp16 {err_eager:.2e}), vs eager {rel(o, e):.2e}")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_ours = do_bench(lambda: compiled(*ins), warmup=50, rep=300, return_mode="median") * 1e3
        t_eager = do_bench(lambda: step(*ins), warmup=50, rep=300, return_mode="median") * 1e3
        torch._dynamo.reset()
        ro = torch.compile(step, mode="reduce-overhead")
        for _ in range(3):
            ro(*ins)
        t_ro = do_bench(lambda: ro(*ins), warmup=50, rep=300, return_mode="median") * 1e3
    print(f"decode step, batch {a.batch}, context {context}: ours {t_ours:.1f} us, eager {t_eager:.1f} us, "
          f"torch.compile(mode='reduce-overhead') {t_ro:.1f} us")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
