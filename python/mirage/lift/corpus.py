"""A corpus of Triton kernels of the kinds the verified-lifting paper evaluates (§6.1.1):
element-wise operators and activations, fused kernels (SwiGLU, GEGLU, residual+RMSNorm,
a matmul with a bias and activation epilogue), and foundation kernels (row reductions,
softmax, RMSNorm, LayerNorm, tiled matmul), several with masked tails and chunked loops,
written here in the style of the Triton tutorials, FlagGems and Liger-Kernel.

`CASES` says how to launch each kernel on small sizes (what `lift_triton` needs), what
it computes in numpy float64 (`reference`), and the textbook formula expected after
simplification. `BUGGED` are kernels with deliberate bugs and the formula each one
wrongly appears to implement.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import triton
import triton.language as tl


# -- element-wise ------------------------------------------------------------------------------

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def reciprocal_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    tl.store(out_ptr + offs, 1.0 / x, mask=mask)


@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, tl.exp(x), mask=mask)


@triton.jit
def rsqrt_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    tl.store(out_ptr + offs, tl.rsqrt(x), mask=mask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


@triton.jit
def relu_where_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)


@triton.jit
def square_relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    r = tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0)
    tl.store(out_ptr + offs, r * r, mask=mask)


@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


@triton.jit
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * tl.sigmoid(x), mask=mask)


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)), mask=mask)


@triton.jit
def gelu_tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # the tanh approximation (GPT-2, Liger-Kernel's geglu)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + tl.extra.cuda.libdevice.tanh(inner)), mask=mask)


@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(x > 0, x, 0.01 * x), mask=mask)


@triton.jit
def _silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def swiglu_helper_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # FlagGems style: the activation in a @triton.jit helper, inlined by the lifter
    offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, _silu(a) * b, mask=mask)


@triton.jit
def swiglu_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    silu_a = a / (1.0 + tl.exp(-a))
    tl.store(out_ptr + offs, silu_a * b, mask=mask)


@triton.jit
def geglu_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    g = 0.5 * a * (1.0 + tl.math.erf(a * 0.7071067811865476))
    tl.store(out_ptr + offs, g * b, mask=mask)


@triton.jit
def fill_zeros_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


# -- row kernels (one program per row) ---------------------------------------------------------

@triton.jit
def row_sum_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def row_max_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(out_ptr + row, tl.max(x, axis=0))


@triton.jit
def row_mean_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0) / n_cols)


@triton.jit
def softmax_kernel(out_ptr, x_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, num / den, mask=mask)


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    ms = tl.sum(x * x, axis=0) / n_cols
    rstd = tl.rsqrt(ms + eps)
    tl.store(out_ptr + row * stride + cols, x * rstd * w, mask=mask)


@triton.jit
def rmsnorm_chunked_kernel(x_ptr, w_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask)
        tl.store(out_ptr + row * stride + cols, x * rstd * w, mask=mask)


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(out_ptr + row * stride + cols, xc * rstd * w + b, mask=mask)


@triton.jit
def layernorm_chunked_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    # the Triton tutorial's layer norm: two passes over the row in chunks, then a third to write
    row = tl.program_id(0)
    base = x_ptr + row * stride
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        acc2 += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc2, axis=0) / n_cols + eps)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < n_cols
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride + cols, (x - mean) * rstd * w + b, mask=mask)


@triton.jit
def add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, h_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    # fused residual add + RMSNorm (two outputs: the sum and its normalisation)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    h = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0) + \
        tl.load(r_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(h_ptr + row * stride + cols, h, mask=mask)
    rstd = tl.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    tl.store(out_ptr + row * stride + cols, h * rstd * w, mask=mask)


# -- matmul ------------------------------------------------------------------------------------

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_bias_relu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
    out = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], out, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_bias_gelu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    h = acc + tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]
    out = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], out, mask=(rm[:, None] < M) & (rn[None, :] < N))


# -- deliberately bugged kernels ---------------------------------------------------------------

@triton.jit
def add_wrong_mask_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - 1  # bug: drops the last element
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def add_off_by_one_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs + 1, mask=mask)  # bug: reads one element ahead
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def shift_off_by_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - 1
    x = tl.load(x_ptr + offs + 1, mask=mask, other=0.0)  # bug: in range, but the wrong element
    tl.store(out_ptr + offs, tl.exp(x), mask=offs < n)


@triton.jit
def softmax_wrong_other_kernel(out_ptr, x_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)  # bug: padding lanes count in the sum
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def rmsnorm_wrong_count_kernel(x_ptr, w_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / BLOCK + eps)  # bug: divides by the block, not the row length
    tl.store(out_ptr + row * stride + cols, x * rstd * w, mask=mask)


@triton.jit
def add_hardcoded_size_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < 10  # bug: the launched size written as a literal instead of n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def row_mean_hardcoded_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0) / 6)  # bug: the launched row length as a literal


# -- launch descriptions -----------------------------------------------------------------------

def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def _ln(x, w, b, eps):
    c = x - x.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps) * w + b


@dataclass
class Case:
    """One kernel launch: `make(rng)` returns the launch arguments (arrays first-class);
    `reference(*arrays_read)` the arrays the kernel writes, in argument order."""

    name: str
    kernel: object
    grid: object
    make: Callable
    constexprs: dict
    reference: Callable
    formula: str = ""  # the textbook formula lift_triton must print
    kind: str = ""  # activation | fused | foundation (paper §6.1.1)
    notes: str = ""
    extra: dict = field(default_factory=dict)


def _vec(n, k=1):
    return lambda rng: [rng.standard_normal(n).astype(np.float32) for _ in range(k)]


def _ew(name, kernel, fn, k, formula, n=10, block=4, kind="element-wise", positive=False):
    def make(rng):
        xs = [rng.standard_normal(n).astype(np.float32) for _ in range(k)]
        if positive:
            xs = [np.abs(x) + 0.5 for x in xs]
        return xs + [np.zeros(n, np.float32), n]
    return Case(name, kernel, (-(-n // block),), make, {"BLOCK": block}, fn, formula, kind)


def _rows(name, kernel, fn, formula, rows=3, cols=6, block=8, extra_args=(), out_shape=None, inputs=1,
          kind="foundation", order="xo"):
    def make(rng):
        xs = [rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(inputs)]
        out = np.zeros(out_shape or (rows, cols), np.float32)
        return (xs + [out] if order == "xo" else [out] + xs) + list(extra_args)
    return Case(name, kernel, (rows,), make, {"BLOCK": block}, fn, formula, kind)


def _norm(name, kernel, fn, formula, bias=False, rows=3, cols=6, block=4):
    def make(rng):
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        w = rng.standard_normal(cols).astype(np.float32)
        arrs = [x, w] + ([rng.standard_normal(cols).astype(np.float32)] if bias else [])
        return arrs + [np.zeros((rows, cols), np.float32), cols, cols, 1e-5]
    return Case(name, kernel, (rows,), make, {"BLOCK": block}, fn, formula, "foundation" if not bias else "foundation")


def _mm(name, kernel, fn, formula, bias=False, M=4, N=6, K=5, bm=2, bn=4, bk=2, kind="foundation"):
    def make(rng):
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        arrs = [a, b] + ([rng.standard_normal(N).astype(np.float32)] if bias else [])
        return arrs + [np.zeros((M, N), np.float32), M, N, K]
    return Case(name, kernel, (-(-M // bm), -(-N // bn)), make, {"BM": bm, "BN": bn, "BK": bk}, fn, formula, kind)


CASES = [
    _ew("add", add_kernel, lambda x, y: [x + y], 2, "out = x + y"),
    _ew("mul", mul_kernel, lambda x, y: [x * y], 2, "out = x * y"),
    Case("axpy", axpy_kernel, (3,), lambda rng: [rng.standard_normal(10).astype(np.float32),
                                                  rng.standard_normal(10).astype(np.float32),
                                                  np.zeros(10, np.float32), 2.5, 10],
         {"BLOCK": 4}, lambda x, y: [2.5 * x + y], "out = alpha * x + y", "element-wise"),
    _ew("neg", neg_kernel, lambda x: [-x], 1, "out = -x"),
    _ew("reciprocal", reciprocal_kernel, lambda x: [1.0 / x], 1, "out = 1 / x"),
    _ew("exp", exp_kernel, lambda x: [np.exp(x)], 1, "out = exp(x)"),
    _ew("rsqrt", rsqrt_kernel, lambda x: [1.0 / np.sqrt(x)], 1, "out = 1 / sqrt(x)", positive=True),
    _ew("relu", relu_kernel, lambda x: [np.maximum(x, 0)], 1, "out = relu(x)", kind="activation"),
    _ew("relu_where", relu_where_kernel, lambda x: [np.maximum(x, 0)], 1, "out = relu(x)", kind="activation"),
    _ew("square_relu", square_relu_kernel, lambda x: [np.maximum(x, 0) ** 2], 1, "out = relu(x) * relu(x)", kind="activation"),
    _ew("sigmoid", sigmoid_kernel, lambda x: [_sig(x)], 1, "out = sigmoid(x)", kind="activation"),
    _ew("silu", silu_kernel, lambda x: [x * _sig(x)], 1, "out = silu(x)", kind="activation"),
    _ew("gelu", gelu_kernel, lambda x: [_gelu(x)], 1, "out = gelu(x)", kind="activation"),
    _ew("gelu_tanh", gelu_tanh_kernel, lambda x: [0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))],
        1, "out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * x * x)))", kind="activation"),
    _ew("leaky_relu", leaky_relu_kernel, lambda x: [np.where(x > 0, x, 0.01 * x)], 1, "out = leaky_relu(x, 0.01)",
        kind="activation"),
    _ew("swiglu_helper", swiglu_helper_kernel, lambda a, b: [a * _sig(a) * b], 2, "out = silu(a) * b", kind="fused"),
    _ew("swiglu", swiglu_kernel, lambda a, b: [a * _sig(a) * b], 2, "out = silu(a) * b", kind="fused"),
    _ew("geglu", geglu_kernel, lambda a, b: [_gelu(a) * b], 2, "out = gelu(a) * b", kind="fused"),
    Case("zeros", fill_zeros_kernel, (3,), lambda rng: [np.ones(10, np.float32), 10], {"BLOCK": 4},
         lambda: [np.zeros(10)], "out = 0", "foundation"),
    _ew("add_tail", add_kernel, lambda x, y: [x + y], 2, "out = x + y", n=13, block=8, kind="foundation"),
    _rows("row_sum", row_sum_kernel, lambda x: [x.sum(axis=1)], "out = sum(x, 1)", out_shape=(3,),
          extra_args=(6, 6)),
    _rows("row_max", row_max_kernel, lambda x: [x.max(axis=1)], "out = max(x, 1)", out_shape=(3,),
          extra_args=(6, 6)),
    _rows("row_mean_chunked", row_mean_kernel, lambda x: [x.mean(axis=1)], "out = mean(x, 1)", out_shape=(3,),
          extra_args=(6, 6), block=4),
    _rows("softmax", softmax_kernel, lambda x: [_softmax(x)], "out = exp(x) / sum(exp(x), 1)",
          extra_args=(6, 6, 6), order="ox"),
    _norm("rmsnorm", rmsnorm_kernel, lambda x, w: [_rms(x, w, 1e-5)], "out = x / sqrt(mean(x * x, 1) + eps) * w",
          block=8),
    _norm("rmsnorm_chunked", rmsnorm_chunked_kernel, lambda x, w: [_rms(x, w, 1e-5)],
          "out = x / sqrt(mean(x * x, 1) + eps) * w"),
    _norm("layernorm", layernorm_kernel, lambda x, w, b: [_ln(x, w, b, 1e-5)],
          "out = (x - mean(x, 1)) / sqrt(mean((x - mean(x, 1)) * (x - mean(x, 1)), 1) + eps) * w + b",
          bias=True, rows=2, cols=3, block=4),
    _norm("layernorm_chunked", layernorm_chunked_kernel, lambda x, w, b: [_ln(x, w, b, 1e-5)],
          "out = (x - mean(x, 1)) / sqrt(mean((x - mean(x, 1)) * (x - mean(x, 1)), 1) + eps) * w + b",
          bias=True),
    Case("add_rmsnorm", add_rmsnorm_kernel, (3,),
         lambda rng: [rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal((3, 6)).astype(np.float32),
                      rng.standard_normal(6).astype(np.float32), np.zeros((3, 6), np.float32),
                      np.zeros((3, 6), np.float32), 6, 6, 1e-5],
         {"BLOCK": 8}, lambda x, r, w: [x + r, _rms(x + r, w, 1e-5)],
         "h = x + r; out = (x + r) / sqrt(mean((x + r) * (x + r), 1) + eps) * w", "fused"),
    _mm("matmul", matmul_kernel, lambda a, b: [a @ b], "c = a @ b"),
    _mm("matmul_bias_relu", matmul_bias_relu_kernel, lambda a, b, bias: [np.maximum(a @ b + bias, 0)],
        "c = relu(a @ b + bias)", bias=True, kind="fused"),
    _mm("matmul_bias_gelu", matmul_bias_gelu_kernel, lambda a, b, bias: [_gelu(a @ b + bias)],
        "c = gelu(a @ b + bias)", bias=True, kind="fused"),
]

BUGGED = [
    _ew("add_wrong_mask", add_wrong_mask_kernel, lambda x, y: [x + y], 2, "out = x + y"),
    _ew("add_off_by_one", add_off_by_one_kernel, lambda x, y: [x + y], 2, "out = x + y"),
    _ew("shift_off_by_one", shift_off_by_one_kernel, lambda x: [np.exp(x)], 1, "out = exp(x)"),
    _rows("softmax_wrong_other", softmax_wrong_other_kernel, lambda x: [_softmax(x)],
          "out = exp(x) / sum(exp(x), 1)", extra_args=(6, 6), order="ox"),
    _norm("rmsnorm_wrong_count", rmsnorm_wrong_count_kernel, lambda x, w: [_rms(x, w, 1e-5)],
          "out = x / sqrt(mean(x * x, 1) + eps) * w", block=8),
]


# correct at the launched sizes, wrong at others: only the all-sizes proof catches them
SIZE_BUGGED = [
    _ew("add_hardcoded_size", add_hardcoded_size_kernel, lambda x, y: [x + y], 2, "out = x + y"),
    _rows("row_mean_hardcoded", row_mean_hardcoded_kernel, lambda x: [x.mean(axis=1)], "out = mean(x, 1)",
          out_shape=(3,), extra_args=(6, 6)),
]


def case(name: str) -> Case:
    for c in CASES + BUGGED + SIZE_BUGGED:
        if c.name == name:
            return c
    raise KeyError(name)
