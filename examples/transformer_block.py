"""Import a small pre-norm transformer block from PyTorch, superoptimize it, and print
what went to kn (and was fused) and what stays in PyTorch.

    PYTHONPATH=python python examples/transformer_block.py [--cuda]

Without the search or a GPU the module still imports; `superoptimize` then reports
that it keeps the imported graphs and runs the original module (docs/torch.md).
"""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import mirage.torch as mt


class Block(nn.Module):
    def __init__(self, d=64, heads=4, hidden=128):
        super().__init__()
        self.h = heads
        self.g1 = nn.Parameter(torch.ones(d))
        self.g2 = nn.Parameter(torch.ones(d))
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    @staticmethod
    def norm(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g

    def forward(self, x):
        B, S, D = x.shape
        y = self.norm(x, self.g1)
        q, k, v = (t(y).view(B, S, self.h, D // self.h).transpose(1, 2) for t in (self.q, self.k, self.v))
        a = torch.softmax(q @ k.transpose(-1, -2) / (D // self.h) ** 0.5, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, S, D))
        y = self.norm(x, self.g2)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


def main():
    torch.manual_seed(0)
    dev = "cuda" if "--cuda" in sys.argv and torch.cuda.is_available() else "cpu"
    block = Block()
    x = torch.randn(2, 8, 64)
    res = mt.import_module(block, [x])
    print(res.report())
    print()
    for g in res.graphs:
        fused = [op.kind for op in g.ops if op.kind in ("silu", "gelu", "rms_norm", "div", "graph_def")]
        print(f"@{g.name}: {len(g.ops)} kn ops, {len(g.inputs)} inputs; recognised/fused ops: {fused}")
    # the imported graph computes the block (reference interpreter, float64)
    (got,) = res.graph.evaluate(res.graph_inputs(x))
    want = block.double()(x.double()).detach().numpy()
    block.float()
    print(f"max |kn - torch| = {np.abs(got - want).max():.2e}")
    opt = mt.superoptimize(block.to(dev), [x.to(dev)])
    print()
    print(opt.report)
    out = opt(x.to(dev))
    print(f"superoptimized module output matches: {torch.allclose(out, block(x.to(dev)), atol=1e-5)}")


if __name__ == "__main__":
    main()
