"""The six benchmark computations (and a small transformer block) as plain PyTorch
modules, sizes as arguments: the PyTorch front end's test cases and the drop-in
benchmark (benchmarks/torch_dropin.py) use these same definitions."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNormLinear(nn.Module):
    def __init__(self, d=64, n=96):
        super().__init__()
        self.g = nn.Parameter(torch.rand(d) + 0.5)
        self.w = nn.Linear(d, n, bias=False)

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g
        return self.w(x)


class LayerNormLinear(nn.Module):
    """`nn.LayerNorm` then `nn.Linear`: the pre-norm projection of GPT-2, BERT and ViT blocks."""

    def __init__(self, d=64, n=96):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.w = nn.Linear(d, n)
        with torch.no_grad():  # not the identity affine of a fresh LayerNorm
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x):
        return self.w(self.norm(x))


class GatedMLP(nn.Module):
    def __init__(self, d=64, h=128):
        super().__init__()
        self.w1 = nn.Linear(d, h, bias=False)
        self.w2 = nn.Linear(d, h, bias=False)

    def forward(self, x):
        return F.silu(self.w1(x)) * self.w2(x)


class LoRA(nn.Module):
    def __init__(self, d=64, n=128, r=8):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, n) / 8)
        self.a = nn.Parameter(torch.randn(d, r) / 8)
        self.b = nn.Parameter(torch.randn(r, n) / 4)

    def forward(self, x):
        return x @ self.w + (x @ self.a) @ self.b


class Attention(nn.Module):
    """GQA benchmark: exp-normalized attention with K stored transposed."""

    def forward(self, q, k, v):
        e = torch.exp(q @ k)
        return (e @ v) / e.sum(-1, keepdim=True)


class QKNormAttention(nn.Module):
    def forward(self, q, k, v):
        q = q / q.pow(2).mean(-1, keepdim=True).sqrt() / 8.0
        k = k / k.pow(2).mean(1, keepdim=True).sqrt()
        return torch.softmax(q @ k, dim=-1) @ v


class NTrans(nn.Module):
    def forward(self, h, x, a):
        def norm(t):
            return t / t.pow(2).mean(-1, keepdim=True).sqrt()

        return norm(x + a * (norm(h) - x))


class Block(nn.Module):
    """A small pre-norm transformer block (separate q/k/v projections, softmax attention,
    GELU MLP): an 'LLM block' beyond the six benchmarks."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.h = heads
        self.g = nn.Parameter(torch.rand(d) + 0.5)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        B, S, D = x.shape
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.g

        def heads(t):
            return t.view(B, S, self.h, D // self.h).transpose(1, 2)

        q, k, v = heads(self.q(y)), heads(self.k(y)), heads(self.v(y))
        a = torch.softmax(q @ k.transpose(-1, -2) / (D // self.h) ** 0.5, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, S, D))
        return x + self.down(F.gelu(self.up(x)))


class WithUnsupported(nn.Module):
    """abs and log have no kn equivalent: they stay a PyTorch segment between kn ones."""

    def __init__(self, d=1024):
        super().__init__()
        self.w1 = nn.Linear(d, d, bias=False)
        self.w2 = nn.Linear(d, d, bias=False)

    def forward(self, x):
        y = self.w1(x) * 0.5
        z = torch.log(y.abs() + 1.0)
        return self.w2(z) + y
