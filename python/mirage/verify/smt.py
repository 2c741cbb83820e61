"""Formal fallback for small programs outside the Lax fragment: Z3.

`prove_equivalence(reference, candidate, timeout_ms=...)` evaluates both graphs
symbolically on their given (small) shapes with `Z3Arith`, an `Arith` whose values are
numpy object arrays of Z3 real terms, through the one interpreter
(`mirage.core.interpret.evaluate`). Semantics:
- add/sub/mul/div/matmul/sums: real arithmetic; every divisor is assumed non-zero;
- sqrt: an uninterpreted function constrained by sqrt(x) >= 0 and sqrt(x)^2 = x, with
  every sqrt argument assumed >= 0;
- max, relu, clamp: exact (If terms);
- exp, silu, gelu, sigmoid, pow (of both arguments): uninterpreted functions (exp also
  positive), shared by both graphs.
It asks Z3 for inputs where some output element differs: `unsat` = proved (under these
semantics, for all real inputs with non-zero divisors), `sat` = refuted with the
counterexample (inputs, and for uninterpreted functions the model's interpretation), or
`unknown` on timeout / incompleteness (non-linear real arithmetic).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..core.arith import Arith
from ..core.ops import OPS
from ..core.graph import KNGraph
from ..core.interpret import evaluate


@dataclass
class SMTResult:
    status: str  # proved | refuted | unknown
    counterexample: Optional[dict] = None  # input name -> nested list of values
    output: Optional[int] = None  # differing output (refuted)
    index: Optional[tuple] = None
    uses_uninterpreted: bool = False
    reason: str = ""
    assumptions: list = field(default_factory=list)


class Z3Arith(Arith):
    def __init__(self):
        import z3

        self.z3 = z3
        R = z3.RealSort()
        # exp, sqrt and the table's operators with a `real` function (relu is an exact If term)
        self.fns = {n: z3.Function(n, R, R) for n in ("exp", "sqrt") + tuple(d.name for d in OPS.values() if d.real)}
        self.side: list = []  # assumptions: divisors != 0, sqrt arguments >= 0
        self.used_uf = False
        self._seen_sqrt: set = set()

    def _map(self, fn, *arrs):
        return np.vectorize(fn, otypes=[object])(*arrs)

    def from_array(self, a):
        return np.asarray(a, dtype=object)

    def const(self, value, shape):
        from fractions import Fraction

        fr = Fraction(float(value))
        c = self.z3.RealVal(f"{fr.numerator}/{fr.denominator}")
        out = np.empty(tuple(shape), dtype=object)
        out.fill(c)
        return out

    def add(self, a, b): return self._map(lambda x, y: x + y, a, b)
    def sub(self, a, b): return self._map(lambda x, y: x - y, a, b)
    def mul(self, a, b): return self._map(lambda x, y: x * y, a, b)

    def div(self, a, b):
        for y in np.asarray(b).ravel():
            self.side.append(y != 0)
        return self._map(lambda x, y: x / y, a, b)

    def matmul(self, a, b):
        a, b = np.broadcast_arrays(a, b) if a.ndim == b.ndim and a.shape[:-2] != b.shape[:-2] else (a, b)
        out_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        a = np.broadcast_to(a, out_shape[:-2] + a.shape[-2:])
        b = np.broadcast_to(b, out_shape[:-2] + b.shape[-2:])
        out = np.empty(out_shape, dtype=object)
        for idx in np.ndindex(*out_shape[:-2]):
            A, B = a[idx], b[idx]
            for i in range(A.shape[0]):
                for j in range(B.shape[1]):
                    out[idx + (i, j)] = self.z3.Sum([A[i, k] * B[k, j] for k in range(A.shape[1])])
        return out

    def sum(self, a, axis):
        return np.apply_along_axis(lambda v: self.z3.Sum(list(v)), axis, a)[
            (slice(None),) * (axis % a.ndim) + (None,)] if a.shape[axis] else a

    def max(self, a, axis):
        def mx(v):
            m = v[0]
            for x in v[1:]:
                m = self.z3.If(x > m, x, m)
            return m
        return np.expand_dims(np.apply_along_axis(lambda v: mx(list(v)), axis, a), axis)

    def exp(self, a):
        self.used_uf = True
        f = self.fns["exp"]
        out = self._map(lambda x: f(x), a)
        for y in out.ravel():
            self.side.append(y > 0)
        return out

    def sqrt(self, a):
        f = self.fns["sqrt"]
        out = self._map(lambda x: f(x), a)
        for x, y in zip(np.asarray(a).ravel(), out.ravel()):
            key = y.get_id()
            if key not in self._seen_sqrt:
                self._seen_sqrt.add(key)
                self.side += [x >= 0, y >= 0, y * y == x]
        return out

    def clamp(self, a, lo, hi):  # exact: min(max(x, lo), hi)
        z3 = self.z3
        lo_, hi_ = self.const(lo, ())[()], self.const(hi, ())[()]

        def f(x):
            m = z3.If(x > lo_, x, lo_)
            return z3.If(m < hi_, m, hi_)
        return self._map(f, a)

    def pow(self, a, b):  # an uninterpreted function of both arguments
        self.used_uf = True
        if "pow" not in self.fns:
            R = self.z3.RealSort()
            self.fns["pow"] = self.z3.Function("pow", R, R, R)
        f = self.fns["pow"]
        return self._map(lambda x, y: f(x, y), a, b)

    def unary(self, name, a):
        if name == "relu":
            return self._map(lambda x: self.z3.If(x > 0, x, self.z3.RealVal(0)), a)
        self.used_uf = True
        f = self.fns[name]
        return self._map(lambda x: f(x), a)


def prove_equivalence(reference: KNGraph, candidate: KNGraph, timeout_ms: int = 20000,
                      max_elements: int = 4096) -> SMTResult:
    import z3

    if [t.shape for t in reference.inputs] != [t.shape for t in candidate.inputs]:
        return SMTResult("refuted", reason="the inputs differ")
    if any(a.shape != b.shape for a, b in zip(reference.outputs, candidate.outputs)) or \
            len(reference.outputs) != len(candidate.outputs):
        return SMTResult("refuted", reason="the outputs differ in number or shape")
    if sum(int(np.prod(t.shape)) for t in reference.inputs) > max_elements:
        return SMTResult("unknown", reason=f"more than {max_elements} input elements: too large for the SMT check")
    ar = Z3Arith()
    xs = []
    for k, t in enumerate(reference.inputs):
        v = np.empty(t.shape, dtype=object)
        for idx in np.ndindex(*t.shape):
            v[idx] = z3.Real(f"in{k}_" + "_".join(map(str, idx)))
        xs.append(v)
    ro = evaluate(reference, xs, arith=ar)
    co = evaluate(candidate, xs, arith=ar)
    diffs, where = [], []
    for o, (a, b) in enumerate(zip(ro, co)):
        for idx in np.ndindex(*a.shape):
            diffs.append(a[idx] != b[idx])
            where.append((o, idx))
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    s.add(*ar.side)
    s.add(z3.Or(*diffs))
    r = s.check()
    if r == z3.unsat:
        return SMTResult("proved", uses_uninterpreted=ar.used_uf)
    if r == z3.unknown:
        return SMTResult("unknown", reason=s.reason_unknown(), uses_uninterpreted=ar.used_uf)
    m = s.model()
    cex = {}
    for k, v in enumerate(xs):
        cex[f"input {k}"] = np.vectorize(
            lambda e: float(m.eval(e, model_completion=True).as_fraction()), otypes=[float])(v).tolist()
    o, idx = next(w for w, d in zip(where, diffs) if z3.is_true(m.eval(d, model_completion=True)))
    return SMTResult("refuted", counterexample=cex, output=o, index=tuple(int(i) for i in idx),
                     uses_uninterpreted=ar.used_uf,
                     reason=("differs under uninterpreted functions (the counterexample may rely on an "
                             "interpretation of exp/silu/... that no real function has)" if ar.used_uf else ""))
