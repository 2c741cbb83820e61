"""Ordinary programs, written as a new user would write them, to check that the default
search (`superoptimize()` with no options) fuses each kind: element-wise chains, softmax
with and without the max subtracted, norms before a matmul, gated MLPs, an MLP of two
matmuls, a residual add and scaled attention at head dim 128.

Each `Program` builds its reference at a size (`"decode"`: LLM decode shapes, 8 tokens
and hidden 4096; `"small"`: the same program at sizes the CPU tests search in seconds)
and defines it independently in numpy float64. Used by `test/python/test_search_default.py`
and `benchmarks/search_benchmarks.py --programs`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

import mirage as mi

# (tokens, hidden, intermediate, attention: heads, KV length, head dim)
SIZES = {
    "decode": dict(t=8, h=4096, f=4096, heads=32, kv=1024, d=128),
    "small": dict(t=8, h=256, f=256, heads=4, kv=256, d=128),
}
EPS = 1e-5


@dataclass(frozen=True)
class Program:
    name: str
    build: Callable[[dict], tuple]  # size dict -> (graph, input shapes)
    numpy: Callable[..., np.ndarray]

    def reference(self, size: str = "decode") -> mi.KNGraph:
        return self.build(SIZES[size])[0]

    def input_shapes(self, size: str = "decode") -> list:
        return self.build(SIZES[size])[1]

    def random_inputs(self, size: str, rng: np.random.Generator) -> list[np.ndarray]:
        return [rng.standard_normal(s) for s in self.input_shapes(size)]


def _graph(name, shapes):
    g = mi.new_kernel_graph(name)
    return g, [g.new_input(s) for s in shapes]


def _mean(g, x, n):
    return g.div(g.reduction(x, len(x.shape) - 1), g.constant(float(n), (1,) * len(x.shape)))


# -- element-wise and row-wise ------------------------------------------------------------

def _eltwise(s):
    shapes = [(s["t"], s["h"]), (s["h"],), (s["h"],)]
    g, (x, a, b) = _graph("eltwise_chain", shapes)
    g.mark_output(g.mul(g.gelu(g.add(g.mul(x, a), b)), x))
    return g, shapes


def _gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def _softmax(s, subtract_max):
    shapes = [(s["t"] * s["heads"], s["kv"])]
    g, (x,) = _graph("softmax_max" if subtract_max else "softmax", shapes)
    if subtract_max:
        x = g.sub(x, g.reduce_max(x, 1))
    e = g.exp(x)
    g.mark_output(g.div(e, g.reduction(e, 1)))
    return g, shapes


def _softmax_np(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# -- norms before a matmul ----------------------------------------------------------------

def _rmsnorm(g, x, gamma, n):
    ms = _mean(g, g.square(x), n)
    return g.mul(g.mul(x, g.rsqrt(g.add(ms, g.constant(EPS, (1, 1))))), gamma)


def _rmsnorm_np(x, gamma):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * gamma


def _rmsnorm_linear(s):
    shapes = [(s["t"], s["h"]), (s["h"],), (s["h"], s["f"])]
    g, (x, gamma, w) = _graph("rmsnorm_linear", shapes)
    g.mark_output(g.matmul(_rmsnorm(g, x, gamma, s["h"]), w))
    return g, shapes


def _layernorm_linear(s):
    shapes = [(s["t"], s["h"]), (s["h"],), (s["h"],), (s["h"], s["f"])]
    g, (x, gamma, beta, w) = _graph("layernorm_linear", shapes)
    xc = g.sub(x, _mean(g, x, s["h"]))
    var = _mean(g, g.square(xc), s["h"])
    y = g.add(g.mul(g.mul(xc, g.rsqrt(g.add(var, g.constant(EPS, (1, 1))))), gamma), beta)
    g.mark_output(g.matmul(y, w))
    return g, shapes


def _layernorm_np(x, gamma, beta):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + EPS) * gamma + beta


# -- MLPs -----------------------------------------------------------------------------------

def _gated(s, act, norm):
    shapes = [(s["t"], s["h"])] + ([(s["h"],)] if norm else []) + [(s["h"], s["f"])] * 2
    g, ins = _graph(f"{'rmsnorm_' if norm else ''}gated_mlp_{act}", shapes)
    x = _rmsnorm(g, ins[0], ins[1], s["h"]) if norm else ins[0]
    w1, w2 = ins[-2:]
    g.mark_output(g.mul(getattr(g, act)(g.matmul(x, w1)), g.matmul(x, w2)))
    return g, shapes


_ACT = {"silu": lambda v: v / (1 + np.exp(-v)), "gelu": _gelu, "relu": lambda v: np.maximum(v, 0)}


def _mlp2(s):
    shapes = [(s["t"], s["h"]), (s["h"], s["f"]), (s["f"], s["h"])]
    g, (x, w1, w2) = _graph("mlp_relu", shapes)
    g.mark_output(g.matmul(g.relu(g.matmul(x, w1)), w2))
    return g, shapes


def _residual(s):
    """The output projection of attention with the residual stream added: h = x + o @ Wo."""
    shapes = [(s["t"], s["h"]), (s["t"], s["h"]), (s["h"], s["h"])]
    g, (x, o, w) = _graph("linear_residual", shapes)
    g.mark_output(g.add(x, g.matmul(o, w)))
    return g, shapes


# -- attention --------------------------------------------------------------------------------

def _attention(s):
    """Decode attention, one query per (token, head): scores scaled by 1/sqrt(d)."""
    b = s["t"] * s["heads"] // 8  # 8 query heads share a KV head (GQA): 8 query rows
    shapes = [(b, 8, s["d"]), (b, s["d"], s["kv"]), (b, s["kv"], s["d"])]
    g, (q, k, v) = _graph("attention_scaled", shapes)
    sc = g.mul(g.matmul(q, k), g.constant(1.0 / np.sqrt(s["d"]), (1, 1, 1)))
    e = g.exp(sc)
    g.mark_output(g.div(g.matmul(e, v), g.reduction(e, 2)))
    return g, shapes


def _attention_np(q, k, v):
    sc = q @ k / np.sqrt(q.shape[-1])
    return _softmax_np(sc) @ v


PROGRAMS = {p.name: p for p in [
    Program("eltwise_chain", _eltwise, lambda x, a, b: _gelu(x * a + b) * x),
    Program("softmax", lambda s: _softmax(s, False), _softmax_np),
    Program("softmax_max", lambda s: _softmax(s, True), _softmax_np),
    Program("rmsnorm_linear", _rmsnorm_linear, lambda x, gm, w: _rmsnorm_np(x, gm) @ w),
    Program("layernorm_linear", _layernorm_linear, lambda x, gm, bt, w: _layernorm_np(x, gm, bt) @ w),
    Program("gated_mlp_silu", lambda s: _gated(s, "silu", False),
            lambda x, w1, w2: _ACT["silu"](x @ w1) * (x @ w2)),
    Program("gated_mlp_gelu", lambda s: _gated(s, "gelu", False),
            lambda x, w1, w2: _ACT["gelu"](x @ w1) * (x @ w2)),
    Program("rmsnorm_gated_mlp_silu", lambda s: _gated(s, "silu", True),
            lambda x, gm, w1, w2: (lambda y: _ACT["silu"](y @ w1) * (y @ w2))(_rmsnorm_np(x, gm))),
    Program("mlp_relu", _mlp2, lambda x, w1, w2: np.maximum(x @ w1, 0) @ w2),
    Program("linear_residual", _residual, lambda x, o, w: x + o @ w),
    Program("attention_scaled", _attention, _attention_np),
]}
