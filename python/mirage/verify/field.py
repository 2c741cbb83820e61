"""Finite-field arithmetic for probabilistic equivalence checking (paper §5, Table 3).

`FieldArith` implements every method of `mirage.core.arith.Arith`, so the one
evaluation core (`mirage.core.interpret.evaluate(g, inputs, arith=FieldArith(...))`)
runs any μGraph over Z_p x Z_q. A value is a `FV`: a pair of int64 arrays holding the
Z_p component (the "real" value, exponentials included) and the Z_q component (the
value as an exponent: what `exp` reads).

Primes. p = 2q + 1 is a safe prime below 2^31 with q ≡ 3 (mod 4), so q | p - 1, the
order-q subgroup of Z_p^* is the group of q-th roots of unity, and both p and q are
≡ 3 (mod 4). Residues are < 2^31, so an element-wise product fits int64 exactly. A
matmul is exact float64 BLAS on signed w-bit digits of one operand, with the contraction
chunked so every partial sum is exact (`_mm_plan`, `_chunk`); products are evaluated when
read, so a sum over a block graph's loop axis folds into the contraction
(`FieldArith._sum_product`), and a product (or an exp of one) that a trial computes twice
on equal operands, the reference's and the candidate's retiled one, is computed once
(`FieldArith._product`, `_image`). Element-wise ops run block by block (`_blockwise`) and
large arrays reuse freed buffers within a check (`reusing_memory`): at full size the cost
is memory traffic and page faults more than arithmetic.

Operations (Table 3): add/sub/mul/div component-wise (division by a modular inverse;
a zero divisor raises `FieldZeroDivision` so the caller resamples the trial and counts
it); exp(x) = (ω^(x_q) mod p, h(x_q)) with ω a random q-th root of unity (the Z_q part
of an exponential is never read by a Lax program; it is a keyed affine map of x_q so that
non-Lax programs still evaluate deterministically); sqrt(x) = x^((m+1)/4) mod m in each
component (m ∈ {p, q}): a square root of every quadratic residue and a multiplicative
map on the whole field, so sqrt(ab) = sqrt(a)sqrt(b) and sqrt(a/b) = sqrt(a)/sqrt(b)
hold exactly. Non-Lax operators (silu, gelu, relu, sigmoid, clamp keyed by its bounds,
pow of the pair of arguments) are independent random functions (a keyed hash of the whole
field value, keyed per trial and per operator);
max (reduce_max and the max accumulator) selects the element that is largest in a
random total order (a keyed hash), which keeps max associative, commutative and
idempotent, so re-associated maxima stay equal.

The random-function model (`model="random"`, docs/verify.md "Model 2"): the second
component is Z_p2 for a second prime p2 (not an exponent field), inputs are uniform in both,
and exp and sqrt are keyed random functions of the whole value (x_p, x_p2), like the non-Lax
operators; outputs are compared on both components. It gives a bound where Theorem 2 is
vacuous (long softmax sums), at the price of the exp/sqrt identities.

Constants: a float that equals a rational n/d with d ≤ 10^9 (0.125, 1e-6, 1/64, ...)
maps to n·d^-1 in both fields; any other value maps to a random element keyed by its
bits, the same in both graphs under test.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from fractions import Fraction
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from ..core.arith import Arith

__all__ = ["FV", "FieldArith", "FieldZeroDivision", "safe_primes", "is_prime"]


class FieldZeroDivision(ArithmeticError):
    """A division by zero in Z_p or Z_q: the trial's inputs hit a root of a denominator."""


class FV:
    """A field value: Z_p and Z_q components (int64 arrays of one shape); `q` is None
    where the arithmetic does not track exponents (programs without exp). `q` may be given
    as a function computing it, called when first read: an ω^x trial reads the Z_q part of a
    value only where an exp (or a random function, or max) takes it, and compares outputs
    on Z_p, so the Z_q parts downstream of the last exp (attention's P @ V) are never
    computed. `qdepth`: how many pending functions computing q chain through this one."""

    def __init__(self, p: np.ndarray, q, qdepth: int = 0):
        self.p, self._q, self.qdepth = p, q, qdepth

    @property
    def q(self) -> np.ndarray | None:
        if callable(self._q):
            self._q, self.qdepth = self._q(), 0
        return self._q

    @property
    def shape(self) -> tuple[int, ...]:
        return self.p.shape

    def __repr__(self) -> str:
        return f"FV(p={self.p!r}, q={self.q!r})"


# -- primes -------------------------------------------------------------------------------

def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for s in small:
        if n % s == 0:
            return n == s
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


@lru_cache(maxsize=None)
def safe_primes(count: int = 8, below: int = 1 << 31) -> tuple[tuple[int, int], ...]:
    """The `count` largest (p, q) with p = 2q + 1 < `below`, both prime, q ≡ 3 (mod 4)."""
    out = []
    q = (below - 2) // 2
    q -= (q - 3) % 4  # q ≡ 3 (mod 4)
    while len(out) < count and q > 3:
        if is_prime(q) and is_prime(2 * q + 1):
            out.append((2 * q + 1, q))
        q -= 4
    return tuple(out)


def const_is_exact(value: float, primes=None) -> bool:
    """Whether `FieldArith.const` maps this float exactly (a rational n/d, d <= 10^9, d a
    unit mod the primes); otherwise it becomes a keyed random element (a variable)."""
    value = float(value)
    if not np.isfinite(value):
        return False
    fr = Fraction(value).limit_denominator(10**9)
    if float(fr) != value:
        return False
    for m in (primes or safe_primes(1)[0]):
        if fr.denominator % m == 0:
            return False
    return True


# -- vectorized modular helpers --------------------------------------------------------------

# Element-wise passes over full-size operands (16.7M-element attention scores) are
# memory-bound: every numpy temporary is a fresh 134 MB array. The helpers below run their
# ufunc sequences block by block, so the temporaries of one block stay in the core's cache.
_BLOCK = 1 << 15


def _blockwise(fn, out, *xs):
    """fn(out_block, *x_blocks) over blocks of about _BLOCK elements of the broadcast shape
    of `out` (an array, or a tuple of arrays of one shape, which holds it) and returns `out`.
    `fn` computes element-wise with ufuncs that write into out_block (which may be one of the
    inputs: in place)."""
    outs = out if isinstance(out, tuple) else (out,)
    shape = outs[0].shape
    if outs[0].size <= 2 * _BLOCK:
        fn(*outs, *xs)
        return out
    xs = [np.broadcast_to(x, shape) for x in xs]
    j, inner = len(shape), 1  # axes j.. of one block fit whole; axis j - 1 is cut
    while j > 0 and inner * shape[j - 1] <= _BLOCK:
        j -= 1
        inner *= shape[j]
    ax = j - 1
    step = max(1, _BLOCK // inner)
    for idx in np.ndindex(*shape[:ax]):
        for s in range(0, shape[ax], step):
            sl = idx + (slice(s, s + step),)
            fn(*(o[sl] for o in outs), *(x[sl] for x in xs))
    return out


def _new(*xs, dtype=np.int64) -> np.ndarray:
    return _empty(np.broadcast_shapes(*(np.shape(x) for x in xs)), dtype)


def _u(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint64)


def _addmod(a, b, m: int) -> np.ndarray:
    def fn(o, x, y):
        np.add(x, y, out=o)
        t = o - m  # o >= m: t in [0, m); else t < 0, huge as unsigned: the unsigned min picks
        np.minimum(_u(o), _u(t), out=_u(o))
    return _blockwise(fn, _new(a, b), a, b)


def _submod(a, b, m: int) -> np.ndarray:
    def fn(o, x, y):
        np.subtract(x, y, out=o)
        t = o + m  # o < 0 (huge unsigned): t in [0, m) is the smaller; else o is
        np.minimum(_u(o), _u(t), out=_u(o))
    return _blockwise(fn, _new(a, b), a, b)


def _mulmod(a, b, m: int) -> np.ndarray:
    def fn(o, x, y):
        np.multiply(x, y, out=o)  # residues < 2^31: the product fits int64
        np.remainder(o, m, out=o)
    return _blockwise(fn, _new(a, b), a, b)


def _powmod_scalar_exp(x: np.ndarray, e: int, m: int) -> np.ndarray:
    """x^e mod m element-wise for a scalar exponent e >= 0."""
    def fn(o, v):
        base = v % m
        o[...] = 1
        k = e
        while k:
            if k & 1:
                o *= base
                o %= m
            k >>= 1
            if k:
                base *= base
                base %= m
    return _blockwise(fn, _new(x), x)


# float64 integers are exact below 2^53; partial sums are kept below this margin so that a
# reduction's quotient times m (|quotient·m| <= |r| + m) is exact as well
_EXACT = (1 << 53) - (1 << 33)
# a chain of pending Z_q computations (FV) longer than this is computed at once: reading
# the end of a chain runs a few Python frames per link
_QDEPTH = 32
# products of at least this many multiply-adds are kept for reuse within a trial
_MEMO_MACS = 1 << 24
# the cost of one pass over an output-sized float64 array, in multiply-adds per element of
# the BLAS product (measured: a blocked pass ~1 ns an element, a BLAS MAC ~0.05-0.1 ns)
_MACS_PER_PASS = 12


def _mm_plan(ashape, bshape, m: int) -> tuple[str, int]:
    """How `_matmul_mod` computes a @ b: (how, L), the least cost (in MACs) of

    - "free": the smaller operand S split into L balanced w-bit digits stacked along its free
      axis (rows of a, columns of b), the larger G converted to float64 once, less (m-1)/2; L output
      planes, combined by Horner. Cheap when the output is small next to G (GEMV, long
      contractions);
    - "fold": the larger operand X split into digits and the smaller Y scaled by 2^(w i)
      mod m (i < L), both stacked along the contraction: one output plane. Cheap when the
      output is the largest array (attention scores: Q @ K over 64 terms)."""
    k = ashape[-1]
    batch = np.broadcast_shapes(ashape[:-2], bshape[:-2])
    na, nb = int(np.prod(ashape)), int(np.prod(bshape))
    nout = int(np.prod(batch)) * ashape[-2] * bshape[-1]
    small, big = min(na, nb), max(na, nb)
    best = None
    for L in (2, 3, 4):
        macs = L * nout * k
        chunks = -(-k // _chunk("free", L, m, k)[1])
        free = macs + _MACS_PER_PASS * (big + 2 * L * small + nout * L * (5 * chunks + 3) + 3 * nout)
        chunks = -(-L * k // _chunk("fold", L, m, k)[1])
        fold = macs + _MACS_PER_PASS * (2 * L * big + 6 * L * small + nout * (5 * chunks + 3))
        for cost, how in ((free, "free"), (fold, "fold")):
            if best is None or cost < best[0]:
                best = (cost, how, L)
    return best[1:]


def _chunk(how: str, L: int, m: int, k: int) -> tuple[int, int]:
    """(w, c): digits of w bits (wL >= 32), and the contraction terms of one chunk. Every
    term is a digit (|d| <= 2^(w-1)) times a residue balanced or offset by (m-1)/2 (|g| <=
    (m-1)/2: twice the terms of a chunk of residues in [0, m)), and c·term <= _EXACT keeps every
    partial sum of a chunk exact."""
    w = -(-32 // L)
    term = (1 << (w - 1)) * ((m - 1) // 2)
    return w, min(_EXACT // term, k if how == "free" else L * k)


def _matmul_mod(a: np.ndarray, b: np.ndarray, m: int, plan: tuple[str, int] | None = None) -> np.ndarray:
    """(a @ b) mod m for residues in [0, m), m < 2^31, exactly, through float64 BLAS (see
    `_mm_plan` for the two layouts; `plan` forces one, for the tests). Chunk products are
    reduced lazily (to |r| <= m/2 + 2, by float64 Barrett with rint) and summed; the result
    is brought to [0, m) once."""
    how, L = plan or _mm_plan(a.shape, b.shape, m)
    w, c = _chunk(how, L, m, a.shape[-1])
    a_small = a.size <= b.size
    half = (m - 1) // 2
    if how == "free":
        # the larger operand less (m-1)/2 (as small as balanced residues, in one pass: balancing
        # took four); the offset comes back as (m-1)/2 times the digits' sums over the contraction
        g = b if a_small else a
        big = _empty(g.shape)
        np.subtract(g, float(half), out=big, casting="unsafe")
        axis = -2 if a_small else -1
        digits = _stacked_digits(a if a_small else b, L, w, axis)
        lhs, rhs = (digits, big) if a_small else (big, digits)
        dsum = digits.sum(axis=-1 if a_small else -2, keepdims=True)  # exact: |sum| <= k 2^(w-1)
        offset = (np.remainder(dsum, m).astype(np.int64) * half % m).astype(np.float64)
    else:
        # digits of the larger operand and scaled copies of the smaller along the contraction
        xs = _stacked_digits(b if a_small else a, L, w, -2 if a_small else -1)
        ys = [a if a_small else b]
        for _ in range(L - 1):
            ys.append((ys[-1] << w) % m)
        ys = np.concatenate([_balanced_float(y, m) for y in ys], axis=-1 if a_small else -2)
        lhs, rhs = (ys, xs) if a_small else (xs, ys)
    kk = lhs.shape[-1]
    acc = None
    for s0 in range(0, kk, c):
        x, y = lhs[..., s0:s0 + c], rhs[..., s0:s0 + c, :]
        prod = np.matmul(x, y, out=_empty(np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
                                          + (x.shape[-2], y.shape[-1])))
        if c < kk:
            _reduce(prod, m)
        if acc is None:
            acc = prod
        else:
            acc += prod
    if how == "fold":
        return _to_residue(acc, m)
    # Horner over the L digit planes, from the top, reducing only where a bound would pass 2^53
    red = m // 2 + 2  # bound after a reduction
    pb = kk * (1 << (w - 1)) * half if c >= kk else -(-kk // c) * red  # bound of every part
    if pb + m > _EXACT:
        _reduce(acc, m)
        pb = red
    acc += offset
    pb += m
    parts = np.split(acc, L, axis=axis)
    r, rb = parts[-1], pb
    for part in reversed(parts[:-1]):
        qb = pb
        if rb * (1 << w) + qb > _EXACT:
            _reduce(r, m)
            rb = red
        if rb * (1 << w) + qb > _EXACT:
            _reduce(part, m)
            qb = red
        r *= float(1 << w)
        r += part
        rb = rb * (1 << w) + qb
    return _to_residue(r, m)


def _stacked_digits(x: np.ndarray, L: int, w: int, axis: int) -> np.ndarray:
    """x (int64 in [0, 2^31)) as its L balanced base-2^w digits, lowest first, in float64,
    concatenated along `axis`: x = sum d_i 2^(w i), |d_i| <= 2^(w-1) (the top one is what is
    left, also within it)."""
    shape = list(x.shape)
    shape[axis] *= L
    out = _empty(shape)
    half, mask = 1 << (w - 1), (1 << w) - 1

    def fn(*planes_v):
        *planes, v = planes_v
        y = v.copy()
        d = np.empty_like(y)
        for plane in planes[:-1]:
            np.add(y, half, out=d)
            d &= mask
            d -= half
            np.copyto(plane, d)
            y -= d
            y >>= w
        np.copyto(planes[-1], y)
    _blockwise(fn, tuple(np.split(out, L, axis=axis)), x)
    return out


# Fresh arrays of 4 MB or more (numpy asks for huge pages there) cost page faults (fault,
# zero, huge-page compaction) worth several passes over them, and a full-size check makes
# dozens of them per trial (scores, exps, digits, copies). Inside `reusing_memory()` (a
# check), they are carved from buffers that no live array uses any more: every view of a
# buffer holds a reference to it, so a buffer referenced only by the pool is free (CPython
# reference counts).
_BIG = 1 << 22
_POOL_CAP = 3 << 30  # bytes of free buffers kept at most
_POOL = threading.local()


@contextlib.contextmanager
def reusing_memory():
    """Reuse large buffers within the block (this thread; nested blocks share the outer pool)."""
    if getattr(_POOL, "bufs", None) is not None:
        yield
        return
    _POOL.bufs = []
    try:
        yield
    finally:
        _POOL.bufs = None


def _empty(shape, dtype=np.float64) -> np.ndarray:
    """np.empty(shape, dtype), from the pool when one is active and the array is large."""
    shape, dt = tuple(int(n) for n in shape), np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    bufs = getattr(_POOL, "bufs", None)
    if bufs is None or nbytes < _BIG:
        return np.empty(shape, dt)
    free = [i for i in range(len(bufs)) if sys.getrefcount(bufs[i]) == 2]  # the list's and the call's
    fits = [i for i in free if bufs[i].size >= nbytes]
    if fits:
        buf = bufs[min(fits, key=lambda i: bufs[i].size)]
    else:
        spare = sum(bufs[i].size for i in free)
        for i in sorted(free, key=lambda i: bufs[i].size, reverse=True):
            if spare + nbytes <= _POOL_CAP:
                break
            spare -= bufs[i].size
            bufs[i] = None
        bufs[:] = [b for b in bufs if b is not None]
        buf = np.empty(nbytes, np.uint8)
        bufs.append(buf)
    return buf[:nbytes].view(dt).reshape(shape)


def _copy(x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of x (from the pool)."""
    out = _empty(x.shape, x.dtype)
    np.copyto(out, x)
    return out


def _reshaped(x: np.ndarray, shape) -> np.ndarray:
    """x.reshape(shape), copying (into the pool) only where a view cannot do."""
    try:
        return np.reshape(x, shape, copy=False)
    except ValueError:
        return _copy(x).reshape(shape)


def _layout(ashape, bshape) -> tuple:
    """a @ b (equal ranks, broadcast batch axes) as one product of plain batched operands: a
    batch axis along which only a varies joins a's rows, one along which only b varies joins
    b's columns, one along which neither does is dropped (bigger BLAS products, and the same
    operands whatever the tiling of a block graph: the reference's and the candidate's
    Q @ K are then one product). Returns (ao, as_, bo, bs, rs, ro) with
    a @ b == (a.transpose(ao).reshape(as_) @ b.transpose(bo).reshape(bs)).reshape(rs).transpose(ro)."""
    r = len(ashape)
    ax = range(r - 2)
    for i in ax:
        if ashape[i] != bshape[i] and min(ashape[i], bshape[i]) != 1:
            raise ValueError(f"matmul batch axes do not broadcast: {list(ashape)} @ {list(bshape)}")
    batch = [i for i in ax if ashape[i] == bshape[i] > 1]
    arow = [i for i in ax if ashape[i] > 1 and bshape[i] == 1]
    bcol = [i for i in ax if ashape[i] == 1 and bshape[i] > 1]
    ones = [i for i in ax if ashape[i] == bshape[i] == 1]
    M, K, N = ashape[-2], ashape[-1], bshape[-1]
    bsz = tuple(ashape[i] for i in batch)
    rows, cols = tuple(ashape[i] for i in arow), tuple(bshape[i] for i in bcol)
    ao = batch + arow + [r - 2, r - 1] + bcol + ones
    bo = batch + [r - 2] + bcol + [r - 1] + arow + ones
    as_ = bsz + (int(np.prod(rows, dtype=np.int64)) * M, K)
    bs = bsz + (K, int(np.prod(cols, dtype=np.int64)) * N)
    rs = bsz + rows + (M,) + cols + (N,) + (1,) * len(ones)
    labels = batch + arow + [r - 2] + bcol + [r - 1] + ones
    return ao, as_, bo, bs, rs, [labels.index(i) for i in range(r)]


def _balanced_float(x: np.ndarray, m: int) -> np.ndarray:
    """x (residues in [0, m)) as float64 in (-m/2, m/2], congruent mod m."""
    def fn(o, v):
        np.copyto(o, v, casting="unsafe")
        o -= (v > m // 2) * float(m)
    return _blockwise(fn, _new(x, dtype=np.float64), x)


def _reduce(r: np.ndarray, m: int) -> None:
    """r mod m in place, lazily: any float64 integer |r| <= _EXACT to one with |r| <= m/2 + 2
    congruent mod m (Barrett in floating point: r·(1/m) is within 2^-30 of r/m, so its
    rint is the nearest quotient give or take one; quotient·m and the difference are exact)."""
    def fn(o, v):
        t = v * (1.0 / m)
        np.rint(t, out=t)
        t *= m
        np.subtract(v, t, out=o)
    _blockwise(fn, r, r)


def _to_residue(r: np.ndarray, m: int) -> np.ndarray:
    """float64 integers |r| <= _EXACT to int64 in [0, m): `_reduce` to |r| <= m/2 + 2, then
    the negative ones get m added."""
    def fn(o, v):
        t = v * (1.0 / m)
        np.rint(t, out=t)
        t *= m
        np.subtract(v, t, out=t)
        np.copyto(o, t, casting="unsafe")
        t = o + m  # o < 0 (huge unsigned): t in [0, m) is the smaller; else o is
        np.minimum(_u(o), _u(t), out=_u(o))
    return _blockwise(fn, _new(r), r)


# -- keyed hashing (random functions) -----------------------------------------------------

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _mix_into(x: np.ndarray) -> None:
    """`_mix` in place (x: a uint64 array, a block of `_blockwise`)."""
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)


def _pack(xp: np.ndarray, xq: np.ndarray | None) -> np.ndarray:
    """(xp, xq) -> xp·2^31 + xq as uint64: injective for residues < 2^31."""
    k = np.left_shift(xp.view(np.uint64), np.uint64(31))  # (non-negative: the same bits)
    if xq is not None:
        k |= xq.view(np.uint64)
    return k


def _key(*parts) -> np.uint64:
    h = 0xCBF29CE484222325
    for ch in repr(parts).encode():
        h = ((h ^ ch) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return np.uint64(h)


# -- the arithmetic ---------------------------------------------------------------------------

class FieldArith(Arith):
    """Z_p x Z_q arithmetic of one random trial.

    `p`, `q`: primes with q | p - 1 (default: the largest safe prime pair below 2^31).
    `omega`: a q-th root of unity in Z_p (default: random from `rng`).
    `seed`: keys the random functions that model non-Lax operators and unnamed constants.
    `track_q`: compute the Z_q component (needed only when some program uses exp).
    """

    def __init__(self, p: int | None = None, q: int | None = None, omega: int | None = None,
                 seed: int = 0, rng: np.random.Generator | None = None, track_q: bool = True,
                 model: str = "omega"):
        if model not in ("omega", "random"):
            raise ValueError(f"unknown model {model!r}")
        self.model = model
        if p is None:
            p, q = safe_primes(1)[0] if model == "omega" else (safe_primes(1)[0][0], safe_primes(2)[1][0])
        if model == "omega" and (q is None or (p - 1) % q):
            raise ValueError(f"q={q} must divide p-1={p - 1}")
        if model == "random" and (q is None or q == p or not is_prime(q) or not is_prime(p)):
            raise ValueError("the random model needs two distinct primes p, q")
        if p >= 1 << 31 or q >= 1 << 31:
            raise ValueError("primes must be below 2^31 for exact int64 products")
        self.p, self.q = int(p), int(q)
        self.track_q = track_q or model == "random"
        self.seed = int(seed)
        self.rng = rng or np.random.default_rng(seed)
        if model == "omega":
            self.omega = int(omega) if omega is not None else self.random_root()
            if pow(self.omega, self.q, self.p) != 1:
                raise ValueError(f"omega={self.omega} is not a q-th root of unity mod p")
        else:
            self.omega = None
        self._exp_tables = None
        self._const_cache: dict = {}
        self._products: list = []  # (m, a, b, a @ b mod m) of this trial's large products
        self._views: dict = {}  # id(v) -> (v, c, rs, ro): v = c.reshape(rs).transpose(ro), c kept above
        self._images: dict = {}  # (op, id(c)...) -> op's results on the kept products c

    # -- sampling --
    def random_root(self) -> int:
        """A uniformly random q-th root of unity: g^((p-1)/q) for g uniform in Z_p^*."""
        e = (self.p - 1) // self.q
        return pow(int(self.rng.integers(1, self.p)), e, self.p)

    def random_value(self, shape: Sequence[int], rng: np.random.Generator | None = None) -> FV:
        r = rng or self.rng
        return FV(_uniform(r, self.p, shape), _uniform(r, self.q, shape) if self.track_q else None)

    # -- Arith interface --
    def from_array(self, a) -> FV:
        a = np.asarray(a)
        if a.dtype.kind == "f":
            raise TypeError("FieldArith.from_array takes integer residues; use random_value or const")
        a = a.astype(np.int64)
        return FV(a % self.p, a % self.q if self.track_q else None)

    def to_array(self, v: FV) -> np.ndarray:
        return v.p

    def shape(self, v: FV):
        return v.shape

    def _fv(self, p: np.ndarray, qfn: Callable, *deps: FV) -> FV:
        """FV(p, qfn()): the Z_q part computed when read in an ω^x trial (see FV), else now."""
        if not self.track_q:
            return FV(p, None)
        depth = 1 + max((d.qdepth for d in deps), default=0)
        if self.model != "omega" or depth > _QDEPTH:
            return FV(p, qfn())
        return FV(p, qfn, depth)

    def apply(self, fn: Callable, *vs: FV) -> FV:
        if len(vs) == 1 and isinstance(vs[0], _Product) and vs[0].pending and _is_identity(fn, vs[0].shape):
            return vs[0]  # (a loop-invariant broadcast before an accumulator): stays a pending product
        # (q now: the interpreter's structural functions close over variables it reassigns)
        return FV(fn(*[v.p for v in vs]), fn(*[v.q for v in vs]) if self.track_q else None)

    def const(self, value: float, shape) -> FV:
        cp, cq = self.const_element(value)
        shape = tuple(shape)
        return FV(np.full(shape, cp, dtype=np.int64), np.full(shape, cq, dtype=np.int64) if self.track_q else None)

    def const_element(self, value: float) -> tuple[int, int]:
        value = float(value)
        hit = self._const_cache.get(value)
        if hit is not None:
            return hit
        fr = None
        if np.isfinite(value):
            cand = Fraction(value).limit_denominator(10**9)
            if float(cand) == value:
                fr = cand
        if fr is not None and fr.denominator % self.p and fr.denominator % self.q:
            cp = fr.numerator % self.p * pow(fr.denominator, -1, self.p) % self.p
            cq = fr.numerator % self.q * pow(fr.denominator, -1, self.q) % self.q
        else:  # an irrational-looking constant: a random element keyed by its bits
            k = _mix(np.array([_key("const", value, self.seed)], dtype=np.uint64))[0]
            cp = int(k % np.uint64(self.p))
            cq = int(_mix(np.array([k ^ _GOLD], dtype=np.uint64))[0] % np.uint64(self.q))
        self._const_cache[value] = (cp, cq)
        return cp, cq

    def _bin(self, a: FV, b: FV, f) -> FV:
        return self._fv(f(a.p, b.p, self.p), lambda: f(a.q, b.q, self.q), a, b)

    def add(self, a, b):
        return self._bin(a, b, _addmod)

    def sub(self, a, b):
        return self._bin(a, b, _submod)

    def mul(self, a, b):
        return self._bin(a, b, _mulmod)

    def inverse(self, b: FV) -> FV:
        if not np.all(b.p):
            raise FieldZeroDivision("division by zero in the finite field")

        def q():  # (a zero in a Z_q part that is never read does not matter)
            if not np.all(b.q):
                raise FieldZeroDivision("division by zero in the finite field")
            return _powmod_scalar_exp(b.q, self.q - 2, self.q)
        return self._fv(_powmod_scalar_exp(b.p, self.p - 2, self.p), q, b)

    def div(self, a, b):
        return self.mul(a, self.inverse(b))

    def matmul(self, a, b):
        return _Product(self, a, b)

    def forget(self) -> None:
        """Drop the products and images kept for reuse (the trial is over)."""
        self._products.clear()
        self._views.clear()
        self._images.clear()

    def _image(self, op: str, fn, *xs):
        """fn(*xs) for an element-wise `fn` (arrays in, a tuple of arrays out) where every x is
        a view of a kept product (the same rearrangement of each): fn runs once on the products
        and every such view gets the same view of its results. The candidate's exp(Q @ K) is
        the reference's, retiled. None where the xs are not such views."""
        hits = [self._views.get(id(x)) for x in xs]
        if not xs or any(h is None or h[0] is not x for h, x in zip(hits, xs)):
            return None
        _, c0, rs, ro = hits[0]
        if any(h[1].shape != c0.shape or h[2] != rs or h[3] != ro for h in hits):
            return None
        key = (op,) + tuple(id(h[1]) for h in hits)
        if key not in self._images:
            self._images[key] = fn(*(h[1] for h in hits))
        return tuple(None if r is None else r.reshape(rs).transpose(ro) for r in self._images[key])

    def _product(self, a: np.ndarray, b: np.ndarray, m: int) -> np.ndarray:
        """a @ b mod m in the plain layout of `_layout`; a product already computed in this
        trial on equal operands (the candidate's Q @ K is the reference's, retiled) is reused."""
        r = max(a.ndim, b.ndim)
        a, b = (x.reshape((1,) * (r - x.ndim) + x.shape) for x in (a, b))
        ao, as_, bo, bs, rs, ro = _layout(a.shape, b.shape)
        a, b = a.transpose(ao), b.transpose(bo)  # (views: compared before they are copied)
        for mm, ea, eb, ec in self._products:
            if mm == m and ea.shape == as_ and eb.shape == bs and _equal(ea, a) and _equal(eb, b):
                c = ec
                break
        else:
            a, b = _reshaped(a, as_), _reshaped(b, bs)
            c = _matmul_mod(a, b, m)
            if c.size * a.shape[-1] < _MEMO_MACS:
                return c.reshape(rs).transpose(ro)
            self._products.append((m, a, b, c))
        v = c.reshape(rs).transpose(ro)
        self._views[id(v)] = (v, c, rs, ro)
        return v

    def sum(self, a, axis):
        if isinstance(a, _Product) and a.pending:
            return self._sum_product(a, axis)
        # residues < 2^31: sums of fewer than 2^32 of them fit int64
        return self._fv(a.p.sum(axis=axis, keepdims=True) % self.p,
                        lambda: a.q.sum(axis=axis, keepdims=True) % self.q, a)

    def _sum_product(self, v: "_Product", axis: int) -> "_Product":
        """sum(a @ b, axis) as one product: the interpreter sums a block graph's per-iteration
        matmuls over the loop axis (forloop_accum), and sum_i a_i @ b_i is a @ b over the
        contraction of all iterations (an n-th of the output, no sum); an operand that does
        not vary along the axis is summed first (sum_i a @ b_i = a @ sum_i b_i)."""
        a, b = v.operands
        r = len(v.shape)
        axis %= r
        a = self.apply(lambda x: x.reshape((1,) * (r - x.ndim) + x.shape), a)
        b = self.apply(lambda x: x.reshape((1,) * (r - x.ndim) + x.shape), b)
        if axis == r - 1:
            return _Product(self, a, self.sum(b, r - 1))
        if axis == r - 2:
            return _Product(self, self.sum(a, r - 2), b)
        na, nb = a.shape[axis], b.shape[axis]
        if na == 1 and nb == 1:
            return v
        if na == 1:
            return _Product(self, a, self.sum(b, axis))
        if nb == 1:
            return _Product(self, self.sum(a, axis), b)

        def fold_a(x):  # (.., n, .., M, K) -> (.., 1, .., M, n·K)
            y = np.moveaxis(x, axis, -2)
            return np.expand_dims(_reshaped(y, y.shape[:-2] + (-1,)), axis)

        def fold_b(x):  # (.., n, .., K, N) -> (.., 1, .., n·K, N)
            y = np.moveaxis(x, axis, -3)
            return np.expand_dims(_reshaped(y, y.shape[:-3] + (-1, y.shape[-1])), axis)
        return _Product(self, self.apply(fold_a, a), self.apply(fold_b, b))

    def _order_key(self, a: FV) -> np.ndarray:
        key = _key("max-order", self.seed)

        def fn(o, xp, *xq):
            np.multiply(xp, _GOLD, out=o, dtype=np.uint64, casting="unsafe")
            if xq:
                o ^= xq[0].astype(np.uint64) * _M1
            o ^= key
            _mix_into(o)
        return _blockwise(fn, _new(a.p, dtype=np.uint64), a.p, *([a.q] if self.track_q else []))

    def max(self, a, axis):
        idx = np.argmax(self._order_key(a), axis=axis)
        idx = np.expand_dims(idx, axis)
        return FV(np.take_along_axis(a.p, idx, axis),
                  np.take_along_axis(a.q, idx, axis) if self.track_q else None)

    def exp(self, a):
        if self.model == "random":  # a random function of the argument's value in Z_p x Z_q
            return FV(*self._hash(a.p, a.q, "exp"))
        if not self.track_q:
            raise RuntimeError("FieldArith(track_q=False) cannot evaluate exp")
        lo, hi = self._tables()
        # the Z_q part is read only by non-Lax programs (an exp inside an exp): a keyed affine
        # map keeps them deterministic and exp(exp(x)) != exp(x), at one mulmod (not a hash)
        c1, c2 = self._exp_q_key()
        p, q = self.p, self.q

        def fp(o, x):
            np.multiply(lo[x & 0x7FFF], hi[x >> 15], out=o)
            o %= p

        def fq(o, x):
            np.multiply(x, c1, out=o)
            o += c2
            o %= q

        def exp_p(x):
            return (_blockwise(fp, _new(x), x),)

        def exp_q(x):
            return (_blockwise(fq, _new(x), x),)
        x = a.q
        return self._fv((self._image("exp", exp_p, x) or exp_p(x))[0],
                        lambda: (self._image("exp-q", exp_q, x) or exp_q(x))[0])

    def _exp_q_key(self) -> tuple[int, int]:
        k = int(_mix(np.array([_key("exp-q", self.seed)], dtype=np.uint64))[0])
        return 2 + k % (self.q - 3), (k >> 32) % self.q

    def _tables(self):
        """ω^j and ω^(j·2^15) for j < 2^15 (x_q < 2^30 indexes both halves)."""
        if self._exp_tables is None:
            if self.q >= 1 << 30:
                raise ValueError("q must be below 2^30 for the two-level exp table")
            self._exp_tables = (self._powers(self.omega), self._powers(pow(self.omega, 1 << 15, self.p)))
        return self._exp_tables

    def _powers(self, w: int) -> np.ndarray:
        """w^j mod p for j < 2^15, as a 256 x 128 outer product of powers."""
        small = np.empty(128, dtype=np.int64)
        acc = 1
        for j in range(128):
            small[j] = acc
            acc = acc * w % self.p
        big = np.empty(256, dtype=np.int64)
        step, acc = acc, 1  # acc == w^128
        for j in range(256):
            big[j] = acc
            acc = acc * step % self.p
        return _mulmod(big[:, None], small[None, :], self.p).reshape(-1)

    def sqrt(self, a):
        if self.model == "random":
            return FV(*self._hash(a.p, a.q, "sqrt"))
        return self._fv(_powmod_scalar_exp(a.p, (self.p + 1) // 4, self.p),
                        lambda: _powmod_scalar_exp(a.q, (self.q + 1) // 4, self.q), a)

    def _hash(self, xp, xq, name: str) -> tuple[np.ndarray, np.ndarray | None]:
        # (xp, xq) -> xp·2^31 + xq is injective (residues < 2^31); xor with a key and the
        # splitmix finalizer are bijections of 64-bit words: distinct arguments, distinct h
        key = _key("uf", name, self.seed)

        def h(*xs):
            return self._hashed(lambda b: _pack(b[0], b[1] if len(b) > 1 else None) ^ key, list(xs))
        xs = [xp] + ([xq] if xq is not None else [])
        return self._image(name, h, *xs) or h(*xs)

    def _hashed(self, word, xs: list) -> tuple[np.ndarray, np.ndarray | None]:
        """(h mod p, mix(h ^ gold) mod q) for h = mix(word(x blocks)), block by block."""
        p, q = np.uint64(self.p), np.uint64(self.q)

        def fn(hp, *rest):
            hq, xb = (rest[0], rest[1:]) if self.track_q else (None, rest)
            h = word(xb)
            _mix_into(h)
            np.remainder(h, p, out=hp, casting="unsafe")
            if hq is not None:
                h ^= _GOLD
                _mix_into(h)
                np.remainder(h, q, out=hq, casting="unsafe")
        outs = (_new(*xs), _new(*xs)) if self.track_q else (_new(*xs),)
        _blockwise(fn, outs, *xs)
        return outs if self.track_q else (outs[0], None)

    def unary(self, name, a):
        return FV(*self._hash(a.p, a.q if self.track_q else None, name))

    def pow(self, a, b):
        """A random function of the pair (a, b): pow with a tensor exponent has no field
        meaning (b is not an integer). The base's injective key (as in `_hash`) is
        mixed, xored with the exponent's and mixed again: injective in each argument,
        two distinct pairs collide with probability about 2^-64."""
        key, tq = _key("uf2", "pow", self.seed), self.track_q

        def word(xs):
            h = _pack(xs[0], xs[1] if tq else None) ^ key
            _mix_into(h)
            h ^= _pack(xs[-2], xs[-1]) if tq else _pack(xs[1], None)
            return h
        return FV(*self._hashed(word, [a.p, a.q, b.p, b.q] if tq else [a.p, b.p]))

    def round(self, v, d):
        return v


class _Product(FV):
    """a @ b over the arithmetic's fields, each component computed when first read (`p`,
    `q`: an ω^x trial reads only the Z_q part of the scores that feed exp); until then a sum
    over one of its axes (`FieldArith.sum`) becomes another product instead."""

    def __init__(self, ar: FieldArith, a: FV, b: FV):
        self._ar, self.operands, self._value = ar, (a, b), [None, None]
        self._shape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) + (a.shape[-2], b.shape[-1])
        self.qdepth = 1 + max(a.qdepth, b.qdepth) if ar.track_q else 0
        if self.qdepth > _QDEPTH:
            self._force(1)

    @property
    def pending(self) -> bool:
        return self._value[0] is None and self._value[1] is None

    def _force(self, i: int):
        ar = self._ar
        if i == 1 and not ar.track_q:
            return None
        if self._value[i] is None:
            a, b = self.operands
            self._value[i] = ar._product(a.p, b.p, ar.p) if i == 0 else ar._product(a.q, b.q, ar.q)
            self.qdepth = 0 if i == 1 else self.qdepth
            if self._value[0] is not None and (self._value[1] is not None or not ar.track_q):
                self.operands = None
        return self._value[i]

    p = property(lambda self: self._force(0))
    q = property(lambda self: self._force(1))
    shape = property(lambda self: self._shape)


def _equal(x: np.ndarray, t: np.ndarray) -> bool:
    """Whether x equals t.reshape(x.shape) (C order; x: a kept operand, t: a view whose
    reshape would copy), compared without the copy where x reshapes to t's shape as a view;
    the first rows first (different operands of one shape, W1 and W2, differ there: no pass
    over the whole)."""
    if x.size != t.size:
        return False
    if x.size == 0:
        return True
    try:
        x = np.reshape(x, t.shape, copy=False)
    except ValueError:
        t = _reshaped(t, x.shape)
    if (x.dtype == t.dtype and x.__array_interface__["data"][0] == t.__array_interface__["data"][0]
            and all(a == b for a, b, n in zip(x.strides, t.strides, x.shape) if n > 1)):
        return True  # the same elements of the same memory (the candidate's W is the reference's)
    head = (0,) * (x.ndim - 1)
    return bool(np.array_equal(x[head], t[head]) and np.array_equal(x, t))


def _is_identity(fn: Callable, shape) -> bool:
    """Whether the structural op `fn` maps an array of `shape` to itself (np.broadcast_to to its
    own shape): a probe comes back as a view of the same memory, shape and strides."""
    probe = np.empty(shape, np.int8)  # not touched unless fn copies it
    try:
        r = fn(probe)
    except Exception:
        return False
    return (isinstance(r, np.ndarray) and r.shape == probe.shape
            and all(a == b for a, b, n in zip(r.strides, probe.strides, shape) if n > 1)  # (size 1: any)
            and r.__array_interface__["data"][0] == probe.__array_interface__["data"][0])


def _uniform(rng: np.random.Generator, m: int, shape) -> np.ndarray:
    """Independent uniform int64 residues in [0, m), m < 2^32: the 32-bit halves of the
    generator's raw 64-bit words, masked to m's bit length, those >= m rejected (exactly
    uniform; for the primes here, just below a power of 2, about 1e-6 of them are)."""
    n = int(np.prod(shape, dtype=np.int64))
    mask = np.uint32((1 << m.bit_length()) - 1)
    out = _empty((n,), np.int64)
    done = 0
    while done < n:
        need = min(n - done, 1 << 16)  # (in pieces of 256 KB, which the allocator reuses)
        v = rng.bit_generator.random_raw(-(-need // 2)).view(np.uint32)[:need]
        v &= mask
        if (v >= m).any():
            v = v[v < m]
        out[done:done + v.size] = v
        done += v.size
    return out.reshape(tuple(shape))
