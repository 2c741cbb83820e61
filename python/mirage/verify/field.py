"""Finite-field arithmetic for probabilistic equivalence checking (paper §5, Table 3).

`FieldArith` implements every method of `mirage.core.arith.Arith`, so the one
evaluation core (`mirage.core.interpret.evaluate(g, inputs, arith=FieldArith(...))`)
runs any μGraph over Z_p x Z_q. A value is a `FV`: a pair of int64 arrays holding the
Z_p component (the "real" value, exponentials included) and the Z_q component (the
value as an exponent: what `exp` reads).

Primes. p = 2q + 1 is a safe prime below 2^31 with q ≡ 3 (mod 4), so q | p - 1, the
order-q subgroup of Z_p^* is the group of q-th roots of unity, and both p and q are
≡ 3 (mod 4). Residues are < 2^31, so an element-wise product fits int64 exactly. A
matmul converts the larger operand to float64 once and splits the smaller into signed w-bit
digits, with the contraction chunked so every float64 partial sum is exact (`_limb_plan`),
one BLAS product per chunk, recombined mod p.

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

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from ..core.arith import Arith

__all__ = ["FV", "FieldArith", "FieldZeroDivision", "safe_primes", "is_prime"]


class FieldZeroDivision(ArithmeticError):
    """A division by zero in Z_p or Z_q: the trial's inputs hit a root of a denominator."""


@dataclass
class FV:
    """A field value: Z_p and Z_q components (int64 arrays of one shape); `q` is None
    where the arithmetic does not track exponents (programs without exp)."""

    p: np.ndarray
    q: np.ndarray | None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.p.shape


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

def _mulmod(a, b, m: int):
    return (a * b) % m  # residues < 2^31: the product fits int64


def _powmod_scalar_exp(x: np.ndarray, e: int, m: int) -> np.ndarray:
    """x^e mod m element-wise for a scalar exponent e >= 0."""
    result = np.ones_like(x)
    base = x % m
    while e:
        if e & 1:
            result = _mulmod(result, base, m)
        e >>= 1
        if e:
            base = _mulmod(base, base, m)
    return result


# float64 integers are exact below 2^53; partial sums are kept below this margin so that a
# reduction's quotient times m (|quotient·m| <= |r| + m) is exact as well
_EXACT = (1 << 53) - (1 << 33)
# per output element: one multiply-add of a limb product costs ~1/50 of a reduction pass
# (4 memory passes); picks the limb count (see `_limb_plan`)
_MACS_PER_PASS = 50


def _limb_plan(k: int, m: int) -> tuple[int, int, int]:
    """(L, w, c): the split operand as L signed w-bit digits (|digit| <= 2^(w-1), wL >= 32),
    the contraction in chunks of c terms with c·2^(w-1)·(m-1) <= _EXACT (every partial sum
    exact). Fewer limbs mean fewer products but shorter chunks, each reduced mod m: the plan
    with the least work per output element (products + reduction passes) wins."""
    best = None
    for L in (2, 3, 4):
        w = -(-32 // L)
        c = min(k, _EXACT // ((1 << (w - 1)) * (m - 1)))
        work = L * k + -(-k // c) * L * _MACS_PER_PASS
        if best is None or work < best[0]:
            best = (work, L, w, c)
    return best[1:]


def _matmul_mod(a: np.ndarray, b: np.ndarray, m: int) -> np.ndarray:
    """(a @ b) mod m for residues in [0, m), m < 2^31, exactly, through float64 BLAS.

    The larger operand is converted to float64 once, whole (31-bit integers are exact); the
    smaller one is split into L signed digits stacked into one operand, so one BLAS product
    per contraction chunk reads the big operand once (a 4096 x 6144 weight read once instead
    of once per limb); see `_limb_plan` for L and the chunk. Chunk products are reduced mod m
    lazily (to |r| <= m/2 + 2, by float64 Barrett with rint) and summed; the digits are then
    recombined by Horner from the top, reducing only where a bound would pass 2^53."""
    k = a.shape[-1]
    a_small = a.size <= b.size
    big = _as_float(b if a_small else a)
    small = a if a_small else b
    L, w, c = _limb_plan(k, m)
    axis = -2 if a_small else -1
    digits = np.concatenate(_digits(small, L, w), axis=axis)
    acc = None
    for s0 in range(0, k, c):
        if a_small:
            prod = np.matmul(digits[..., s0:s0 + c], big[..., s0:s0 + c, :])
        else:
            prod = np.matmul(big[..., s0:s0 + c], digits[..., s0:s0 + c, :])
        if c < k:
            _reduce(prod, m)
        if acc is None:
            acc = prod
        else:
            acc += prod
    # bound of every part: one raw chunk, or the sum of reduced ones
    pb = k * (1 << (w - 1)) * (m - 1) if c >= k else -(-k // c) * (m // 2 + 2)
    parts = np.split(acc, L, axis=axis)
    red = m // 2 + 2  # bound after a reduction
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
    _reduce(r, m)
    out = r.astype(np.int64)
    out += (out >> 63) & m  # the negative ones (an arithmetic shift: all ones) get m added
    return out


def _digits(x: np.ndarray, L: int, w: int) -> list:
    """x (int64 in [0, 2^31)) as L float64 arrays of balanced base-2^w digits, lowest first:
    x = sum d_i 2^(w i), |d_i| <= 2^(w-1) (the top one is what is left, also within it)."""
    half, mask = 1 << (w - 1), (1 << w) - 1
    out = []
    for _ in range(L - 1):
        d = ((x + half) & mask) - half
        out.append(d.astype(np.float64))
        x = (x - d) >> w
    out.append(x.astype(np.float64))
    return out


def _reduce(r: np.ndarray, m: int) -> None:
    """r mod m in place, lazily: any float64 integer |r| <= _EXACT to one with |r| <= m/2 + 2
    congruent mod m (Barrett in floating point: r·(1/m) is within 2^-30 of r/m, so its
    rint is the nearest quotient give or take one; quotient·m and the difference are exact)."""
    t = _scratch(1, r.shape)
    np.multiply(r, 1.0 / m, out=t)
    np.rint(t, out=t)
    t *= m
    r -= t


_SCRATCH: list = [np.empty(0), np.empty(0)]


def _scratch(slot: int, shape) -> np.ndarray:
    """A float64 array of `shape` in reused scratch buffer `slot` (fresh 100 MB arrays cost
    more in page faults than a pass over them). Valid until the next use of the slot."""
    n = int(np.prod(shape))
    if n < 1 << 20:
        return np.empty(shape)
    if _SCRATCH[slot].size < n:
        _SCRATCH[slot] = np.empty(n)
    return _SCRATCH[slot][:n].reshape(shape)


def _as_float(x: np.ndarray) -> np.ndarray:
    """x as float64 in scratch slot 0 (valid until the next call)."""
    out = _scratch(0, x.shape)
    np.copyto(out, x, casting="unsafe")
    return out


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

    # -- sampling --
    def random_root(self) -> int:
        """A uniformly random q-th root of unity: g^((p-1)/q) for g uniform in Z_p^*."""
        e = (self.p - 1) // self.q
        return pow(int(self.rng.integers(1, self.p)), e, self.p)

    def random_value(self, shape: Sequence[int], rng: np.random.Generator | None = None) -> FV:
        r = rng or self.rng
        vp = r.integers(0, self.p, size=tuple(shape), dtype=np.int64)
        vq = r.integers(0, self.q, size=tuple(shape), dtype=np.int64) if self.track_q else None
        return FV(vp, vq)

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
        return v.p.shape

    def apply(self, fn: Callable, *vs: FV) -> FV:
        vp = fn(*[v.p for v in vs])
        vq = fn(*[v.q for v in vs]) if self.track_q else None
        return FV(vp, vq)

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

    def _bin(self, a: FV, b: FV, fp, fq) -> FV:
        return FV(fp(a.p, b.p), fq(a.q, b.q) if self.track_q else None)

    def add(self, a, b):
        return self._bin(a, b, lambda x, y: (x + y) % self.p, lambda x, y: (x + y) % self.q)

    def sub(self, a, b):
        return self._bin(a, b, lambda x, y: (x - y) % self.p, lambda x, y: (x - y) % self.q)

    def mul(self, a, b):
        return self._bin(a, b, lambda x, y: _mulmod(x, y, self.p), lambda x, y: _mulmod(x, y, self.q))

    def inverse(self, b: FV) -> FV:
        if not np.all(b.p) or (self.track_q and not np.all(b.q)):
            raise FieldZeroDivision("division by zero in the finite field")
        return FV(_powmod_scalar_exp(b.p, self.p - 2, self.p),
                  _powmod_scalar_exp(b.q, self.q - 2, self.q) if self.track_q else None)

    def div(self, a, b):
        return self.mul(a, self.inverse(b))

    def matmul(self, a, b):
        return self._bin(a, b, lambda x, y: _matmul_mod(x, y, self.p), lambda x, y: _matmul_mod(x, y, self.q))

    def sum(self, a, axis):
        # residues < 2^31: sums of fewer than 2^32 of them fit int64
        return FV(a.p.sum(axis=axis, keepdims=True) % self.p,
                  a.q.sum(axis=axis, keepdims=True) % self.q if self.track_q else None)

    def _order_key(self, a: FV) -> np.ndarray:
        k = a.p.astype(np.uint64) * _GOLD
        if self.track_q:
            k = k ^ (a.q.astype(np.uint64) * _M1)
        return _mix(k ^ _key("max-order", self.seed))

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
        x = a.q
        vp = _mulmod(lo[x & 0x7FFF], hi[x >> 15], self.p)
        # the Z_q part is read only by non-Lax programs (an exp inside an exp): a keyed affine
        # map keeps them deterministic and exp(exp(x)) != exp(x), at one mulmod (not a hash)
        c1, c2 = self._exp_q_key()
        return FV(vp, (_mulmod(x, c1, self.q) + c2) % self.q)

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
        return FV(_powmod_scalar_exp(a.p, (self.p + 1) // 4, self.p),
                  _powmod_scalar_exp(a.q, (self.q + 1) // 4, self.q) if self.track_q else None)

    def _hash(self, xp, xq, name: str) -> tuple[np.ndarray, np.ndarray | None]:
        # (xp, xq) -> xp·2^31 + xq is injective (residues < 2^31); xor with a key and the
        # splitmix finalizer are bijections of 64-bit words: distinct arguments, distinct h
        k = xp.astype(np.uint64) << np.uint64(31) if xp is not None else np.zeros(xq.shape, np.uint64)
        if xq is not None:
            k = k | xq.astype(np.uint64)
        h = _mix(k ^ _key("uf", name, self.seed))
        hp = (h % np.uint64(self.p)).astype(np.int64)
        hq = (_mix(h ^ _GOLD) % np.uint64(self.q)).astype(np.int64) if self.track_q else None
        return hp, hq

    def unary(self, name, a):
        hp, hq = self._hash(a.p, a.q if self.track_q else None, name)
        return FV(hp, hq)

    def pow(self, a, b):
        """A random function of the pair (a, b): pow with a tensor exponent has no field
        meaning (b is not an integer). The base's injective key (as in `_hash`) is
        mixed, xored with the exponent's and mixed again: injective in each argument,
        two distinct pairs collide with probability about 2^-64."""
        def pack(v):
            k = v.p.astype(np.uint64) << np.uint64(31)
            return k | v.q.astype(np.uint64) if self.track_q else k
        h = _mix(_mix(pack(a) ^ _key("uf2", "pow", self.seed)) ^ pack(b))
        hp = (h % np.uint64(self.p)).astype(np.int64)
        hq = (_mix(h ^ _GOLD) % np.uint64(self.q)).astype(np.int64) if self.track_q else None
        return FV(hp, hq)

    def round(self, v, d):
        return v
