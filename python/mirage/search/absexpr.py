"""Abstract expressions (paper §4.3, Table 1) and the fast subexpression checker.

Two representations:

* **Raw terms** (`Raw`): plain nested tuples, exactly the terms of Table 1
  (`("add", a, b)`, `("sum", k, a)`, `("var", i)`, `("const",)`, ...). The Z3 checker
  (`z3check.py`) reasons about these with the axioms of Table 2.
* **Normal forms** (`NF`, integer ids into an interning table): the canonical
  representative of a term's class under the equivalence axioms A_eq of Table 2.
  A normal form is a multiset of *monomials*; a monomial is
  `sum(count, mul(factors...) / den)` with `factors` a multiset of atoms (inputs, the
  constant leaf, `exp(e)`, `sqrt(e)`, `fn(name, e)`) and `den` a normal form or none.
  The axioms orient into: add/mul flattened and sorted (AC), mul distributed over add,
  div distributed over an added numerator, `mul(x, div(y, z)) -> div(mul(x, y), z)`,
  `div(div(x, y), z) -> div(x, mul(y, z))`, sums merged (`sum(i, sum(j, x)) ->
  sum(i*j, x)`, `sum(1, x) -> x`) and floated to the monomial, products of exps
  merged into one exp of the sum, products of sqrts into one sqrt of the product.

`Table.is_sub(p, o)` decides whether `p` is a subexpression (A_sub) of some term
equivalent (A_eq) to `o`, structurally on normal forms: sub-multisets of monomials,
monomials dividing a monomial (count divides, factors a sub-multiset, denominator a
sub-product), common-factor quotients of several monomials (distributivity read
backwards), exps of sub-sums and sqrts of sub-products, and recursively everything
inside atoms and denominators. Results are cached per (p, o). The tests cross-check it
against the Z3 checker on a corpus.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

Raw = tuple

# -- raw terms ---------------------------------------------------------------------------


class RawBuilder:
    """Expression builder producing raw terms (the `ex` argument of ops.py rules)."""

    def add(self, a, b): return ("add", a, b)
    def mul(self, a, b): return ("mul", a, b)
    def div(self, a, b): return ("div", a, b)
    def exp(self, a): return ("exp", a)
    def sqrt(self, a): return ("sqrt", a)
    def fn(self, name, a): return ("fn", name, a)
    def sum(self, k, a): return a if k == 1 else ("sum", int(k), a)
    def const(self): return ("const",)
    def var(self, i): return ("var", int(i))


def named_functions() -> list[str]:
    """The op table's element-wise operators abstracted as a named function `fn(name, x)`
    (silu, gelu, relu, sigmoid, clamp): uninterpreted, a term holds its argument."""
    from ..core.ops import OPS

    rb = RawBuilder()
    return [n for n, d in OPS.items() if d.arity == 1 and d.absexpr and d.category == "unary"
            and d.absexpr(rb, [rb.var(0)], [(1,)], {}) == ("fn", n, rb.var(0))]


def raw_str(t: Raw) -> str:
    k = t[0]
    if k == "var":
        return f"in{t[1]}"
    if k == "const":
        return "c"
    if k == "sum":
        return f"sum({t[1]}, {raw_str(t[2])})"
    if k == "fn":
        return f"{t[1]}({raw_str(t[2])})"
    return f"{k}(" + ", ".join(raw_str(a) for a in t[1:]) + ")"


# -- normal forms ------------------------------------------------------------------------

class Table:
    """Interning table of normal forms, with the builder API and the checker.

    Node tuples: ("var", i) | ("const",) | ("exp", e) | ("sqrt", e) | ("fn", name, e)
    for atoms; ("mono", count, factors, den) with den 0 for none; ("expr", monos).
    Ids start at 1 (0 means "no denominator")."""

    def __init__(self):
        self.nodes: list[tuple] = [("none",)]
        self.ids: dict[tuple, int] = {}
        self._sub: dict[tuple[int, int], bool] = {}
        self._ops: dict[tuple, int] = {}
        self.checks = 0  # is_sub calls that missed the cache

    def _intern(self, node: tuple) -> int:
        i = self.ids.get(node)
        if i is None:
            i = len(self.nodes)
            self.nodes.append(node)
            self.ids[node] = i
        return i

    # constructors
    def _atom_expr(self, atom: tuple) -> int:
        a = self._intern(atom)
        return self._intern(("expr", (self._intern(("mono", 1, (a,), 0)),)))

    def var(self, i: int) -> int:
        return self._atom_expr(("var", int(i)))

    def const(self) -> int:
        return self._atom_expr(("const",))

    def exp(self, e: int) -> int:
        return self._atom_expr(("exp", e))

    def sqrt(self, e: int) -> int:
        return self._atom_expr(("sqrt", e))

    def fn(self, name: str, e: int) -> int:
        return self._atom_expr(("fn", name, e))

    def monos(self, e: int) -> tuple:
        return self.nodes[e][1]

    def add(self, a: int, b: int) -> int:
        key = ("add", min(a, b), max(a, b))
        r = self._ops.get(key)
        if r is None:
            r = self._ops[key] = self._intern(("expr", tuple(sorted(self.monos(a) + self.monos(b)))))
        return r

    def sum(self, k: int, a: int) -> int:
        k = int(k)
        if k == 1:
            return a
        key = ("sum", k, a)
        r = self._ops.get(key)
        if r is None:
            ms = []
            for m in self.monos(a):
                _, c, f, d = self.nodes[m]
                ms.append(self._intern(("mono", c * k, f, d)))
            r = self._ops[key] = self._intern(("expr", tuple(sorted(ms))))
        return r

    def mul(self, a: int, b: int) -> int:
        key = ("mul", min(a, b), max(a, b))
        r = self._ops.get(key)
        if r is None:
            ms = [self._mono_mul(x, y) for x in self.monos(a) for y in self.monos(b)]
            r = self._ops[key] = self._intern(("expr", tuple(sorted(ms))))
        return r

    def div(self, a: int, b: int) -> int:
        key = ("div", a, b)
        r = self._ops.get(key)
        if r is None:
            ms = []
            for m in self.monos(a):
                _, c, f, d = self.nodes[m]
                ms.append(self._intern(("mono", c, f, self.mul(d, b) if d else b)))
            r = self._ops[key] = self._intern(("expr", tuple(sorted(ms))))
        return r

    def _mono_mul(self, x: int, y: int) -> int:
        _, c1, f1, d1 = self.nodes[x]
        _, c2, f2, d2 = self.nodes[y]
        exps, sqrts, rest = [], [], []
        for a in f1 + f2:
            kind = self.nodes[a][0]
            (exps if kind == "exp" else sqrts if kind == "sqrt" else rest).append(a)
        if len(exps) > 1:
            e = self.nodes[exps[0]][1]
            for a in exps[1:]:
                e = self.add(e, self.nodes[a][1])
            exps = [self._intern(("exp", e))]
        if len(sqrts) > 1:
            e = self.nodes[sqrts[0]][1]
            for a in sqrts[1:]:
                e = self.mul(e, self.nodes[a][1])
            sqrts = [self._intern(("sqrt", e))]
        d = self.mul(d1, d2) if d1 and d2 else (d1 or d2)
        return self._intern(("mono", c1 * c2, tuple(sorted(rest + exps + sqrts)), d))

    # conversions
    def from_raw(self, t: Raw) -> int:
        k = t[0]
        if k == "var":
            return self.var(t[1])
        if k == "const":
            return self.const()
        if k == "sum":
            return self.sum(t[1], self.from_raw(t[2]))
        if k == "fn":
            return self.fn(t[1], self.from_raw(t[2]))
        if k in ("exp", "sqrt"):
            return getattr(self, k)(self.from_raw(t[1]))
        return getattr(self, k)(self.from_raw(t[1]), self.from_raw(t[2]))

    def to_raw(self, e: int) -> Raw:
        """A raw term equivalent (under A_eq) to normal form `e`."""
        terms = [self._mono_raw(m) for m in self.monos(e)]
        out = terms[0]
        for t in terms[1:]:
            out = ("add", out, t)
        return out

    def _atom_raw(self, a: int) -> Raw:
        n = self.nodes[a]
        if n[0] in ("var", "const"):
            return n
        if n[0] == "fn":
            return ("fn", n[1], self.to_raw(n[2]))
        return (n[0], self.to_raw(n[1]))

    def _mono_raw(self, m: int) -> Raw:
        _, c, f, d = self.nodes[m]
        t = self._atom_raw(f[0])
        for a in f[1:]:
            t = ("mul", t, self._atom_raw(a))
        if d:
            t = ("div", t, self.to_raw(d))
        return ("sum", c, t) if c != 1 else t

    def show(self, e: int) -> str:
        return raw_str(self.to_raw(e))

    # -- the subexpression check -----------------------------------------------------

    def is_sub(self, p: int, o: int) -> bool:
        key = (p, o)
        r = self._sub.get(key)
        if r is None:
            self.checks += 1
            self._sub[key] = False  # cycle guard
            r = self._sub[key] = self._is_sub(p, o)
        return r

    def _is_sub(self, p: int, o: int) -> bool:
        if p == o:
            return True
        P, O = self.monos(p), self.monos(o)
        if _submultiset(P, O):
            return True
        if len(P) == 1 and any(self._mono_divides(P[0], m) for m in O):
            return True
        if len(P) >= 2 and self._common_factor(P, O):
            return True
        for m in O:
            _, c, f, d = self.nodes[m]
            if d and self.is_sub(p, d):
                return True
            for a in f:
                for child in self._atom_children(a):
                    if self.is_sub(p, child):
                        return True
        return False

    def _atom_children(self, a: int) -> list[int]:
        n = self.nodes[a]
        if n[0] in ("exp", "sqrt"):
            return [n[1]]
        if n[0] == "fn":
            return [n[2]]
        return []

    def _atom_divides(self, pa: int, oa: int) -> bool:
        """exp(x) divides exp(add(x, y)); sqrt(x) divides sqrt(mul(x, y))."""
        if pa == oa:
            return True
        pn, on = self.nodes[pa], self.nodes[oa]
        if pn[0] != on[0]:
            return False
        if pn[0] == "exp":
            return _submultiset(self.monos(pn[1]), self.monos(on[1]))
        if pn[0] == "sqrt":
            P, O = self.monos(pn[1]), self.monos(on[1])
            return len(P) == 1 and len(O) == 1 and self._mono_divides(P[0], O[0])
        return False

    def _mono_divides(self, pm: int, om: int) -> bool:
        if pm == om:
            return True
        _, pc, pf, pd = self.nodes[pm]
        _, oc, of, od = self.nodes[om]
        if oc % pc:
            return False
        if pd and pd != od:
            if not od:
                return False
            PD, OD = self.monos(pd), self.monos(od)
            if not (len(PD) == 1 and len(OD) == 1 and self._mono_divides(PD[0], OD[0])):
                return False
        return self._factors_divide(pf, of)

    def _factors_divide(self, pf: tuple, of: tuple) -> bool:
        left = Counter(of)
        pending = []
        for a in pf:
            if left[a] > 0:
                left[a] -= 1
            else:
                pending.append(a)
        for a in pending:
            for b in list(left):
                if left[b] > 0 and self._atom_divides(a, b):
                    left[b] -= 1
                    break
            else:
                return False
        return True

    def _quotient(self, om: int, pm: int):
        """(count ratio, remaining factors, den) with om = that * pm, or None."""
        _, pc, pf, pd = self.nodes[pm]
        _, oc, of, od = self.nodes[om]
        if oc % pc:
            return None
        left = Counter(of)
        left.subtract(Counter(pf))
        if any(v < 0 for v in left.values()):
            return None
        rest = tuple(sorted(left.elements()))
        if pd == od:
            return (oc // pc, rest, 0)
        if pd:
            PD, OD = self.monos(pd), self.monos(od) if od else ()
            if not (len(PD) == 1 and len(OD) == 1 and self._mono_divides(PD[0], OD[0])):
                return None
        # the denominators differ by a factor: compare quotients up to that factor (an
        # over-approximation; it only keeps more prefixes)
        return (oc // pc, rest, "*")

    def _common_factor(self, P: tuple, O: tuple) -> bool:
        """add(mul(x, z), mul(y, z)) = mul(add(x, y), z): P's monomials times one common
        factor G are distinct monomials of O (also with counts and denominators)."""
        for first in set(O):
            g = self._quotient(first, P[0])
            if g is None:
                continue
            left = Counter(O)
            left[first] -= 1
            ok = True
            for pm in P[1:]:
                for om in sorted(left):
                    if left[om] > 0 and self._quotient(om, pm) == g:
                        left[om] -= 1
                        break
                else:
                    ok = False
                    break
            if ok:
                return True
        return False


def _submultiset(P: Sequence, O: Sequence) -> bool:
    if len(P) > len(O):
        return False
    c = Counter(O)
    for x in P:
        if c[x] <= 0:
            return False
        c[x] -= 1
    return True


# -- abstract expressions of whole graphs -------------------------------------------------

def graph_exprs(g, ex, in_exprs: Sequence | None = None) -> dict:
    """Abstract expression of every kernel-level tensor of KNGraph `g` (graph-defined
    kernels inlined, as the paper says); keyed by id(tensor)."""
    from ..core import ops as O

    env = {}
    for k, t in enumerate(g.inputs):
        env[id(t)] = ex.var(k) if in_exprs is None else in_exprs[k]
    for op in g.ops:
        xs = [env[id(t)] for t in op.inputs]
        if op.kind == "graph_def":
            outs = block_exprs(op.body, ex, xs)
        else:
            d = O.OPS[op.kind]
            if d.absexpr is None:
                raise ValueError(f"operator '{op.kind}' has no abstract expression")
            outs = [d.absexpr(ex, xs, [t.shape for t in op.inputs], op.attrs)]
        for t, e in zip(op.outputs, outs):
            env[id(t)] = e
    return env


def block_exprs(tb, ex, xs: Sequence) -> list:
    from ..core import ops as O

    env = {}
    for rec, x in zip(tb.inputs, xs):
        env[id(rec.stensor)] = x
    for op in tb.ops:
        ins = [env[id(t)] for t in op.inputs]
        if op.kind == "forloop_accum":
            outs = [O.accum_absexpr(ex, op.attrs["kind"], ins[0], op.inputs[0].shape, tb.forloop_range,
                                    tb.reduction_dimx)]
        elif op.kind == "thread_graph":
            th = op.body
            tenv = {id(s): x for s, x in zip(th.inputs, ins)}
            for top in th.ops:
                d = O.OPS[top.kind]
                tenv[id(top.outputs[0])] = d.absexpr(ex, [tenv[id(t)] for t in top.inputs], [(), ()], top.attrs)
            outs = [tenv[id(s)] for s in th.outputs]
        else:
            d = O.OPS[op.kind]
            if d.absexpr is None:  # e.g. the online-softmax ops: written by hand, not searched
                raise ValueError(f"block-graph operator '{op.kind}' has no abstract expression: the search "
                                 f"cannot take a program that uses it")
            outs = [d.absexpr(ex, ins, [t.shape for t in op.inputs], op.attrs)]
        for t, e in zip(op.outputs, outs):
            env[id(t)] = e
    return [env[id(o.stensor)] for o in tb.outputs]


def output_exprs(g, ex) -> list:
    env = graph_exprs(g, ex)
    return [env[id(t)] for t in g.outputs]
